"""Linear attention (bench.linear): gated DeltaNet, plain causal linear attention, Mamba-2's SSD or Kimi Delta
Attention in place of softmax, swept beside the dense cases of the same batch, heads, head dim and lengths, so a
report can say from which length it wins.

A shape with a linear method (bench.problem.linear: its `linear` field, gdn:64 / linear:64 / mamba2:64 / kda:64) maps
onto bench.linear.shape.LinearShape as value heads = n_heads (the output's), query/key heads = n_kv_heads
(Qwen3-Next's grouping; Mamba-2's B/C groups), d_k = d_v = head_dim, seq = seq_kv. Its phases:
  prefill  seq_q == seq_kv tokens through the chunked form (chunks of the field's C, which divides the length);
  decode   one recurrent step (seq_q = 1) from a float32 state; its cost does not depend on seq_kv, which names only
           the context the state summarises.
The backends are the registry's whose `linear` trait lists the method (bench.backends.linear: hf-gdn, torch-linear,
fla-gdn, hf-mamba2, hf-kda); each runs its own prefill or decode implementation of bench.linear.backends.

What the record holds (formulas of bench.linear.counts):
  flops           prefill: the chunked algorithm's products and gdn's triangular solves (chunk_flops +
                  chunk_solve_flops); decode: the recurrence's products for one token (recurrent_flops)
  bytes           prefill: q, k, v, g, beta read, o written (token_bytes: mamba2 reads dt for g and beta, kda a g
                  per key channel), the final float32 state written; decode: the state read
                  and written once plus the token's inputs and output (decode_bytes): a decode step's traffic is its
                  state, not a KV cache
  kv_cache_bytes  decode: the recurrent state's bytes (what a step reads in place of a KV cache)
The check runs the implementation against bench.linear.reference's float64 recurrence: a prefill longer than
CHECK_TOKENS is checked on a shorter copy (whole chunks, at least two where the case has two: the recurrence is a
Python loop over tokens), a decode step from a drawn state. The timed call runs inputs of another seed. Linear cases
are timed forward only: fwd+bwd is Unsupported with one line.

Its axis, --linear, sweeps each method as a shape field; the grid leaves a linear point out unless its mask is
causal and the rest plain (no score variant, sparsity, MLA, model, layer or serving batch), and a decode point unless
it is one token. A hybrid model's linear layers (bench.kinds.model) come as a ModelLinearGeometry: the model's name
with its one linear method fixed, swept at the model's lengths; its prefill points whose length the chunk does not
divide are left out (a model sweep's --seq is the user's, not the chunk's), and --linear does not apply to it.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bench.backends.base import Backend, Unsupported
from bench.kinds.axes import axis, words
from bench.kinds.base import ReferenceCache, cold_inputs
from bench.kinds.expansion import Geometry, Kind, Point
from bench.linear.counts import (
    chunk_flops,
    chunk_solve_flops,
    decode_bytes,
    recurrent_flops,
    recurrent_state_bytes,
    token_bytes,
)
from bench.linear.shape import LinearShape
from bench.problem.case import Case
from bench.problem.linear import Linear
from bench.problem.shapes import AttentionShape

if TYPE_CHECKING:
    from bench.reference import Check

CHECK_TOKENS = 256  # a prefill longer than this is checked on a shorter copy (the float64 recurrence is a loop)
FORWARD_ONLY = "linear attention is timed forward only (its backward is not wired in): time fwd"


def linear_labels(text: str) -> tuple[str, ...]:
    """--linear's values, each as its label (gdn -> gdn:64): what case ids and files hold."""
    from bench.problem.shapes import ShapeError, parsed

    out = tuple(parsed(Linear.parse, word).label for word in words(text))
    if not out:
        raise ShapeError("--linear: give none or one or more of gdn[:C], linear[:C], mamba2[:C], kda[:C]")
    return out


@dataclass(frozen=True)
class LinearAxes:
    linears: tuple[str, ...] = axis(("none",), "linear", "linear attention in place of softmax: none,gdn,linear:32 "
                                    "(methods gdn, linear, mamba2, kda; none: the softmax twins; METHOD[:CHUNK], "
                                    "the chunk a power of two dividing each prefill length, 64 when left out; see "
                                    "bench.problem.linear); a backend is offered the methods its `linear` trait lists",
                                    linear_labels, shape_field="linear")


@dataclass(frozen=True)
class ModelLinearGeometry(Geometry):
    """A hybrid model's linear layers as one linear geometry: n_heads = value heads, n_kv_heads = key heads,
    head_dim = d_k = d_v, `linear` the method and chunk (gdn:64); masks ("causal",), model set."""

    linear: str = "none"

    def axis_values(self, name: str, values: tuple) -> tuple:
        """Its own method replaces --linear; no score variant or sparsity goes with a linear case."""
        if name == "linear":
            return (self.linear,)
        if name in ("score", "sparsity"):
            return ("none",)
        return values


def phase_of(shape: AttentionShape) -> str:
    """prefill where seq_q == seq_kv, else decode (one token after seq_kv)."""
    return "prefill" if shape.seq_q == shape.seq_kv else "decode"


def linear_shape(shape: AttentionShape) -> LinearShape:
    """The bench.linear shape of a linear case (module docstring: value heads = n_heads, q/k heads = n_kv_heads)."""
    lin = shape.linear
    if lin.method is None:
        raise ValueError("a softmax shape has no linear shape")
    return LinearShape(shape.batch, shape.n_kv_heads, shape.n_heads, shape.head_dim, shape.head_dim, shape.seq_kv,
                       shape.dtype, lin.chunk, lin.method, phase_of(shape))  # type: ignore[arg-type]


def linear_flops(shape: AttentionShape) -> int:
    """The record's flops of a linear call (module docstring)."""
    ls = linear_shape(shape)
    return chunk_flops(ls) + chunk_solve_flops(ls) if ls.phase == "prefill" else recurrent_flops(ls)


def linear_bytes(shape: AttentionShape) -> int:
    """The record's bytes of a linear call (module docstring)."""
    ls = linear_shape(shape)
    if ls.phase == "decode":
        return decode_bytes(ls)
    return ls.batch * ls.tokens * token_bytes(ls) + recurrent_state_bytes(ls)


def implementation(backend: str, phase: str) -> Callable[..., Any]:
    """The bench.linear implementation `backend` runs for `phase`."""
    from bench.backends.linear import LINEAR_IMPLEMENTATIONS
    from bench.linear.backends import IMPLEMENTATIONS

    if backend not in LINEAR_IMPLEMENTATIONS:
        raise Unsupported(f"{backend}: not a linear-attention backend (bench.backends.linear)")
    name = LINEAR_IMPLEMENTATIONS[backend][0 if phase == "prefill" else 1]
    return next(impl.fn for impl in IMPLEMENTATIONS if impl.name == name)


class LinearKind(Kind):
    name = "linear"
    axes = LinearAxes

    def refuses(self, g: Geometry, point: Point) -> bool:
        """A linear point is one causal call with nothing else set (a model's only as its linear layers'
        geometry, a prefill there only at lengths its chunk divides), and a decode point one token."""
        if point.get("linear", "none") == "none":
            return False
        layers = isinstance(g, ModelLinearGeometry)
        plain = (point.get("mask") == "causal" and point.get("score", "none") == "none"
                 and point.get("sparsity", "none") == "none" and point.get("scope", "attention") == "attention"
                 and point.get("lengths") is None and point.get("page_size") is None and not g.is_mla
                 and (g.model is None or layers))
        one_token = "seq_q" not in point or point["seq_q"] in (1, point.get("seq_kv"))
        prefill = "seq_q" in point and point["seq_q"] == point.get("seq_kv")
        divides = not (layers and prefill and point["seq_q"] % Linear.parse(point["linear"]).chunk)
        return not (plain and one_token and divides)

    def predicted_flops(self, case: Case) -> float:
        return float(linear_flops(case.shape))

    def reference_flops(self, shape: AttentionShape, pass_: str) -> float:
        """The float64 recurrence: its products for every token of the check shape."""
        return float(recurrent_flops(linear_shape(shape)))

    def record_fields(self, case: Case, backend: Backend) -> dict[str, float | None]:
        s = case.shape
        flops = linear_flops(s)
        state = recurrent_state_bytes(linear_shape(s))
        return {"flops": flops, "bytes": linear_bytes(s), "model_mem_bytes": self.predicted_bytes(case, backend),
                "real_tokens": s.batch * s.seq_q, "useful_flops": flops, "executed_flops": flops,
                **({"kv_cache_bytes": state} if case.phase == "decode" else {})}

    def predicted_bytes(self, case: Case, backend: Backend) -> int:
        """The call's inputs and output, their float32 working copies, the state, and a prefill's C x C blocks: kda's
        are d_k deep (a decay per key channel) and transformers holds three of them at once (the decay mask and two
        products of it; measured: 189 MiB grown over a 1,024-token prefill at 4 heads, d_k 64, where this says 192)."""
        ls = linear_shape(case.shape)
        io = linear_bytes(case.shape)
        deep = 3 * ls.d_k if ls.method == "kda" else 1
        blocks = ls.batch * ls.v_heads * ls.tokens * ls.chunk * 4 * deep if ls.phase == "prefill" else 0
        return 3 * io + 2 * recurrent_state_bytes(ls) + blocks

    def check_shape(self, shape: AttentionShape) -> AttentionShape:
        """A prefill of more than CHECK_TOKENS: whole chunks up to CHECK_TOKENS (two at least, where it has two); a
        decode step as it is (its cost is the state's)."""
        if phase_of(shape) == "decode" or shape.seq_q <= CHECK_TOKENS:
            return shape
        chunk = shape.linear.chunk
        n = min(shape.seq_q // chunk, max(2, CHECK_TOKENS // chunk))
        return dataclasses.replace(shape, seq_q=n * chunk, seq_kv=n * chunk)

    def setup(self, case: Case) -> None:
        if case.pass_ != "fwd":
            raise Unsupported(FORWARD_ONLY)
        return None

    def check(self, case: Case, setup: Any, references: ReferenceCache) -> tuple[Check, float]:
        import torch

        from bench.linear.inputs import make_inputs
        from bench.linear.reference import TOLERANCES, error, reference_prefill
        from bench.measure.timer import sync
        from bench.reference import Check

        shape = self.check_shape(case.shape)
        ls = linear_shape(shape)
        fn = implementation(case.backend, ls.phase)
        x = make_inputs(ls, case.device, seed=0)
        start = None if x.state is None else x.state.clone()  # a step may update its state in place (hf-mamba2)
        t0 = time.perf_counter()
        with torch.no_grad():
            out, state = fn(*x.tensors, state=x.state, chunk=ls.chunk, **x.params)
        sync(case.device)
        seconds = time.perf_counter() - t0
        tol = TOLERANCES[x.v.dtype]
        if tuple(out.shape) != (ls.batch, ls.tokens, ls.v_heads, ls.d_v):
            return Check(False, float("inf"), tol, tol), seconds
        ref_out, ref_state = references.get((self.name, shape, case.device),
                                            lambda: reference_prefill(ls.method, *x.tensors, state=start,
                                                                      **x.params))
        err = max(error(out, ref_out), error(state, ref_state))
        return Check(err <= tol, err, tol, tol), seconds

    def gradients(self, case: Case, setup: Any) -> Check:
        raise Unsupported(FORWARD_ONLY)

    def timed_call(self, case: Case, setup: Any) -> Callable[[], object]:
        """The implementation on the case's own shape, inputs of another seed than the check's (a decode step from
        a drawn state)."""
        import torch

        from bench.linear.inputs import make_inputs
        from bench.measure.rotation import Rotating

        ls = linear_shape(case.shape)
        fn = implementation(case.backend, ls.phase)
        x = make_inputs(ls, case.device, seed=1)
        if cold_inputs(case) and x.state is not None:  # a decode step reads (and writes) the layer's state cold
            def step(state: torch.Tensor) -> object:
                with torch.no_grad():
                    return fn(*x.tensors, state=state, chunk=ls.chunk, **x.params)
            return Rotating(step, (x.state,))

        def call() -> object:
            with torch.no_grad():
                return fn(*x.tensors, state=x.state, chunk=ls.chunk, **x.params)
        return call
