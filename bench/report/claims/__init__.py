"""The claims' judges, in the order and with the words of bench.claims.CLAIMS: each claim's module
(bench.claims.<claim>) holds its spec, the question that funds it and its judge, named in the spec as
"module:function". Each judge is ONE function `(frame, run) -> Verdict` that takes the frame of ONE run and picks its
own rows (bench.report.frames).

Adding a claim is a module in bench.claims and a line in its registry (bench.claims.REGISTRY); the report's table,
`bench run`'s closing summary, `--plan` and the tests read it from there. What stays here is shared with other parts
of the report: the automatic choice's losses (auto_choice), which the best-backends table reads too.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from importlib import import_module

import pandas as pd

from bench.claims import CLAIMS as SPECS
from bench.claims import ClaimSpec
from bench.report.decided import with_blocks
from bench.report.tables import best_backends
from bench.report.verdict import Verdict
from bench.results.meta import RunMeta

Claim = Callable[[pd.DataFrame], Verdict]


def judge_of(spec: ClaimSpec) -> Claim:
    """The function a spec names."""
    module, name = spec.judge.split(":")
    return getattr(import_module(module), name)


# In report order.
CLAIMS: tuple[Claim, ...] = tuple(judge_of(spec) for spec in SPECS)


def verdicts(df: pd.DataFrame, run: RunMeta) -> list[Verdict]:
    """Every claim's verdict on one run; a condition the run re-measured in interleaved blocks is judged on them."""
    return [with_blocks(dataclasses.replace(claim(df, run), key=spec.key), spec.key, run.decided)
            for spec, claim in zip(SPECS, CLAIMS, strict=True)]


def evaluate_claims(df: pd.DataFrame, kv_measured: list[dict] | None = None) -> list[dict]:
    """verdicts() as plain dicts (claim, verdict, numbers, why, detail): `bench run`'s summary reads these."""
    return [v.as_dict() for v in verdicts(df, RunMeta(kv_measured=list(kv_measured or [])))]


__all__ = ["CLAIMS", "Claim", "best_backends", "evaluate_claims", "verdicts"]
