// What torch's compiled FlexAttention kernel for the CPU includes (torch 2.13's C++ template), all in one header
// that tests/conftest.py has inductor precompile in place of cpp_prefix.h alone. Every kernel still includes these
// itself; precompiled, g++ no longer parses them once per compiled shape.
#include <torch/csrc/inductor/cpp_prefix.h>
#include <c10/util/Unroll.h>
#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <ATen/native/cpu/utils.h>
#include <ATen/native/CPUBlas.h>
#include <ATen/Context.h>
