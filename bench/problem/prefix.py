"""The shared-prefix field of a shape (`prefix`, an int or None): B requests whose contexts begin with the same P
tokens, each followed by a suffix of its own (bench.prefix computes its attention plain and by cascade).

A prefix shape is one attention call per request, as a dense shape is, read so:
  seq_kv  every request's whole context, P + L (L = seq_kv - P: its own suffix, the tokens after the prefix);
  seq_q   the request's queries, the last seq_q tokens of its context, all inside its suffix (1 <= seq_q <= L):
          seq_q = 1 is a decode step, seq_q = L the suffix's prefill over the cached prefix;
  mask    causal (bottom-right, so every query sees the whole prefix and its suffix up to itself) or none (every
          query sees every key); a window or a chunk could cut the prefix off some queries, so neither is taken.
No score variant, sparsity, MLA, layer scope, serving batch or linear method goes with a prefix (each would need
its own cascade). Nothing here imports torch.
"""

from __future__ import annotations

from bench.errors import InputError

PREFIX_MASKS: tuple[str, ...] = ("none", "causal")


class PrefixError(InputError):
    """A prefix that is not positive, does not leave a suffix for the queries, or goes with what a cascade cannot
    split."""


def check_prefix(prefix: int | None, seq_q: int, seq_kv: int, mask: str, plain: bool) -> None:
    """The rules of the module docstring; `plain`: no score variant, sparsity, MLA, layer scope, serving batch or
    linear method on the shape."""
    if prefix is None:
        return
    if not isinstance(prefix, int) or isinstance(prefix, bool) or prefix <= 0:
        raise PrefixError(f"prefix={prefix!r} must be a positive integer (the shared tokens)")
    if prefix >= seq_kv:
        raise PrefixError(f"prefix={prefix} is not shorter than the context seq_kv={seq_kv}: each request needs a "
                          "suffix of its own after the shared prefix")
    if seq_q > seq_kv - prefix:
        raise PrefixError(f"seq_q={seq_q} queries do not fit in the suffix of {seq_kv - prefix} tokens after "
                          f"prefix={prefix}: a request's queries lie in its own suffix")
    if mask not in PREFIX_MASKS:
        raise PrefixError(f"prefix={prefix} takes mask none or causal, not {mask!r} (a window or a chunk would cut "
                          "the shared prefix off some queries)")
    if not plain:
        raise PrefixError(f"prefix={prefix} takes plain attention alone: no score variant, sparsity, MLA, layer "
                          "scope, serving batch or linear method")
