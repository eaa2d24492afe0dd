"""MLA (bench.kinds.mla_calls): one attention call in the shape's form (expanded prefill, absorbed decode), timed alone
as FlashMLA and FlashInfer's MLA kernels take it, and checked end to end (projections included) against the float64
expanded formula. Inference only: a fwd+bwd MLA case is unsupported (attnbench times MLA as models serve it).

Its axes, --kv-lora-rank and --rope-dim, make --variant mla's geometries: --head-dim is qk_nope and v_head_dim
(DeepSeek-V3: 128 both) and --rope-dim is added to it for D_qk. An MLA geometry's cases are its own, not the grid's:
prefill expanded at each --seq, decode absorbed, attention alone, forward, no serving batch, score variant or chunk."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bench.backends.base import Backend, Unsupported
from bench.counts.metrics import ELEMENT_BYTES, attention_bytes, attention_flops, latent_cache_bytes, model_mem_bytes
from bench.kinds.axes import axis, positive_ints_check
from bench.kinds.base import ReferenceCache, cold_inputs, decode_kv_fields, flop_fields
from bench.kinds.dense import batches, dense_check_shape
from bench.kinds.expansion import Geometry, Kind, Point, Registry, offered
from bench.problem.case import Case
from bench.problem.columns import shape_from_fields
from bench.problem.scores import NO_SCORE
from bench.problem.shapes import AttentionShape, case_mask

if TYPE_CHECKING:
    from bench.reference import Check

FORWARD_ONLY = "MLA cases are timed forward only (inference, as DeepSeek models are served); use pass=fwd"


@dataclass(frozen=True)
class MlaAxes:
    kv_lora_ranks: tuple[int, ...] = axis((256,), "kv-lora-rank", "MLA latent widths (DeepSeek-V3: 512 at head dim "
                                          "128; halved like the default --head-dim 64)",
                                          check=positive_ints_check("kv_lora_rank"))
    rope_dims: tuple[int, ...] = axis((32,), "rope-dim", "MLA shared rotary key widths, added to --head-dim for "
                                      "Q/K (DeepSeek-V3: 64 at head dim 128)", check=positive_ints_check("rope_dim"))


class MlaKind(Kind):
    name = "mla"
    axes = MlaAxes

    def variant_geometries(self, sweep: Any, variant: str, n_heads: int,
                           dims: tuple[int, ...]) -> list[Geometry] | None:
        if variant != "mla":
            return None
        return [Geometry(n_heads, n_heads, head_dim + rope, sweep.masks, v_head_dim=head_dim, kv_lora_rank=rank,
                         rope_dim=rope)
                for head_dim in dims for rank in sweep.kv_lora_ranks for rope in sweep.rope_dims]

    def cases(self, sweep: Any, g: Geometry, point: Point, device: str, kinds: Registry) -> list[Case] | None:
        """An MLA geometry's cases: prefill expanded (each --seq, scope attention, fwd), decode absorbed; none with a
        score variant or a chunk (bench.problem.shapes says why)."""
        if not g.is_mla:
            return None
        if point["score"] != "none" or case_mask(point["mask"]).variants:
            return []
        out: list[Case] = []
        if "prefill" in sweep.phases and "attention" in sweep.scopes and "fwd" in sweep.passes and not sweep.lengths:
            prefill = point | g.mla_fields("expanded")
            for seq in sweep.seqs:
                for batch in batches(sweep, seq):
                    at = prefill | {"batch": batch, "seq_q": seq, "seq_kv": seq}
                    if g.keeps_all(at):
                        continue
                    shape = shape_from_fields(at)
                    out += [Case(b, shape, "prefill", "fwd", device) for b in sweep.backends if offered(b, shape)]
        if "decode" in sweep.phases and point["mask"] != "none" and not sweep.page_sizes and not sweep.lengths:
            decode = point | g.mla_fields("absorbed")
            for sq, kv, batch in itertools.product(sweep.decode_q, sweep.decode_kv, sweep.batches):
                at = decode | {"batch": batch, "seq_q": sq, "seq_kv": kv}
                if g.keeps_all(at):
                    continue
                shape = shape_from_fields(at)
                out += [Case(b, shape, "decode", "fwd", device) for b in sweep.backends if offered(b, shape)]
        return out

    def record_fields(self, case: Case, backend: Backend) -> dict[str, float | None]:
        s = case.shape
        latent = s.mla.kv_lora_rank + s.mla.rope_dim  # type: ignore[operator]
        flops = attention_flops(s, case.pass_)
        return {"flops": flops, "bytes": attention_bytes(s), **flop_fields(case, backend, flops),
                "model_mem_bytes": model_mem_bytes(s, backend.memory, case.pass_),
                "real_tokens": s.batch * s.seq_q,
                **decode_kv_fields(case, lambda: latent_cache_bytes(1, latent, s.seq_kv, s.batch, s.dtype,
                                                                    window=s.mask.window))}

    def predicted_bytes(self, case: Case, backend: Backend) -> int:
        s = case.shape  # the call's inputs as built (expanded K/V at Hq heads) and the model's peak above them
        e = ELEMENT_BYTES[s.dtype]
        inputs = s.batch * s.n_kv_heads * s.seq_kv * (s.qk_dim + s.value_dim) * e
        return inputs + (model_mem_bytes(s, backend.memory, "fwd") or 0)

    def check_shape(self, shape: AttentionShape) -> AttentionShape:
        return dense_check_shape(shape)

    def setup(self, case: Case) -> None:
        if case.pass_ != "fwd":
            raise Unsupported(FORWARD_ONLY)
        return None

    def check(self, case: Case, setup: Any, references: ReferenceCache) -> tuple[Check, float]:
        import torch

        from bench.backends import attention
        from bench.kinds.mla_calls import call_tensors, finish, make_mla_inputs, reference_mla
        from bench.measure.timer import sync
        from bench.reference import TOLERANCES, Check, compare_to_reference

        shape = self.check_shape(case.shape)
        x = make_mla_inputs(shape, case.device, seed=0)
        q, k, v = call_tensors(shape, x)
        t0 = time.perf_counter()
        with torch.no_grad():
            out = attention(q, k, v, backend=case.backend, mask=shape.mask)
        sync(case.device)
        seconds = time.perf_counter() - t0
        if tuple(out.shape) != shape.out_shape:
            return Check(False, float("inf"), *TOLERANCES[q.dtype]), seconds
        ref = references.get((self.name, shape, case.device), lambda: reference_mla(shape, x))
        return compare_to_reference(finish(shape, out, x), ref), seconds

    def gradients(self, case: Case, setup: Any) -> Check:
        raise Unsupported(FORWARD_ONLY)

    def timed_call(self, case: Case, setup: Any) -> Callable[[], object]:
        """The backend itself on the call's tensors (drawn from another seed than the check's)."""
        import torch

        from bench.backends import get_backend
        from bench.backends.base import bind
        from bench.kinds.guards import TimedGuard
        from bench.kinds.mla_calls import call_tensors, make_mla_inputs
        from bench.measure.rotation import Rotating
        from bench.reference import reference_attention

        s = case.shape
        q, k, v = call_tensors(s, make_mla_inputs(s, case.device, seed=1))
        exact = dense_check_shape(s) == s  # the call's own float64 reference fits: the last output is checked
        mask = s.mask  # MLA takes no score variant (bench.problem.shapes)
        fn = bind(get_backend(case.backend).fn, mask, NO_SCORE)
        guard = TimedGuard({"q": q, "k": k, "v": v}, (lambda t: reference_attention(
            t["q"], t["k"], t["v"], mask=mask)) if exact else None, s.out_shape)

        if cold_inputs(case):  # the absorbed decode reads the latent cache [c ; k_rope] (v = c, a view of it)
            rank = v.shape[-1]
            one_cache = v.data_ptr() == k.data_ptr()

            def step(k_cache, v_cache=None):
                with torch.no_grad():
                    return guard.keep(fn(q, k_cache, k_cache[..., :rank] if one_cache else v_cache))
            call = Rotating(step, (k,) if one_cache else (k, v))
            call.guard = guard
            return call

        def forward():
            with torch.no_grad():
                return guard.keep(fn(q, k, v))
        forward.guard = guard  # type: ignore[attr-defined]
        return forward
