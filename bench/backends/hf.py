"""transformers' attention implementations, called as a model calls them: the function transformers registers for an
`attn_implementation` (ALL_ATTENTION_FUNCTIONS; "eager" is the Llama module's eager_attention_forward), given the
mask transformers' own mask utilities build for it (masking_utils.ALL_MASK_ATTENTION_FUNCTIONS: a boolean tensor
for sdpa, an additive float tensor for eager, a BlockMask for flex; None where transformers skips the mask and lets
SDPA's is_causal do it), its scaling 1/sqrt(D), and a layer that says its KV-head grouping (num_key_value_groups)
and whether it is causal.

Masks: causal (causal_mask_function), a sliding window of W (sliding_window_causal_mask_function: a query sees
itself and the W-1 keys before it) or none (bidirectional_mask_function); bottom-right aligned for Sq < Skv by the
query offset Skv - Sq, as a model decoding against its cache passes its cache position: each mask equals what
create_causal_mask / create_sliding_window_causal_mask return for a model whose cache holds Skv - Sq tokens in a
full-attention layer (a sliding cache layer keeps only the last W-1 keys: fewer keys, the same skip). transformers
skips the mask only where skips_mask says (its sdpa path, one query or Sq == Skv); a chunked prefill (1 < Sq < Skv)
and a window shorter than the keys get a materialised mask. transformers builds the mask once per forward and
shares it across layers, so it is built on a shape's first call and kept: the timed call is one layer's attention,
and time_mask_build times the build apart (the record's mask_build_s). Outputs come back (B, S, H, D) and are
returned (B, Hq, Sq, D). transformers is optional (`pip install 'attnbench[hf]'`): without it each
call is Unsupported, with that reason. hf-flex compiles transformers' flex call per shape; where torch's compiler
fails on it (inductor's CPU code generation does for some shapes on some CPUs), the case is Unsupported with a
reason that starts COMPILE_FAILED and names torch's error: torch's bug, reported as such, not a wrong answer of
attnbench's.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from bench.backends import TRANSFORMERS_IMPLEMENTATIONS
from bench.backends.base import Unsupported
from bench.problem.masks import Mask
from bench.problem.scores import Score
from bench.problem.shapes import AttentionShape

if TYPE_CHECKING:  # annotations only: the report imports skips_mask and never torch
    import torch

IMPLEMENTATIONS = TRANSFORMERS_IMPLEMENTATIONS
COMPILE_FAILED = "hf-flex: torch's compiler could not build transformers' flex kernel for this shape"
SKIPS, BUILDS = "skips the mask", "builds the mask"  # the two kinds of shape transformers' paths are judged at


def skips_mask(name: str, seq_q: int, seq_kv: int, mask: Mask) -> bool:
    """Whether transformers builds no mask for this layer's shape and leaves causality to SDPA's is_causal
    (masking_utils._ignore_causal_mask_sdpa with no padding mask): only its sdpa path, at one query or a square call
    (Sq == Skv, so the query offset is 0), and under a window or chunk only while it spans every key (Skv < W).
    Everywhere else it builds one: a chunked prefill (1 < Sq < Skv, queries offset by the cache), a window shorter
    than the keys, a padded batch (not run here); eager always builds its additive mask, flex its BlockMask."""
    return (IMPLEMENTATIONS.get(name) == "sdpa" and all(seq_kv < s for s in (mask.window, mask.chunk) if s)
            and (seq_q == 1 or seq_q == seq_kv))


def mask_kind(name: str, seq_q: int, seq_kv: int, mask: Mask) -> str:
    """SKIPS or BUILDS: the shape kind of one call of transformers' path `name`."""
    return SKIPS if skips_mask(name, seq_q, seq_kv, mask) else BUILDS


def _transformers(name: str) -> Any:
    try:
        import transformers.masking_utils as masking
        from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
    except ImportError as err:
        raise Unsupported(f"{name}: transformers is not importable ({err}); pip install 'attnbench[hf]'") from None
    return masking, ALL_ATTENTION_FUNCTIONS


def _eager_function(name: str, score: Score) -> Any:
    """Each model module defines its own eager function: Llama's (the one most models copy), Gemma-2's where the
    model soft-caps its logits, gpt-oss's where it has sinks."""
    if score.softcap is not None and score.sinks:
        raise Unsupported(f"{name}: no transformers model's eager path takes softcap and sinks together")
    if score.sinks:
        from transformers.models.gpt_oss.modeling_gpt_oss import eager_attention_forward
    elif score.softcap is not None:
        from transformers.models.gemma2.modeling_gemma2 import eager_attention_forward
    else:
        from transformers.models.llama.modeling_llama import eager_attention_forward
    return eager_attention_forward


def _attention_function(name: str, score: Score) -> Any:
    masking, functions = _transformers(name)
    impl = IMPLEMENTATIONS[name]
    if impl == "flex_attention":  # each shape's mask is a new closure, so a new compile: never fall back to eager
        from bench.backends.flex import raise_recompile_limits

        raise_recompile_limits()
    if impl == "eager":
        return _eager_function(name, score)
    if impl not in functions:
        raise Unsupported(f"{name}: this transformers has no {impl!r} attention function")
    return functions[impl]


def _mask_function(masking: Any, mask: Mask) -> Any:
    if mask.chunk is not None:
        raise Unsupported("hf backends: chunked masks need transformers' per-model padding arguments; not wired in")
    if not mask.causal:
        return masking.bidirectional_mask_function
    if mask.window is not None:
        return masking.sliding_window_causal_mask_function(mask.window)
    return masking.causal_mask_function


def _mask_build(name: str, batch: int, seq_q: int, seq_kv: int, mask: Mask, dtype: torch.dtype, device: str
                ) -> Callable[[], Any]:
    """Building the mask transformers builds for this layer's shape, as a call."""
    masking, _ = _transformers(name)
    impl = IMPLEMENTATIONS[name]
    builder = masking.ALL_MASK_ATTENTION_FUNCTIONS[impl]
    kwargs: dict[str, Any] = {"batch_size": batch, "q_length": seq_q, "kv_length": seq_kv,
                              "q_offset": seq_kv - seq_q, "kv_offset": 0,
                              "mask_function": _mask_function(masking, mask), "attention_mask": None,
                              "device": device}
    if impl == "eager":
        kwargs["dtype"] = dtype
    if impl == "sdpa" and mask.window is not None:  # as create_sliding_window_causal_mask passes it: without it
        kwargs["local_size"] = mask.window  # transformers skips the mask for is_causal, and the window is lost
    return functools.partial(builder, **kwargs)


@functools.lru_cache(maxsize=64)
def _mask(name: str, batch: int, seq_q: int, seq_kv: int, mask: Mask, dtype: torch.dtype, device: str) -> Any:
    """The mask, built on the shape's first call and kept: a model builds it once per forward for all its layers."""
    return _mask_build(name, batch, seq_q, seq_kv, mask, dtype, device)()


def time_mask_build(name: str, shape: AttentionShape, device: str, case_budget_s: float) -> float:
    """Median seconds transformers takes to build the case's mask (bench.measure's warm timer: the first build,
    a compile for flex's BlockMask, is its warm-up)."""
    from bench.measure.stats import summarize
    from bench.measure.timer import measure

    build = _mask_build(name, shape.batch, shape.seq_q, shape.seq_kv, shape.mask, shape.torch_dtype,
                        device)
    _, timing = measure(build, device, case_budget_s)
    return summarize(timing.samples).median


def hf_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, mask: Mask, score: Score,
                 name: str) -> torch.Tensor:
    fn = _attention_function(name, score)
    if q.shape[2] > k.shape[2]:
        raise Unsupported(f"{name}: more queries ({q.shape[2]}) than keys ({k.shape[2]})")
    built = _mask(name, q.shape[0], q.shape[2], k.shape[2], mask, q.dtype, str(q.device))
    layer = SimpleNamespace(num_key_value_groups=q.shape[1] // k.shape[1], is_causal=mask.causal, training=False)
    kwargs = _score_arguments(name, score, layer, q)
    try:
        out, _ = fn(layer, q, k, v, built, scaling=q.shape[-1] ** -0.5, dropout=0.0, **kwargs)
    except Exception as err:
        from torch._dynamo.exc import BackendCompilerFailed  # InductorError is one

        if not isinstance(err, BackendCompilerFailed):
            raise
        first = next((line for line in str(err).splitlines() if line.strip()), type(err).__name__)
        raise Unsupported(f"{COMPILE_FAILED} ({type(err).__name__}: {first[:200]})") from None
    return out.transpose(1, 2)  # transformers hands back (B, S, H, D)


def _score_arguments(name: str, score: Score, layer: SimpleNamespace, q: torch.Tensor) -> dict[str, Any]:
    """The score variant as transformers passes it: `softcap=` (Gemma-2's eager, flex), the sink logits as the
    layer's `sinks` (gpt-oss's eager) or `s_aux=` (flex)."""
    if score.alibi:
        raise Unsupported(f"{name}: transformers' ALiBi models build their bias in the model, not in these paths")
    kwargs: dict[str, Any] = {}
    if score.softcap is not None:
        kwargs["softcap"] = score.softcap
    if score.sinks:
        logits = score.with_logits(q.shape[1], q.device).sink_logits.to(q.dtype)
        if IMPLEMENTATIONS[name] != "flex_attention":
            layer.sinks = logits
        elif q.device.type == "cpu":  # transformers renormalises by flex's LSE, which its CPU kernel does not return
            raise Unsupported(f"{name}: transformers runs attention sinks through flex on CUDA only")
        else:
            kwargs["s_aux"] = logits
    return kwargs


def make(name: str):
    return functools.partial(hf_attention, name=name)
