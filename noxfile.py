"""Sessions: `nox -s tests`, `nox -s lint`, `nox -s bench`, `nox -s report`, `nox -s regress`."""

from __future__ import annotations

from pathlib import Path

import nox

nox.options.reuse_existing_virtualenvs = True
nox.options.sessions = ["lint", "tests"]

# Pinned so runs are fast (torch 2.13.0 is a CPU wheel already on these machines) and comparable.
PINNED = [
    "torch==2.13.0",
    "pytest==9.2.0",
    "pytest-benchmark==5.3.1",
    "pandas==3.1.1",
    "matplotlib==3.11.2",
    "nvidia-ml-py==13.615.71",
    "scipy==1.17.1",
    "submitit==1.5.4",  # the optional [slurm] extra: the tests run `--launcher local` through it
]


def install(session: nox.Session) -> None:
    session.install(*PINNED)
    session.install("--no-deps", "-e", ".")


@nox.session
def tests(session: nox.Session) -> None:
    """The test suite (slow flex compiles included); extra args go to pytest."""
    install(session)
    session.run("pytest", *(session.posargs or ["-q"]))


@nox.session
def lint(session: nox.Session) -> None:
    session.install("ruff==0.17.6")
    session.run("ruff", "check", ".")


@nox.session
def bench(session: nox.Session) -> None:
    """The main job: the default sweep on the best device here, then the report. Extra args go to `bench run`."""
    install(session)
    args = session.posargs or ["--profile", "default"]
    # exit 1 means some case was incorrect or errored: still worth a report that shows it
    session.run("python", "-m", "bench", "run", *args, "--report", success_codes=[0, 1])


@nox.session
def report(session: nox.Session) -> None:
    """Report from results files (default: every run under results/)."""
    install(session)
    session.run("python", "-m", "bench", "report", *(session.posargs or ["results"]))


@nox.session
def regress(session: nox.Session) -> None:
    """CI regression check: the quick sweep against this machine's stored baseline (reports/regress.md).

    Extra args go to `bench compare` (e.g. --normalize, --threshold 15%).
    """
    install(session)
    # Two passes in two processes: a case regresses only when both are slower, so a stall or a slow spell
    # of a shared machine during one pass cannot fail CI on its own.
    passes = [Path(f"results/regress-current-{i}.json") for i in (1, 2)]
    for out in passes:
        out.unlink(missing_ok=True)  # bench run refuses to overwrite a results file
        # exit 1 (a case incorrect or errored) still yields a file; compare fails on that status change
        session.run("python", "-m", "bench", "run", "--profile", "quick", "--out", str(out), success_codes=[0, 1])
    session.run("python", "-m", "bench", "compare", "results/baselines", *map(str, passes), "--format", "markdown",
                "--output", "reports/regress.md", *session.posargs)
