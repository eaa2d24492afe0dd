"""`nox -s regress`: which regression check runs here, and why (`python -m bench.regress.gate [--base REF] [ARGS]`).

An unchanged tree must never fail because the machine changed. So:
1. A pull request (GITHUB_BASE_REF, or --base REF) whose merge base is in the checkout: `bench ab` against the merge
   base, both revisions interleaved on this machine, of the quick sweep cut to one GQA prefill and one decode shape
   per backend (AB_SWEEP: fewer cases, more blocks each, so a x1.1 move decides within --ab-time).
2. Otherwise, the stored baseline (results/baselines/, by fingerprint) counts only when it is THIS machine's:
   recorded with this host's id (machine_info.attnbench.host_id: the OS's machine id and hostname, not the CPU's
   marketing name) AND with ceilings (GEMM FLOP/s, copy bytes/s: meta.calibration, calibration_end) within
   x CEILING_TOLERANCE of what this machine measures now. Then: the quick sweep twice, in two processes, and
   `bench compare` against it.
3. Otherwise (no baseline, one of another host, one with other ceilings, or one recorded without a host id):
   `bench ab` against the previous commit (HEAD~1), interleaved on this machine.
With --workload TRACE, the A/B times that trace's buckets (TRACE_SWEEP; a later --buckets overrides) instead of the
quick sweep, and a stored baseline never counts: it holds the quick sweep, not that traffic.
It prints which it did and why, and writes reports/regress.md. Exit: that of the command it ran; 2 when nothing can
be checked (a shallow clone without the previous commit: fetch-depth 2 or more).
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.results import RunDocument
from bench.results.meta import Calibration

CEILING_TOLERANCE = 1.3  # one host's GEMM reading moved x1.18 under load (README); hosts named alike moved x1.56
CEILINGS = {"gemm_flops_per_s": ("GEMM", 1e9, "GFLOP/s"), "copy_bytes_per_s": ("copy", 1e9, "GB/s")}
REPORT = "reports/regress.md"
PROFILE = ["--profile", "quick"]
# The A/B's sweep: the quick sweep cut to one GQA prefill and one decode shape per backend (10 cases on a CPU).
# Its 45 cases took all of --ab-time's 300 s for their first 7 blocks each (and a compile per FlexAttention case
# and side), which decides only moves far past the threshold: fewer cases get the blocks that decide x1.1.
AB_SWEEP = [*PROFILE, "--kv-heads", "2", "--seq", "512"]
# With --workload: the A/B of that traffic's buckets (bench.traces), four per phase, so it decides within --ab-time.
TRACE_SWEEP = ["--profile", "traces", "--buckets", "4"]


@dataclass(frozen=True)
class Decision:
    kind: str  # "ab" | "baseline" | "none"
    reason: str
    rev: str | None = None  # the revision `bench ab` compares against
    baseline: Path | None = None


def baseline_is_here(doc: RunDocument, host: str, ceilings: Calibration) -> tuple[bool, str]:
    """Whether a stored baseline was recorded on this machine, and the reason (rule 2 of the module docstring)."""
    recorded = doc.environment.get("host_id")
    if not recorded:
        return False, "it records no host id (saved before attnbench recorded one), so it may be another host's"
    if recorded != host:
        return False, f"it was recorded on another host (host id {recorded}, this one {host})"
    for key, (name, scale, unit) in CEILINGS.items():  # keys: Calibration's attributes
        then = [getattr(c, key) for c in (doc.meta.calibration, doc.meta.calibration_end) if c is not None]
        then = [v for v in then if v is not None and v > 0]
        now = getattr(ceilings, key)
        if not then or not now:
            return False, f"its {name} ceiling or this machine's is not recorded"
        nearest = min(then, key=lambda v: abs(math.log(v / now)))
        if max(nearest / now, now / nearest) > CEILING_TOLERANCE:
            return False, (f"this host's {name} ceiling moved: {nearest / scale:.4g} {unit} when it was recorded, "
                           f"{now / scale:.4g} now (more than x{CEILING_TOLERANCE:g} apart)")
    return True, f"it was recorded on this host, with ceilings within x{CEILING_TOLERANCE:g} of this machine's now"


def decide(target: str | None, merge_base: str | None, baseline: Path | None, host: str,
           ceilings: Calibration, previous: str | None, workload: str | None = None) -> Decision:
    """What to compare against (the module docstring's order); pure, given what the caller found."""
    if target and merge_base:
        return Decision("ab", f"a pull request into {target}: A/B against the merge base {merge_base[:12]}, "
                        "interleaved on this machine", rev=merge_base)
    why = f"no merge base with {target} in this checkout (fetch its history); " if target else ""
    if workload:
        why += f"--workload {workload}: a stored baseline holds the quick sweep, not that traffic"
    elif baseline is None:
        why += "no stored baseline for this machine's fingerprint"
    else:
        from bench.results import read_run

        here, because = baseline_is_here(read_run(baseline), host, ceilings)
        if here:
            return Decision("baseline", f"{why}the stored baseline {baseline}: {because}", baseline=baseline)
        why += f"the stored baseline {baseline} does not count: {because}"
    if previous is None:
        return Decision("none", f"{why}; and the previous commit is not in this checkout (a shallow clone: fetch "
                        "at least 2 commits), so nothing can be compared")
    return Decision("ab", f"{why}; A/B against the previous commit {previous[:12]}, interleaved on this machine",
                    rev=previous)


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(["git", *args], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    return (done.stdout.strip() or None) if done.returncode == 0 else None


def take_option(args: list[str], name: str) -> str | None:
    """Remove `name VALUE` (or `name=VALUE`) from args and return VALUE."""
    for i, arg in enumerate(args):
        if arg == name and i + 1 < len(args):
            value = args[i + 1]
            del args[i:i + 2]
            return value
        if arg.startswith(name + "="):
            del args[i]
            return arg.split("=", 1)[1]
    return None


def _bench(argv: Sequence[str]) -> int:
    return subprocess.run([sys.executable, "-m", "bench", *argv]).returncode


def _here(device: str) -> tuple[str, Calibration, Path | None]:
    """This host's id, its ceilings measured now, and the stored baseline of its fingerprint (or None)."""
    from bench.measure.calibrate import calibrate
    from bench.measure.environment import fingerprint, host_id
    from bench.regress.baseline import find

    return host_id(), calibrate(device), find(fingerprint(device))


def main(argv: Sequence[str] | None = None, bench: Callable[[Sequence[str]], int] = _bench,
         here: Callable[[str], tuple[str, Any, Path | None]] = _here) -> int:
    """The session: decide, say which and why, run it. bench: runs `python -m bench ARGV` (tests pass their own)."""
    args = list(sys.argv[1:] if argv is None else argv)
    target = take_option(args, "--base") or (f"origin/{os.environ['GITHUB_BASE_REF']}"
                                             if os.environ.get("GITHUB_BASE_REF") else None)
    merge_base = _git("merge-base", "HEAD", target) if target else None
    device = take_option(args, "--device") or ("cuda" if _cuda() else "cpu")
    workload = take_option(args, "--workload")
    sweep = [*TRACE_SWEEP, "--workload", workload] if workload else AB_SWEEP
    host, ceilings, baseline = here(device)
    decision = decide(target, merge_base, baseline, host, ceilings, _git("rev-parse", "--verify", "-q", "HEAD~1"),
                      workload)
    print(f"attnbench regress: {decision.reason}", file=sys.stderr, flush=True)
    Path(REPORT).parent.mkdir(parents=True, exist_ok=True)
    if decision.kind == "none":
        Path(REPORT).write_text(f"### attnbench: regression check not run\n\n{decision.reason}\n")
        return 2
    if decision.kind == "ab":
        assert decision.rev is not None
        Path(REPORT).unlink(missing_ok=True)
        code = bench(["ab", decision.rev, *sweep, "--device", device, "--format", "markdown", "--output", REPORT,
                      *args])
    else:
        # Two passes in two processes: a case regresses only when both are slower, so a stall or a slow spell
        # of a shared machine during one pass cannot fail CI on its own.
        passes = [Path(f"results/regress-current-{i}.json") for i in (1, 2)]
        for out in passes:
            out.unlink(missing_ok=True)  # bench run refuses to overwrite a results file
            # exit 1 (a case incorrect or errored) still yields a file; compare fails on that status change
            if bench(["run", *PROFILE, "--device", device, "--out", str(out)]) not in (0, 1):
                return 2
        code = bench(["compare", str(decision.baseline), *map(str, passes), "--format", "markdown", "--output",
                      REPORT, *args])
    if Path(REPORT).is_file():  # the report says what it compared against, and why
        Path(REPORT).write_text(Path(REPORT).read_text() + f"\nCompared: {decision.reason}.\n")
    return code


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


if __name__ == "__main__":
    sys.exit(main())
