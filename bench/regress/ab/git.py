"""The git side of an A/B comparison: the checkout, a revision's commit, and a temporary worktree of it."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bench.errors import InputError


class AbError(InputError):
    """An A/B comparison that cannot be made (unknown revision, a revision that cannot run the sweep): exit 2."""


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=120)
    except FileNotFoundError:
        raise AbError("git is not installed; `bench ab` needs it to check a revision out") from None


def checkout_root(start: str | Path = ".") -> Path:
    """The top of the git checkout that holds `start`: attnbench's own, or a user's repository (is_attnbench)."""
    done = _git(Path(start), "rev-parse", "--show-toplevel")
    if done.returncode != 0:
        raise AbError(f"{Path(start).resolve()} is not in a git checkout; run `bench ab` in the repository whose "
                      "revisions it compares (or pass --repo)")
    return Path(done.stdout.strip())


def is_attnbench(root: Path) -> bool:
    """Whether `root` is an attnbench tree (it has bench/): then its revisions' attnbench is compared; otherwise the
    user's code is, with attnbench itself from the running one (bench.regress.ab.side)."""
    return (root / "bench" / "__init__.py").is_file()


def resolve(repo: Path, rev: str) -> str:
    """The full commit id of a branch, tag or commit, or AbError naming it."""
    done = _git(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    if done.returncode != 0 or not done.stdout.strip():
        raise AbError(f"revision {rev!r} is unknown in {repo} (a shallow checkout may lack it: fetch more history)")
    return done.stdout.strip()


def describe(repo: Path, commit: str) -> str:
    """Short id and subject of a commit, for titles."""
    done = _git(repo, "log", "-1", "--format=%h %s", commit)
    return done.stdout.strip() if done.returncode == 0 else commit[:12]


def commit_info(repo: Path, commit: str | None) -> dict:
    """pytest-benchmark's commit_info layout for a commit: id, time (committer date), author_time, dirty."""
    if not commit:
        return {}
    done = _git(repo, "log", "-1", "--format=%cI%n%aI%n%D", commit)
    lines = done.stdout.splitlines() if done.returncode == 0 else []
    return {"id": commit, "time": lines[0] if lines else None, "author_time": lines[1] if len(lines) > 1 else None,
            "dirty": False, "project": repo.name, "branch": None}


def is_dirty(repo: Path) -> bool:
    done = _git(repo, "status", "--porcelain", "--untracked-files=no")
    return done.returncode == 0 and bool(done.stdout.strip())


@contextmanager
def worktree(repo: Path, commit: str) -> Iterator[Path]:
    """A temporary detached worktree of `commit`, removed afterwards (also after an error or Ctrl-C)."""
    parent = Path(tempfile.mkdtemp(prefix="attnbench-ab-"))
    tree = parent / "rev"
    done = _git(repo, "worktree", "add", "--detach", "--quiet", str(tree), commit)
    if done.returncode != 0:
        shutil.rmtree(parent, ignore_errors=True)
        first = (done.stderr.strip().splitlines() or ["git worktree add failed"])[-1]
        raise AbError(f"cannot check {commit[:12]} out in a temporary worktree: {first}")
    try:
        yield tree
    finally:
        _git(repo, "worktree", "remove", "--force", str(tree))
        shutil.rmtree(parent, ignore_errors=True)
        _git(repo, "worktree", "prune")
