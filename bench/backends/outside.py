"""Backends from outside attnbench: `MODULE:FUNCTION` names, and installed packages' `attnbench.backends` entry points.

The one place such a name becomes a Backend (bench.backends.get_backend calls `resolve`), so every front end — bench
run, the pytest plugin, profile, check, ab and --devices workers — takes the same names and refuses the same ones.
Resolution is lazy (nothing is imported until a name asks for it) and cached per process.

Traits come from the `bench.backend(...)` decorator on the function, or DEFAULTS below.

Signatures: a function written to the documented keyword signature (q, k, v, *, causal, window), with chunk=,
softcap=, alibi=, sinks= for the variants it declares, gets those keywords: its Backend's fn is an adapter that
translates the mask and score values every built-in backend gets (bench.backends.base.keyword_backend). A function
with a `mask` parameter, (q, k, v, *, mask, score), gets the values themselves (bench.problem.masks.Mask,
bench.problem.scores.Score).
Either takes sparse= as well when its traits declare a sparsity: the case's keep-set (bench.problem.keepset.KeepSet).
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from typing import Any

from bench.backends.base import ALL_DTYPES, PAGED_LAYOUTS, RAGGED_LAYOUTS, AttentionFn, Backend, keyword_backend
from bench.errors import InputError

ENTRY_POINT_GROUP = "attnbench.backends"
TRAITS_ATTR = "__attnbench_backend__"
MEMORY_KINDS = ("materialising", "tiled")
# Stated defaults for an undecorated function: flash-style memory (the common case for a hand-written kernel), any
# device and dtype (an unsupported one shows as the kernel's own error), no serving layouts, and a backward (torch
# ops have one; a kernel without it says backward=False).
DEFAULTS: dict[str, Any] = {"memory": "tiled", "devices": ("cpu", "cuda"), "dtypes": ALL_DTYPES, "layouts": (),
                            "backward": True}


class OutsideBackendError(InputError):
    """A backend from outside that cannot be used: the message names it and says why (exit 2)."""


@dataclass(frozen=True)
class Traits:
    name: str | None
    memory: str
    devices: tuple[str, ...]
    dtypes: tuple[str, ...]
    layouts: tuple[str, ...]
    backward: bool
    summary: str | None
    compiles: bool = False
    variants: tuple[str, ...] = ()
    sparsity: tuple[str, ...] = ()
    executes: str | None = None
    dense: bool = True


def backend(name: str | None = None, memory: str = DEFAULTS["memory"],
            devices: tuple[str, ...] = DEFAULTS["devices"], dtypes: tuple[str, ...] = DEFAULTS["dtypes"],
            layouts: tuple[str, ...] = DEFAULTS["layouts"], backward: bool = DEFAULTS["backward"],
            summary: str | None = None, compiles: bool = False, variants: tuple[str, ...] = (),
            sparsity: tuple[str, ...] = (), executes: str | None = None,
            dense: bool = True) -> Callable[[AttentionFn], AttentionFn]:
    """Declare an attention function's traits for attnbench; the function itself is returned unchanged.

    @bench.backend(name="mine", memory="tiled", devices=("cpu", "cuda"), dtypes=("fp32", "bf16"))
    def attn(q, k, v, *, causal, window): ...

    sparsity= names the sparse kinds it takes (block, docs, global, topk: bench.problem.sparsity; tree: speculative
    drafts' token trees, bench.kinds.draft); on those cases it is called with sparse= (a bench.problem.keepset.KeepSet:
    tokens, blocks, top-K indices or a tree's table), and it is offered no other sparse case. executes= says what it
    computes (bench.counts.pairs.EXECUTES: all, causal, visible, blocks, selected), for its executed FLOPs; unsaid,
    they are left empty. dense=False: it runs sparse cases only.
    """
    if memory not in MEMORY_KINDS:
        raise OutsideBackendError(f"bench.backend(memory={memory!r}): one of {', '.join(MEMORY_KINDS)}")
    for field, given, known in (("devices", devices, ("cpu", "cuda")), ("dtypes", dtypes, ALL_DTYPES),
                                ("layouts", layouts, RAGGED_LAYOUTS + PAGED_LAYOUTS)):
        if isinstance(given, str) or not set(given) <= set(known):
            raise OutsideBackendError(f"bench.backend({field}={given!r}): a tuple of {', '.join(known)}")
    from bench.problem.scores import OPT_IN_VARIANTS

    if isinstance(variants, str) or not set(variants) <= set(OPT_IN_VARIANTS):
        raise OutsideBackendError(f"bench.backend(variants={variants!r}): a tuple of {', '.join(OPT_IN_VARIANTS)}")
    from bench.counts.pairs import EXECUTES
    from bench.problem.sparsity import SPARSITY_KINDS

    if isinstance(sparsity, str) or not set(sparsity) <= set(SPARSITY_KINDS):
        raise OutsideBackendError(f"bench.backend(sparsity={sparsity!r}): a tuple of {', '.join(SPARSITY_KINDS)}")
    if executes is not None and executes not in EXECUTES:
        raise OutsideBackendError(f"bench.backend(executes={executes!r}): one of {', '.join(EXECUTES)}")
    if not dense and not sparsity:
        raise OutsideBackendError("bench.backend(dense=False) needs the sparsity kinds it runs (sparsity=...)")
    traits = Traits(name, memory, tuple(devices), tuple(dtypes), tuple(layouts), bool(backward), summary,
                    bool(compiles), tuple(variants), tuple(sparsity), executes, bool(dense))

    def mark(fn: AttentionFn) -> AttentionFn:
        setattr(fn, TRAITS_ATTR, traits)
        return fn
    return mark


def is_outside_name(name: str) -> bool:
    return ":" in name


def _import_target(name: str, target: str) -> Any:
    """`module:attr.attr` -> the object; OutsideBackendError saying which part failed."""
    module_name, _, attr_path = target.partition(":")
    if not module_name or not attr_path:
        raise OutsideBackendError(f"backend {name!r}: {target!r} is not MODULE:FUNCTION")
    # as `python -m` does: the working directory first, so the user's own package in their checkout is found
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    try:
        obj: Any = importlib.import_module(module_name)
    except Exception as err:  # any failure to import is the user's module's: one line, not a traceback
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        raise OutsideBackendError(f"backend {name!r}: cannot import {module_name}: {type(err).__name__}: "
                                  f"{first}") from None
    for part in attr_path.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise OutsideBackendError(f"backend {name!r}: {module_name} has no {attr_path}") from None
    return obj


def _check_signature(name: str, fn: Any, sparse: bool = False) -> None:
    if not callable(fn):
        raise OutsideBackendError(f"backend {name!r}: {type(fn).__name__} object is not callable")
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return  # a builtin or extension function without a signature: its first call will tell
    values = "mask" in sig.parameters
    extra = {"sparse": None} if sparse else {}  # it declares sparsity: its sparse cases come with sparse=
    try:
        if values:
            sig.bind(object(), object(), object(), mask=None, score=None, **extra)
        else:
            sig.bind(object(), object(), object(), causal=False, window=None, **extra)
    except TypeError as err:
        takes = "(q, k, v, *, mask, score" if values else "(q, k, v, *, causal, window"
        takes += ", sparse)" if sparse else ")"
        raise OutsideBackendError(f"backend {name!r}: its signature {sig} cannot take {takes}: {err}") from None


def make_backend(name: str, target: str, origin: str) -> Backend:
    """The Backend for `target` (MODULE:FUNCTION) under the case-id name `name`."""
    fn = _import_target(name, target)
    traits: Traits = getattr(fn, TRAITS_ATTR, None) or Traits(None, **DEFAULTS, summary=None)
    _check_signature(name, fn, sparse=bool(traits.sparsity))
    label = traits.name or name
    summary = traits.summary or (inspect.getdoc(fn) or "").split("\n")[0] or f"{target} ({origin})"
    # colour and marker: chosen by bench.report.style among those no registered backend uses; the keyword signature
    # adapted to the values (keyword_backend)
    return Backend(name, keyword_backend(fn), summary, traits.memory, "", "", devices=traits.devices,  # type: ignore[arg-type]
                   dtypes=traits.dtypes, layouts=traits.layouts, backward=traits.backward,  # type: ignore[arg-type]
                   compiles=traits.compiles, variants=traits.variants, origin=origin, label=label,
                   sparsity=traits.sparsity, executes=traits.executes, dense=traits.dense)


def entry_points() -> dict[str, metadata.EntryPoint]:
    """The installed packages' `attnbench.backends` entry points, by name."""
    return {ep.name: ep for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)}


def _origin(ep: metadata.EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    where = f" from {dist.name} {dist.version}" if dist is not None else ""
    return f"entry point {ep.name} = {ep.value}{where}"


_CACHE: dict[str, Backend] = {}


def resolve(name: str) -> Backend | None:
    """The outside backend `name` names (MODULE:FUNCTION or an entry point's name), or None when it names none."""
    if name in _CACHE:
        return _CACHE[name]
    if "/" in name:
        raise OutsideBackendError(f"backend {name!r}: a backend name cannot contain '/' (case ids are "
                                  "'/'-separated)")
    if is_outside_name(name):
        found = make_backend(name, name, f"import {name}")
    elif (ep := entry_points().get(name)) is not None:
        found = make_backend(name, ep.value, _origin(ep))
    else:
        return None
    _CACHE[name] = found
    return found


def forget() -> None:
    """Drop resolved backends (tests that rewrite a module between calls)."""
    _CACHE.clear()
