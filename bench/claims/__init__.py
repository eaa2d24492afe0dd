"""Every claim a report judges, each owning its whole path in one module of this package: its words and thresholds
(its spec), the planner's question that funds its cases, and the judge that reads them.

A claim module holds:
- SPECS: its ClaimSpec(s) (bench.claims.spec): key, text, the judge as "module:function", the question's key, and
  the `bench run` options that measure it on its own; its thresholds are the module's constants beside them;
- QUESTIONS: the Question(s) (bench.claims.question) that fund its cases, if no other claim's module has it: which of
  the plan's cases speak to it (`picks`) and the least of those that answer it (`least`); () when no case of a sweep
  answers it, or when a question of another module funds it;
- its judge: a function `(frame, run) -> bench.analysis.verdict.Verdict` of one run's tidy frame, importing pandas and
  bench.report lazily (inside the function), so that planning a run (bench.engine) imports neither.

REGISTRY below names each claim module once, one line per claim module, in report order: CLAIMS (every spec, in
report order), QUESTIONS (every question, in the planner's order: the number on a module's line, ties in report
order), BY_KEY, spec() and of_question() are derived from it. The planner (bench.engine.agenda) funds each
question's least set with the thresholds of its module, and a plan without those cases names the spec's `command`;
verdicts() calls each spec's judge on one run (the report, `bench run`'s closing summary and the deciding phase read
them); `--plan` and the reference (bench/REFERENCE.md) print the texts and commands.

Adding a claim:
1. one module here with its spec (SPECS), the question that funds it (QUESTIONS; reuse another claim's question by
   naming its key in the spec and leaving QUESTIONS empty) and its judge, named in the spec as "module:function";
2. one line in REGISTRY, at its place in the report, with its question's place in the planner's order (None when the
   module has no question).
The report's table, `bench run`'s closing summary, `--plan`, the deciding phase and the tests read it from there.
Each threshold is defined once, in its claim's module; this module re-exports them for the report's modules that
import them from here. The generic parts: bench.claims.spec (ClaimSpec) and bench.claims.question (Question, Context,
and the helpers that choose the textbook backend, the fused kernel, the native dtypes and the emulated dtypes'
representatives); bench.analysis.sparse_line defines a sparse line, its dense twins and the best dense kernel.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from importlib import import_module
from types import ModuleType
from typing import TYPE_CHECKING, Any

from bench.analysis.decided import with_blocks
from bench.analysis.verdict import NO_FACTS, Verdict
from bench.claims import (
    auto_choice,
    cascade,
    decode,
    heads,
    kv,
    layer,
    linear,
    memory,
    mla,
    paging,
    sparse,
    trace,
    variants,
    verify,
    wrapper,
)
from bench.claims.auto_choice import AUTO_WITHIN
from bench.claims.decode import DECODE_SPEEDUP, MIN_KV_LENGTHS, NEAR, ON_CHIP
from bench.claims.heads import HEADS_TOLERANCE, MIN_HEADS
from bench.claims.kv import KV_WITHIN
from bench.claims.layer import DOMINANT, LAYER_SPAN, MIN_LAYER_LENGTHS, RISING
from bench.claims.memory import LENGTH_SPAN, LINEAR_MAX, MEMORY_SPAN, MIN_LENGTHS, QUADRATIC_MIN
from bench.claims.paging import PAGING_WITHIN
from bench.claims.question import Question
from bench.claims.sparse import IDEAL_SHARE, MIN_SPARSE_LENGTHS, SPARSE_BEATS, SPARSE_LOSES, SPARSE_SPAN
from bench.claims.spec import ClaimSpec
from bench.claims.trace import TRACE_CLOSE
from bench.claims.variants import VARIANTS_WITHIN
from bench.claims.wrapper import TIED, WRAPPER_WITHIN
from bench.results.meta import RunMeta

if TYPE_CHECKING:
    import pandas as pd

# (claim module, its questions' place in the planner's order): one line per claim module, in report order
REGISTRY: tuple[tuple[ModuleType, int | None], ...] = (
    (heads, 1),  # heads (question heads)
    (memory, 2),  # memory (question scaling)
    (kv, 6),  # kv (answered at the run's start)
    (decode, 3),  # fused-decode, expanding-decode (question decode)
    (mla, 4),  # mla
    (layer, 5),  # layer
    (paging, 7),  # paging
    (variants, 8),  # variants
    (sparse, 9),  # sparse, sparse-ideal (questions sparse, sparse-ideal)
    (trace, 10),  # trace
    (auto_choice, 14),  # auto-choice (question auto-choice)
    (wrapper, 11),  # wrapper
    (linear, 12),  # linear, linear-decode (questions linear, linear-decode)
    (cascade, 13),  # cascade (question cascade)
    (verify, 15),  # verify (question verify)
)

CLAIMS: tuple[ClaimSpec, ...] = tuple(s for module, _ in REGISTRY for s in module.SPECS)
_ASKED = sorted((place, n) for n, (_, place) in enumerate(REGISTRY) if place is not None)  # planner order
QUESTIONS: tuple[Question, ...] = tuple(q for _, n in _ASKED for q in REGISTRY[n][0].QUESTIONS)
BY_KEY: dict[str, ClaimSpec] = {s.key: s for s in CLAIMS}


def spec(key: str) -> ClaimSpec:
    """The spec of one claim, by key (a KeyError names the known keys)."""
    try:
        return BY_KEY[key]
    except KeyError:
        raise KeyError(f"no claim {key!r}; the claims are {', '.join(BY_KEY)}") from None


def of_question(question: str) -> tuple[ClaimSpec, ...]:
    """The claims a planner question funds."""
    return tuple(s for s in CLAIMS if s.question == question)


Judge = Callable[..., Verdict]  # (frame, run) -> Verdict


def judge_of(spec: ClaimSpec) -> Judge:
    """The function a spec names ("module:function")."""
    module, name = spec.judge.split(":")
    return getattr(import_module(module), name)


def verdicts(df: pd.DataFrame, run: RunMeta = NO_FACTS) -> list[Verdict]:
    """Every claim's verdict on one run's frame, in CLAIMS' order, each with its spec's key; a condition the run
    re-measured in interleaved blocks is judged on them (bench.analysis.decided)."""
    return [with_blocks(dataclasses.replace(judge_of(s)(df, run), key=s.key), s.key, run.decided) for s in CLAIMS]


def evaluate_claims(df: pd.DataFrame, kv_measured: list[dict] | None = None) -> list[dict[str, Any]]:
    """verdicts() as plain dicts (Verdict.as_dict), on a frame whose run measured these KV caches."""
    return [v.as_dict() for v in verdicts(df, RunMeta(kv_measured=list(kv_measured or [])))]


__all__ = [
    "AUTO_WITHIN", "BY_KEY", "CLAIMS", "DECODE_SPEEDUP", "DOMINANT", "HEADS_TOLERANCE", "IDEAL_SHARE", "KV_WITHIN",
    "LAYER_SPAN", "LENGTH_SPAN", "LINEAR_MAX", "MEMORY_SPAN", "MIN_HEADS", "MIN_KV_LENGTHS", "MIN_LAYER_LENGTHS",
    "MIN_LENGTHS", "MIN_SPARSE_LENGTHS", "NEAR", "ON_CHIP", "PAGING_WITHIN", "QUADRATIC_MIN", "QUESTIONS", "REGISTRY",
    "RISING", "SPARSE_BEATS", "SPARSE_LOSES", "SPARSE_SPAN", "TIED", "TRACE_CLOSE", "VARIANTS_WITHIN",
    "WRAPPER_WITHIN", "ClaimSpec", "Question", "evaluate_claims", "judge_of", "of_question", "spec", "verdicts",
]
