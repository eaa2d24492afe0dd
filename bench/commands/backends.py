"""`python -m bench backends`: which backend runs which dtype on this machine, or why not, and where each comes from
(built-in, an installed package's `attnbench.backends` entry point, or a MODULE:FUNCTION given here)."""

from __future__ import annotations

import argparse
import json

import torch

from bench.backends import BACKENDS, Backend, Unsupported, get_backend
from bench.backends.outside import entry_points
from bench.errors import InputError, UsageError
from bench.problem.case import Case
from bench.problem.masks import CAUSAL
from bench.problem.shapes import DTYPES, AttentionShape
from bench.reference import Check, check_backend

help = "list each backend x dtype on a device with 'ok' or the reason it cannot run"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", choices=["cpu", "cuda"], default=None,
                        help="default: cuda when present, else cpu")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("names", nargs="*", metavar="MODULE:FUNCTION",
                        help="also probe these backends from outside (the working directory first on sys.path)")


def probe(backend: str, dtype: str, device: str) -> str:
    """'ok', or why not: runs a small causal GQA case and checks it against the reference (a linear-attention
    backend: a 64-token prefill of its first method against the float64 recurrence, bench.kinds.linear)."""
    shape = AttentionShape(1, 33, 33, 4, 2, 64, dtype, CAUSAL)
    try:
        b = get_backend(backend)
        check = check_backend(backend, shape, device) if not b.linear else _linear_probe(b, dtype, device)
    except Unsupported as err:
        return f"unsupported: {err}"
    except Exception as err:  # a broken backend is a finding, not a crash
        return f"error: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
    return "ok" if check.ok else f"incorrect: {check.describe()}"


def _linear_probe(b: Backend, dtype: str, device: str) -> Check:
    from bench.kinds import KINDS, ReferenceCache
    from bench.problem.linear import Linear

    if why := b.unsupported_reason(device, dtype):
        raise Unsupported(why)
    shape = AttentionShape(1, 64, 64, 4, 2, 64, dtype, CAUSAL, linear=Linear(b.linear[0]))
    return KINDS["linear"].check(Case(b.name, shape, "prefill", "fwd", device), None, ReferenceCache())[0]


def run(args: argparse.Namespace) -> int:
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: torch sees no CUDA device here")
    names = [*BACKENDS, *(n for n in entry_points() if n not in BACKENDS), *args.names]
    origins: dict[str, str] = {}
    table: dict[str, dict[str, str]] = {}
    for name in dict.fromkeys(names):
        try:
            origins[name] = get_backend(name).origin
        except InputError as err:
            if name in args.names:
                raise  # named on this command line: the user's error, exit 2
            # an installed entry point that does not load is listed with why, not a crash of the listing
            ep = entry_points()[name]
            origins[name] = f"entry point {ep.name} = {ep.value}"
            table[name] = dict.fromkeys(DTYPES, f"error: {err}")
            continue
        table[name] = {dt: probe(name, dt, device) for dt in DTYPES}
    if args.json:
        print(json.dumps({"device": device, "torch": torch.__version__, "backends": table, "origins": origins},
                         indent=2))
        return 0
    print(f"device: {device}  torch {torch.__version__}  (probe: causal GQA, Hq=4 Hkv=2, S=33, D=64; linear attention: "
          "a 64-token prefill, 4 value heads over 2 q/k heads)")
    width = max(map(len, table))
    for backend, row in table.items():
        if origins[backend] != "built-in":
            print(f"{backend:<{width}}  from: {origins[backend]}")
        for dt, verdict in row.items():
            print(f"{backend:<{width}}  {dt:<5} {verdict}")
    return 0
