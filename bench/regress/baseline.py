"""Baselines: one saved results file per machine, under results/baselines/<fingerprint-key>.json.

A machine is its fingerprint (FINGERPRINT_FIELDS); runs of different machines are not compared unless
normalized. A baseline may pool several runs ("passes") of one machine: the between-run noise that a single
run's rounds never show (on shared CPU machines some cases flip between two speeds from one process to the
next; see the README's regression section) is then visible to `compare`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bench.errors import InputError
from bench.measure.environment import fingerprint_diff, fingerprint_key
from bench.results import ResultsError, read_run, write_atomic
from bench.results.merge import merge_passes

DEFAULT_DIR = Path("results/baselines")

class BaselineError(InputError):
    """A baseline that cannot be saved or found: exit code 2."""


def current_fingerprint(device: str) -> dict[str, str | int | None]:
    """This machine as results files record it (attnbench.fingerprint): the six things that must match for two
    runs' times to be comparable. gpu_name only for cuda runs: a CPU run does not depend on the GPU."""
    import torch

    from bench.measure.environment import fingerprint  # the engine writes the same function's answer

    if device not in ("cpu", "cuda"):
        raise BaselineError(f"device {device!r}: use cpu or cuda")
    if device == "cuda" and not torch.cuda.is_available():
        raise BaselineError("device cuda: torch sees no CUDA device here")
    return fingerprint(device)


def default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def save(paths: list[str | Path], directory: str | Path = DEFAULT_DIR) -> Path:
    """Store the run(s) as this fingerprint's baseline, replacing the previous one; returns the file."""
    docs = [read_run(p) for p in paths]
    merged = merge_passes(docs, [str(p) for p in paths])
    target = Path(directory) / f"{fingerprint_key(merged.fingerprint)}.json"
    write_atomic(target, merged)
    return target


def find(fingerprint: dict, directory: str | Path = DEFAULT_DIR) -> Path | None:
    path = Path(directory) / f"{fingerprint_key(fingerprint)}.json"
    return path if path.is_file() else None


@dataclass(frozen=True)
class Stored:
    """A baseline file as `baseline show` lists it; error is set when the file cannot be read."""

    path: Path
    fingerprint: dict | None = None
    profile: str | None = None
    n_cases: int = 0
    passes: int = 1
    run_ids: tuple[str, ...] = ()
    saved: str | None = None
    error: str | None = None


def stored(directory: str | Path = DEFAULT_DIR) -> list[Stored]:
    out = []
    for path in sorted(Path(directory).glob("*.json")):
        try:
            doc = read_run(path)
        except ResultsError as err:
            out.append(Stored(path, error=str(err)))
            continue
        info = doc.meta.baseline or {}
        run_ids = tuple(str(r) for r in info.get("run_ids") or [doc.meta.run_id])
        out.append(Stored(path, doc.fingerprint, doc.meta.profile, len(doc.entries()),
                          int(info.get("passes") or 1), run_ids, info.get("saved")))
    return out


def closest(fingerprint: dict, directory: str | Path = DEFAULT_DIR) -> tuple[Path, list[str]] | None:
    """The stored baseline of the same device differing in the fewest fields (for --normalize on CI runners)."""
    candidates = [(len(fingerprint_diff(s.fingerprint, fingerprint)), s) for s in stored(directory)
                  if s.error is None and isinstance(s.fingerprint, dict)
                  and s.fingerprint.get("device") == fingerprint.get("device")]
    if not candidates:
        return None
    _, best = min(candidates, key=lambda c: (c[0], str(c[1].path)))
    return best.path, fingerprint_diff(best.fingerprint, fingerprint)
