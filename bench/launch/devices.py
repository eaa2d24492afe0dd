"""`bench run --devices cuda:0,cuda:1,...`: one worker process per device, each pulling the next case from a shared
queue (bench.engine.queue) when it is free, all folded into the one results file.

Each worker is an ordinary `bench run --planned` of the launcher's planned cases, handed as data, on one device
(CUDA_VISIBLE_DEVICES names it, so its case ids say `cuda` like any single-device run's), writing its own journalled
file under `.<out>.parts/`; each record names the device that ran it (`ran_on`). The results file holds the run's
header from the start; when the workers stop (done, Ctrl-C or a failure) their cases are folded into it and the
parts removed. After a crash of the launcher itself, `--resume` folds what the parts hold first, then queues only
the cases still missing.
The devices must be alike (one GPU model): the run's fingerprint is then that of any one of them, so `bench
compare` matches it against single-device runs of that GPU, and parts whose fingerprints differ are refused.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

from bench.engine import options
from bench.engine.queue import DEVICE_ENV, QUEUE_ENV, CaseQueue
from bench.errors import UsageError
from bench.results import ResultsError, RunDocument, journal_path, read_run, write_atomic
from bench.results.merge import fold_workers


def check_devices(names: tuple[str, ...]) -> None:
    """Every device present and all of one model, or a one-line UsageError."""
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    missing = [d for d in names if int(d.split(":")[1]) >= count]
    if missing:
        raise UsageError(f"--devices: {', '.join(missing)} not found (torch sees {count} CUDA devices here)")
    models = {d: torch.cuda.get_device_name(int(d.split(":")[1])) for d in names}
    if len(set(models.values())) > 1:
        shown = ", ".join(f"{d} is {m}" for d, m in models.items())
        raise UsageError(f"--devices: the devices of one run must be alike ({shown}); run each model apart")


def parts_folder(out: Path) -> Path:
    return out.with_name(f".{out.name}.parts")


def _worker_env(name: str) -> dict[str, str]:
    """The worker sees only its device. cuda:K is torch's K-th visible device here, so when this process was
    itself given a list (Slurm sets CUDA_VISIBLE_DEVICES to a job's GPUs) the worker gets that list's K-th entry;
    CUDA_DEVICE_ORDER is inherited, so both number the devices alike."""
    env = {**os.environ, DEVICE_ENV: name}
    if name.startswith("cuda:"):
        index = int(name.split(":")[1])
        visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
        env["CUDA_VISIBLE_DEVICES"] = visible[index] if index < len(visible) else str(index)
    return env


def _relay(proc: subprocess.Popen, prefix: str) -> None:
    for line in proc.stdout:
        sys.stdout.write(f"{prefix} {line}")
        sys.stdout.flush()


def run_on_devices(plan: options.Plan, devices: tuple[str, ...], trace: Path | None = None) -> int:
    """Run the plan's pending cases on the devices' workers (each saving its profiler traces in `trace`, when
    given); fold their results into plan.out. The exit code of
    `bench run`: 130 interrupted, 1 a failing case or a failed worker (named), else 0."""
    parts = parts_folder(plan.out)
    if plan.resume:
        fold(plan, parts)
    elif parts.exists():
        raise UsageError(f"{parts} exists (the workers' files of a stopped run); pass --resume to continue it")
    else:
        # the run exists (and --resume works) from the start
        write_atomic(plan.out, RunDocument(meta=plan.meta(devices=devices)))
    done = set(read_run(plan.out).case_ids())
    pending = [c.id for c in plan.cases if c.id not in done]
    if not pending:
        return _finish(plan, parts, [], interrupted=False)
    queue = CaseQueue.create(parts, pending)
    planned = options.write_planned(parts / "plan.json", plan)  # the cases as data: no worker plans again
    procs = []
    for i, name in enumerate(devices):
        cmd = [sys.executable, "-m", "bench", "run", "--planned", str(planned), "--out", str(parts / f"worker{i}.json"),
               *(["--trace", str(trace)] if trace else [])]
        proc = subprocess.Popen(cmd, env={**_worker_env(name), QUEUE_ENV: str(queue.folder)},
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        relay = threading.Thread(target=_relay, args=(proc, f"[{name}]"), daemon=True)
        relay.start()
        procs.append((name, proc, relay))
    interrupted = False
    try:
        for _, proc, _ in procs:
            proc.wait()
    except KeyboardInterrupt:
        interrupted = True
        for _, proc, _ in procs:  # a terminal's Ctrl-C reached them already; a `kill -INT` of ours did not
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
        for _, proc, _ in procs:
            proc.wait()
    for _, _, relay in procs:
        relay.join(timeout=5)
    return _finish(plan, parts, [(name, proc.returncode) for name, proc, _ in procs], interrupted)


def _finish(plan: options.Plan, parts: Path, codes: list[tuple[str, int]], interrupted: bool) -> int:
    doc = fold(plan, parts)
    interrupted = interrupted or any(code in (130, -signal.SIGINT) for _, code in codes)
    failed = [(name, code) for name, code in codes if code not in (0, 1, 130, -signal.SIGINT)]
    for name, code in failed:
        print(f"error: the worker on {name} stopped with exit code {code}; its finished cases are kept in "
              f"{plan.out}, and --resume runs the rest", file=sys.stderr)
    if interrupted:
        return 130
    if failed or any(code == 1 for _, code in codes):
        return 1
    return 0 if doc.meta.complete else 1


def fold(plan: options.Plan, parts: Path) -> RunDocument:
    """The workers' cases into plan.out (bench.results.merge.fold_workers); the parts folder is removed once its
    cases are safely in the results file."""
    files = sorted(parts.glob("worker*.json"))  # each read with its journal: a killed worker's cases count too
    try:
        doc = fold_workers(read_run(plan.out), [read_run(p) for p in files], [str(p) for p in files],
                           [c.id for c in plan.cases])
    except ResultsError as err:
        raise ResultsError(f"{err}. The parts are kept in {parts}") from None
    write_atomic(plan.out, doc)
    journal_path(plan.out).unlink(missing_ok=True)
    if parts.exists():
        shutil.rmtree(parts)
    return doc
