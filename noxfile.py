"""Sessions: `nox -s tests`, `nox -s lint`, `nox -s bench`, `nox -s report`, `nox -s regress`, `nox -s compat`."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
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
    "rich==15.0.0",
    "submitit==1.5.4",  # the optional [slurm] extra: the tests run `--launcher local` through it
    "transformers==5.24.0",  # the optional [hf] extra: the hf-* backends call its attention functions
    "pytest-xdist==3.8.0",  # `nox -s tests` runs the suite on every core (pyproject's [dev] extra pins the same)
]


def install(session: nox.Session, pins: list[str] = PINNED) -> None:
    # pip byte-compiles every module it installs (56 of the 76 s that installing these took here); Python compiles
    # only what a run imports, once, on first import, which needs bytecode writing on (some environments turn it off)
    session.env["PYTHONDONTWRITEBYTECODE"] = None  # None: unset, in nox
    session.install("--no-compile", *pins)
    session.install("--no-deps", "--no-compile", "-e", ".")
    # ...and what every run imports is compiled here, once: the processes a run starts together would each compile it
    session.run_install("python", "-c", PRECOMPILE)


# On both cores (22 -> 13.5 s in a new checkout here): this process imports torch's compiler while a second one
# compiles the largest packages it will reach (inductor, dynamo, functorch) ahead of it, then imports the rest.
PRECOMPILE = """
import importlib.util, os, subprocess, sys
torch_dir = importlib.util.find_spec("torch").submodule_search_locations[0]
dirs = [os.path.join(torch_dir, name) for name in ("_inductor", "_dynamo", "_functorch")]
ahead = subprocess.Popen([sys.executable, "-c", "import compileall, sys; "
                          "[compileall.compile_dir(d, quiet=1) for d in sys.argv[1:]]; "
                          "import pandas, matplotlib.pyplot, pytest", *dirs])
import torch._inductor.compile_fx
sys.exit(ahead.wait())
"""


@nox.session
def tests(session: nox.Session) -> None:
    """The whole test suite in three pytest runs: every test but the `serial` and `daemons` ones on all cores
    (pytest-xdist); beside it, in its own process, the `daemons` ones (a real Slurm: they mostly wait on it, and
    time nothing); then the `serial` ones (they time things) alone, so no other test shares the CPU with them.

    Extra args go to every run: `nox -R -s tests -- -m "not slow"` (the inner loop; -R: reuse the venv, no
    reinstall), `-- tests/test_store.py -x`. A -m given is combined with each part's own; a part that selects no
    test is not a failure (exit 5); the serial part runs once the other two have passed. The daemons part's output
    is printed when it ends; it is stopped when the parallel part fails.
    """
    install(session)
    if session.run("python", "-c", "", silent=True) is None:  # `nox --install-only`: nox runs nothing after the
        return  # install, and the daemons part, which this session starts itself, must not run either
    parallel, daemons, serial = split_parts(session.posargs or ["-q"])
    with tempfile.TemporaryFile("w+") as log:
        env = {k: v for k, v in {**os.environ, **session.env}.items() if v is not None}  # None: unset, in nox
        env["PATH"] = os.pathsep.join([session.bin, os.environ.get("PATH", "")])
        beside = subprocess.Popen([str(Path(session.bin) / "pytest"), *daemons], stdout=log,
                                  stderr=subprocess.STDOUT, env=env)
        try:
            session.run("pytest", *parallel, success_codes=[0, 5])
        except BaseException:  # the parallel part failed or was interrupted: stop the daemons part too
            beside.terminate()
            raise
        finally:
            code = beside.wait()
            log.seek(0)
            session.log(f"the `daemons` part (pytest {' '.join(daemons)}):\n{log.read()}")
    if code not in (0, 5):
        session.error(f"the `daemons` part failed (pytest exit {code}); its output is above")
    session.run("pytest", *serial, success_codes=[0, 5])


def split_parts(args: list[str]) -> tuple[list[str], list[str], list[str]]:
    """pytest's args for the parallel, daemons and serial parts of `nox -s tests`: the last -m (pytest's rule) is
    and-ed with each part's own; -n and --dist reach the parallel part only. worksteal: a worker that runs out of
    tests takes some of the other's, so a run of long tests (FlexAttention compiles) does not end on one."""
    rest, mark, parallel_only = [], None, []
    it = iter(args)
    for arg in it:
        if arg == "-m":
            mark = next(it, "")
        elif arg.startswith("-m") and not arg.startswith("--"):
            mark = arg[2:].lstrip("=")
        elif arg in ("-n", "--numprocesses", "--dist"):
            parallel_only += [arg, next(it, "")]
        elif arg.startswith(("--numprocesses=", "--dist=")) or (arg.startswith("-n") and arg[2:].isdigit()):
            parallel_only.append(arg)
        else:
            rest.append(arg)
    both = f"({mark}) and " if mark else ""
    return (["-n", "auto", "--dist", "worksteal", *parallel_only, "-m", f"{both}not serial and not daemons", *rest],
            ["-p", "no:xdist", "-m", f"{both}daemons", *rest],
            ["-p", "no:xdist", "-m", f"{both}serial", *rest])


# The GPU machine's torch. Its PyPI wheel is a CUDA build (about 4.7 GB installed, with its NVIDIA libraries) that
# also runs on a CPU, which is what this session needs: an API newer than 2.11 is caught here, not on a rare GPU.
COMPAT_TORCH = "torch==2.11.0"
# Installing it took 6.1 GB at its peak here (its wheels sit unpacked beside what they install), 4.5 GB after;
# some machines have less free, and a full disk half-way through an install breaks more than this session.
COMPAT_ROOM_GB = 8


@nox.session
def compat(session: nox.Session) -> None:
    """Under the GPU machine's torch 2.11, on the CPU: the GPU check's dry run and the quick profile.

    Skipped, saying so, where the disk cannot hold torch 2.11's CUDA build (COMPAT_ROOM_GB free, in the venv's
    folder and the temporary one): that build is the only torch 2.11 the package index offers for Linux."""
    short = {where: free for where in {Path(session.virtualenv.location).parent, Path(tempfile.gettempdir())}
             if (free := shutil.disk_usage(where).free / 1e9) < COMPAT_ROOM_GB}
    if short:
        session.skip("not enough disk for torch 2.11's CUDA build: " + ", ".join(
            f"{free:.1f} GB free in {where}" for where, free in short.items()) + f", {COMPAT_ROOM_GB} GB needed")
    session.env["PIP_NO_CACHE_DIR"] = "1"  # a second copy of 3 GB of wheels in pip's cache helps no later run
    install(session, [COMPAT_TORCH, *[p for p in PINNED if not p.startswith("torch==")]])
    session.run("python", "-c", "import torch; print('torch', torch.__version__)")
    out = Path(tempfile.mkdtemp(prefix="attnbench-compat-"))
    try:
        session.run("python", "-m", "bench", "gpu-check", "--dry-run", "--out", str(out / "gpu-check"))
        session.run("python", "-m", "bench", "run", "--profile", "quick", "--device", "cpu", "--out",
                    str(out / "quick.json"))
    finally:
        shutil.rmtree(out, ignore_errors=True)


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
    """CI regression check -> reports/regress.md. Extra args go to the command that runs (`bench ab` or `compare`).

    bench.regress.gate decides, and says which and why: in a pull request (GITHUB_BASE_REF, or `-- --base REF`), A/B
    of the quick sweep (one GQA prefill and one decode shape per backend) against the merge base, interleaved on
    this machine; otherwise this machine's stored baseline, but only when it was recorded on this host with the
    ceilings this machine measures now; otherwise A/B against the previous commit. An unchanged tree never fails
    because the machine changed.
    """
    install(session)
    session.run("python", "-m", "bench.regress.gate", *session.posargs)
