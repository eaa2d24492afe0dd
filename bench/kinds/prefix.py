"""Shared-prefix batches (bench.prefix): B requests whose contexts begin with the same P tokens, each followed by
L tokens of its own, attended plain by every dense backend (each request over its whole context, the prefix's K/V
copied into every request's cache and read B times) and by cascade by the cascade backends (bench.backends.cascade:
the prefix attended once for all the batch's queries, each suffix apart, merged per query row and head by
log-sum-exp).

Its axes, and how a point maps onto a shape (bench.problem.prefix):
  --prefix P   the shared tokens (P >= 1); a sweep that sets it runs shared-prefix cases alone (its dense grid is
               not swept beside them), for every geometry but MLA's, at every --batch B;
  --suffix L   each request's own tokens after the prefix (default 128); the case's context is seq_kv = P + L, so
               its id reads kv{P+L}-prefix={P};
  phases       decode: each --decode-q (seq_q, 1 for one step; every value at most each --suffix, else a usage
               error) against the whole context; prefill: the suffixes' prefill over the cached prefix, seq_q = L
               queries per request (recorded as phase prefill, though seq_q < seq_kv: it is the suffix's prefill).
The mask is causal (bottom-right: every query sees the whole prefix and its suffix up to itself) or none (prefill
only: decode under none would repeat causal, as the dense grid's); any other mask, a score variant, a sparsity or a
linear method leaves the point out. Forward only (fwd+bwd is left out of the grid, and Unsupported if asked).

The record: flops are plain attention's over the whole context for both methods (the cascade computes the same pairs
split in two); bytes are the method's own minimum traffic, and plain_bytes and cascade_bytes both (bench.prefix.
counts: plain reads the prefix's K/V B times, cascade once); a decode case's kv_cache_bytes are the K/V its method
reads. Every case is checked against float64 plain attention over the whole context (bench.reference), on the case
itself while B * Hq * Sq * (P + L) fits EXACT_CHECK_ELEMENTS, else on a copy with the batch halved (to 2), then the
queries and suffix, then the prefix halved until it fits. The timed call runs inputs of another seed; a plain
call's whole-context K/V is built before it (a plain cache holds it so), a cascade call's parts and merge inside it.
Paged plain attention (bench.serving's paged layouts) is not offered here: those draw each sequence's own context
and would need a page table that shares the prefix's pages.
"""

from __future__ import annotations

import dataclasses
import importlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bench.backends import get_backend
from bench.backends.base import Backend, Unsupported
from bench.counts.metrics import model_mem_bytes
from bench.errors import UsageError
from bench.kinds.axes import axis, ints, positive_ints_check
from bench.kinds.base import ReferenceCache, cold_inputs, decode_kv_fields, fits_exactly, flop_fields
from bench.kinds.expansion import Geometry, Kind, Point, Registry, offered
from bench.prefix.counts import kv_bytes, method_bytes, prefix_flops
from bench.problem.case import Case
from bench.problem.columns import shape_from_fields
from bench.problem.prefix import PREFIX_MASKS
from bench.problem.shapes import AttentionShape

if TYPE_CHECKING:
    from bench.reference import Check

FORWARD_ONLY = "shared-prefix batches are timed forward only (inference: decode steps and suffix prefills)"


@dataclass(frozen=True)
class PrefixAxes:
    prefixes: tuple[int, ...] | None = axis(None, "prefix", "shared-prefix batches: the prefix lengths P every "
                                            "request's context begins with, e.g. 1024,4096,16384 (each request's "
                                            "context is P + --suffix; the sweep then runs these batches alone, plain "
                                            "on the dense backends and by cascade on cascade-*)", ints,
                                            positive_ints_check("prefix"))
    suffixes: tuple[int, ...] = axis((128,), "suffix", "shared-prefix batches: each request's own tokens after the "
                                     "prefix, e.g. 64,256 (decode: --decode-q queries against P + L keys; prefill: "
                                     "the L suffix tokens over the cached prefix)", ints,
                                     positive_ints_check("suffix"))


def method_of(backend: Backend) -> str:
    """plain (a dense backend over each request's whole context) or cascade (a cascade backend)."""
    return "cascade" if backend.cascade else "plain"


def prefix_check_shape(shape: AttentionShape) -> AttentionShape:
    """The case, or a copy shrunk until its float64 reference fits (module docstring's order)."""
    s = shape
    assert s.prefix is not None, "a shared-prefix shape"
    while not fits_exactly(s.batch * s.n_heads * s.seq_q * s.seq_kv):
        suffix = s.seq_kv - s.prefix
        if s.batch > 2:
            s = dataclasses.replace(s, batch=max(2, s.batch // 2))
        elif s.seq_q > 16:
            seq_q = s.seq_q // 2
            s = dataclasses.replace(s, seq_q=seq_q, seq_kv=s.prefix + max(seq_q, suffix // 2))
        elif s.prefix > 256:
            s = dataclasses.replace(s, prefix=s.prefix // 2, seq_kv=s.prefix // 2 + suffix)
        else:
            break
    return s


def cascade_impl(backend: str) -> Callable[..., Any]:
    """The function a cascade backend runs (bench.backends.cascade.CASCADE_IMPLEMENTATIONS)."""
    from bench.backends.cascade import CASCADE_IMPLEMENTATIONS

    module, _, name = CASCADE_IMPLEMENTATIONS[backend].partition(":")
    return getattr(importlib.import_module(module), name)


class PrefixKind(Kind):
    name = "prefix"
    axes = PrefixAxes

    def cases(self, sweep: Any, g: Geometry, point: Point, device: str, kinds: Registry) -> list[Case] | None:
        """With --prefix: the point's shared-prefix batches (module docstring), every backend that runs them: the
        cascade backends and every dense one (plain); None (not this kind's) without --prefix or for MLA."""
        if sweep.prefixes is None or g.is_mla:
            return None
        too_many = [q for q in sweep.decode_q if q > min(sweep.suffixes)]
        if "decode" in sweep.phases and too_many:
            raise UsageError(f"--decode-q {too_many[0]} exceeds --suffix {min(sweep.suffixes)}: a request's queries "
                             "lie in its own suffix")
        plain = all(point.get(name, "none") == "none" for name in ("score", "sparsity", "linear"))
        if not plain or point["mask"] not in PREFIX_MASKS:
            return []
        steps = [("prefill", suffix) for suffix in sweep.suffixes] * ("prefill" in sweep.phases)
        if "decode" in sweep.phases and point["mask"] == "causal":
            steps += [("decode", q) for q in sweep.decode_q]
        out: list[Case] = []
        for prefix in sweep.prefixes:
            for suffix in sweep.suffixes:
                for phase, seq_q in steps:
                    if phase == "prefill" and seq_q != suffix:
                        continue
                    for batch in sweep.batches:
                        shape = shape_from_fields(point | {"batch": batch, "seq_q": seq_q, "seq_kv": prefix + suffix,
                                                           "prefix": prefix})
                        out += [Case(b, shape, phase, "fwd", device) for b in sweep.backends
                                if get_backend(b).cascade or offered(b, shape)]
        return out

    def plan_lines(self, parts: list[Any]) -> list[str]:
        asked = [p for p in parts if p.prefixes is not None]
        if not asked:
            return []
        return ["shared-prefix batches: plain attention on the dense backends (the prefix's K/V in every request's "
                "cache) against cascade-* (the prefix attended once, suffixes apart, merged by log-sum-exp); "
                "checked against float64 plain attention"]

    def record_fields(self, case: Case, backend: Backend) -> dict[str, float | None]:
        s = case.shape
        method, flops = method_of(backend), prefix_flops(s)
        executed = flop_fields(case, backend, flops) if method == "plain" else {"useful_flops": flops}
        return {"flops": flops, "bytes": method_bytes(s, method), "plain_bytes": method_bytes(s, "plain"),
                "cascade_bytes": method_bytes(s, "cascade"), "model_mem_bytes": self.predicted_bytes(case, backend),
                "real_tokens": s.batch * s.seq_q, **executed, **decode_kv_fields(case, lambda: kv_bytes(s, method))}

    def predicted_bytes(self, case: Case, backend: Backend) -> int:
        """The inputs (prefix once, suffixes, a plain call's whole-context copy) and the dense call's working memory
        (its scores where it materialises them), the cascade's float32 partial outputs beside them."""
        s = case.shape
        inputs = method_bytes(s, "plain") + kv_bytes(s, "cascade")
        partial = 3 * s.batch * s.n_heads * s.seq_q * (s.head_dim + 1) * 4 if backend.cascade else 0
        return inputs + (model_mem_bytes(s, backend.memory, "fwd") or 0) + partial

    def check_shape(self, shape: AttentionShape) -> AttentionShape:
        return prefix_check_shape(shape)

    def setup(self, case: Case) -> Backend:
        backend = get_backend(case.backend)
        if why := backend.unsupported_reason(case.device, case.shape.dtype):
            raise Unsupported(why)
        if case.pass_ != "fwd":
            raise Unsupported(FORWARD_ONLY)
        return backend

    def _call(self, case: Case, backend: Backend, shape: AttentionShape, seed: int, checked: bool):
        """(the call, its inputs): the cascade's function on the parts, or the dense backend on the whole context; a
        Rotating call whose cold inputs are the cache it reads (the prefix once and the suffixes, or each request's
        whole context), the queries apart."""
        import torch

        from bench.backends import attention
        from bench.backends.base import bind
        from bench.measure.rotation import Rotating
        from bench.prefix.cascade import make_inputs
        from bench.problem.scores import NO_SCORE

        x = make_inputs(shape, case.device, seed)
        if backend.cascade:
            fn = cascade_impl(case.backend)

            def run(k_prefix, v_prefix, k_suffix, v_suffix) -> torch.Tensor:
                return fn(x.q, k_prefix, v_prefix, k_suffix, v_suffix, mask=shape.mask)
            return Rotating(run, (x.k_prefix, x.v_prefix, x.k_suffix, x.v_suffix)), x
        k, v = x.whole()  # outside the call: a plain cache holds every request's whole context
        if checked:  # bench.attention's checks and refusals, as the dense kind's check runs it
            return (lambda: attention(x.q, k, v, backend=case.backend, mask=shape.mask)), x
        bound = bind(backend.fn, shape.mask, NO_SCORE)
        return Rotating(lambda k, v: bound(x.q, k, v), (k, v)), x

    def check(self, case: Case, setup: Backend, references: ReferenceCache) -> tuple[Check, float]:
        import torch

        from bench.measure.timer import sync
        from bench.reference import TOLERANCES, Check, compare_to_reference, reference_attention

        shape = self.check_shape(case.shape)
        call, x = self._call(case, setup, shape, seed=0, checked=True)
        t0 = time.perf_counter()
        with torch.no_grad():
            out = call()
        sync(case.device)
        seconds = time.perf_counter() - t0
        if tuple(out.shape) != tuple(x.q.shape):
            return Check(False, float("inf"), *TOLERANCES[x.q.dtype]), seconds

        def reference() -> torch.Tensor:
            k, v = x.whole()
            return reference_attention(x.q, k, v, mask=shape.mask)
        return compare_to_reference(out, references.get((self.name, shape, case.device), reference)), seconds

    def gradients(self, case: Case, setup: Backend) -> Check:
        raise Unsupported(FORWARD_ONLY)

    def timed_call(self, case: Case, setup: Backend) -> Callable[[], object]:
        import torch

        call, _ = self._call(case, setup, case.shape, seed=1, checked=False)
        if cold_inputs(case):  # a decode step reads its cache (prefix and suffixes) cold; a suffix prefill is warm
            return call.wrapped(torch.no_grad())

        def forward() -> object:
            with torch.no_grad():
                return call()
        return forward
