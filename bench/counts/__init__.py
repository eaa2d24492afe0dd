"""Arithmetic on an attention problem, as pure functions (no torch): FLOPs, bytes and memory (metrics) and the
(query, key) pairs a mask and a sparsity keep or a kernel executes (pairs)."""
