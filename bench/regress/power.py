"""How often `bench ab` catches a slowdown, and how often it cries wolf: a benchmark of the regression gate itself.

  python -m bench.regress.power                          # the full table (long: run it on a quiet machine)
  python -m bench.regress.power --tries 1 --factors 1,1.1,1.2 --loads idle   # a short look

A user repository with one kernel (`mykern:attn`: torch SDPA) is made in a temporary folder and committed; its
working tree then makes every call x FACTOR slower (after each call, a busy wait of (FACTOR - 1) x that call's own
duration; FACTOR 1: the working tree is the commit, an A/A). `bench ab HEAD` measures the commit against the working
tree over --cases shapes (B=1, Hq=8, D=64, causal fp32 prefill; S in 64, 128, 256, 512 x Hkv in 8, 2, 1), with
`bench ab`'s defaults unless --blocks / --ab-time / --budget say otherwise. Load "busy": one busy loop (a second
process spinning) runs beside it.

Each A/B's two documents (`--save`) are judged as a whole and, with the same blocks, as A/Bs of fewer cases: each
case alone (1-case A/Bs) and consecutive groups of 3 (bench.regress.ab.verdict.judge on those cases only). Only the
cross-case guard and --blocks auto's shared time differ from separate A/Bs, and with fewer cases a real A/B could
only give each case more time.

Printed per load and A/B size: per factor, the share of cases regressed (caught), and for A/A the false alarms
(cases regressed, of cases judged); inconclusive cases are counted apart. Exit 0.

Measured on a quiet 2-core AMD EPYC (AVX2, torch 2.13.0 CPU; load 1.0 at the start, 2.1 at the end with the
spinner) with `--tries 2 --factors 1,1.1,1.2` (23 minutes), then `--tries 1 --factors 1.05,1.5 -- --ab-time 120`,
and for more A/A cases `--tries 8 --factors 1` (40 minutes; load 1.0 to 2.0); the share of cases called regressed:

  load  A/B of            A/A (false alarms)  x1.05                      x1.1      x1.2      x1.5
  idle  1, 3 or 12 cases  0 of 120            0 of 12 (11 inconclusive)  24 of 24  24 of 24  12 of 12
  busy  1, 3 or 12 cases  0 of 120            0 of 12 (12 inconclusive)  24 of 24  24 of 24  12 of 12

No A/A case was inconclusive either. Each A/B took 1-4 minutes (median 190 s for the idle A/A, 120 s busy, 59 s at
x1.2). 240 A/A cases gave no false alarm: at 95% confidence the rate is below 1 in 80 (3/240); showing it below 1 in
200 needs some 600 cases.

Again once each block ran in fresh worker processes (2026-12-05, 2-core AMD EPYC with AVX-512), `--tries 17 --factors
1 --loads idle` (58 minutes; load 2.0-5.7 for its first 45 minutes, other test suites beside it, then 0.2-1.0):
0 false alarms in 204 A/A cases at every A/B size, 17 inconclusive; median 186 s an A/B.
"""

from __future__ import annotations

import argparse
import itertools
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from collections import Counter
from pathlib import Path

from bench.regress.ab.verdict import judge
from bench.regress.noise import Rule, parse_threshold
from bench.results import RunDocument, read_run

KERNEL = '''
    import time

    import torch

    EXTRA = {extra!r}  # the injected slowdown: each call costs (1 + EXTRA) x its own time


    def attn(q, k, v, *, causal, window):
        t0 = time.perf_counter()
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal,
                                                               enable_gqa=k.shape[1] != q.shape[1])
        if EXTRA:
            until = time.perf_counter() + EXTRA * (time.perf_counter() - t0)
            while time.perf_counter() < until:
                pass
        return out
    '''
SEQS, KV_HEADS = (64, 128, 256, 512), (8, 2, 1)


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=power", "-c", "user.email=power@localhost", *args],
                   check=True, capture_output=True)


def user_repo(parent: Path, factor: float) -> Path:
    """A git repository whose commit has the plain kernel and whose working tree has it x factor slower."""
    repo = parent / f"user-x{factor:g}"
    repo.mkdir()
    (repo / "mykern.py").write_text(textwrap.dedent(KERNEL.format(extra=0.0)))
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "the kernel")
    if factor != 1:
        (repo / "mykern.py").write_text(textwrap.dedent(KERNEL.format(extra=round(factor - 1, 6))))
    return repo


def shapes(n: int) -> list[tuple[int, int]]:
    """The first n (S, Hkv) of the grid, interleaving the variants so that any prefix has all kinds."""
    grid = [(s, h) for s, h in itertools.product(SEQS, KV_HEADS)]
    if not 1 <= n <= len(grid):
        raise SystemExit(f"--cases {n}: between 1 and {len(grid)}")
    return grid[:n]


def run_ab(repo: Path, n_cases: int, extra: list[str], save: Path) -> None:
    """One `bench ab HEAD` in `repo`, one command per shape axis pair (the grid is seq x kv-heads, cut to n)."""
    grid = shapes(n_cases)
    seqs = sorted({s for s, _ in grid})
    kvs = sorted({h for _, h in grid}, reverse=True)
    cmd = [sys.executable, "-m", "bench", "ab", "HEAD", "--backend", "mykern:attn", "--heads", "8", "--kv-heads",
           ",".join(map(str, kvs)), "--seq", ",".join(map(str, seqs)), "--dtype", "fp32", "--mask", "causal",
           "--phase", "prefill", "--device", "cpu", "--format", "json", "--save", str(save), *extra]
    done = subprocess.run(cmd, cwd=repo, capture_output=True, text=True)
    if done.returncode not in (0, 1):
        raise SystemExit(f"bench ab failed ({done.returncode}): {done.stderr.strip().splitlines()[-1:]}")


def subset(doc: RunDocument, ids: list[str]) -> RunDocument:
    out = RunDocument.from_dict(doc.to_dict())
    out.replace_entries([e for e in doc.entries() if e.case_id in set(ids)])
    return out


def tally(base: RunDocument, cur: RunDocument, rule: Rule, sizes: list[int]) -> dict[int, Counter]:
    """Verdict counts per A/B size, judging the cases in consecutive groups of that size (all: one group)."""
    ids = [i for i in base.case_ids() if i in set(cur.case_ids())]
    out: dict[int, Counter] = {}
    for size in sizes:
        size = min(size, len(ids))
        counts: Counter = Counter()
        for start in range(0, len(ids) - size + 1, size):
            group = ids[start:start + size]
            cmp = judge(subset(base, group), subset(cur, group), rule)
            counts.update(v.verdict for v in cmp.cases)
            counts["a/b"] += 1
            counts["a/b failed"] += cmp.summary.exit_code
        out[size] = out.get(size, Counter()) + counts
    return out


def _busy() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


def _cell(c: Counter, factor: float) -> str:
    judged = sum(c[v] for v in ("regressed", "improved", "unchanged", "inconclusive", "noisy"))
    if not judged:
        return "-"
    extra = f", {c['inconclusive']} inc." if c["inconclusive"] else ""
    if factor == 1:
        return f"{c['regressed']}/{judged} false{extra}"
    return f"{c['regressed']}/{judged} ({c['regressed'] / judged:.0%}){extra}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.regress.power", description=__doc__.splitlines()[0])
    p.add_argument("--tries", type=int, default=10, help="A/Bs per factor and load (default 10)")
    p.add_argument("--cases", type=int, default=12, help="cases per A/B (default 12, at most 12)")
    p.add_argument("--sizes", default="1,3,12", help="A/B sizes judged (default 1,3,12; capped at --cases)")
    p.add_argument("--factors", default="1,1.05,1.1,1.2,1.5", help="injected slowdowns; 1 is the A/A")
    p.add_argument("--loads", default="idle,busy", help="idle and/or busy (one busy loop beside the A/B)")
    p.add_argument("--threshold", default="5%", help="bench ab's --threshold (default 5%%)")
    p.add_argument("ab_args", nargs="*", help="after --: more `bench ab` options, e.g. -- --ab-time 120")
    args = p.parse_args(argv)
    factors = [float(f) for f in args.factors.split(",")]
    sizes = sorted({min(int(s), args.cases) for s in args.sizes.split(",")})
    loads = args.loads.split(",")
    if args.tries < 1 or any(f < 1 for f in factors) or not set(loads) <= {"idle", "busy"}:
        raise SystemExit("--tries >= 1, --factors >= 1, --loads idle,busy")
    rule = Rule(threshold=parse_threshold(args.threshold))
    extra = [*args.ab_args, "--threshold", args.threshold]
    table: dict[tuple[str, int, float], Counter] = {}
    walls: dict[tuple[str, float], list[float]] = {}  # seconds of each A/B, per load and factor
    started, load_at_start = time.time(), os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="attnbench-power-") as tmp:
        for load, factor in itertools.product(loads, factors):
            (Path(tmp) / load).mkdir(exist_ok=True)
            repo = user_repo(Path(tmp) / load, factor)
            for t in range(args.tries):
                spinner = _busy() if load == "busy" else None
                try:
                    save = Path(tmp) / f"{load}-{factor:g}-{t}"
                    t0 = time.monotonic()
                    run_ab(repo, args.cases, extra, save)
                    walls.setdefault((load, factor), []).append(time.monotonic() - t0)
                finally:
                    if spinner:
                        spinner.kill()
                        spinner.wait()
                got = tally(read_run(save / "ab-base.json"), read_run(save / "ab-current.json"), rule, sizes)
                for size, counts in got.items():
                    table[(load, size, factor)] = table.get((load, size, factor), Counter()) + counts
                print(f"[{load} x{factor:g} try {t + 1}/{args.tries}] " + "; ".join(
                    f"{size}-case: {_cell(c, factor)}" for size, c in got.items()), file=sys.stderr, flush=True)
    head = ["load", "cases per A/B", *(("A/A" if f == 1 else f"x{f:g}") for f in factors)]
    print(f"bench ab power: {args.tries} A/Bs of {args.cases} cases per load and factor, threshold {args.threshold}"
          f"{' ' + ' '.join(args.ab_args) if args.ab_args else ''}; load average {load_at_start[0]:.1f} at the "
          f"start, {os.getloadavg()[0]:.1f} at the end ({os.cpu_count()} CPUs); {time.time() - started:.0f} s\n")
    print("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
    for load, size in itertools.product(loads, sizes):
        print(f"| {load} | {size} | " + " | ".join(_cell(table.get((load, size, f), Counter()), f) for f in factors)
              + " |")
    print("\nseconds per A/B (median): " + "; ".join(
        f"{load} {'A/A' if f == 1 else f'x{f:g}'} {sorted(w)[len(w) // 2]:.0f}" for (load, f), w in walls.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
