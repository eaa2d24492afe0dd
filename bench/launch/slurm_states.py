"""Where each task of a Slurm job array stands, read from Slurm itself rather than through submitit.

squeue (`-r -t all`: one line per task, finished ones too for MinJobAge seconds) is asked first: it needs no
accounting and it is what the controller knows now. sacct fills in the tasks squeue has forgotten. sacct may
print a whole array as one line ("22_[0-2%3]|CANCELLED by 0") that submitit applies to every task; here a
task's own line always wins over such a range, and a task squeue still shows as live is live, whatever sacct says.
Without accounting (sacct: "Slurm accounting storage is disabled") a task that neither command knows is called
gone once it has been unknown for a while, so the launcher never waits without end.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass

LIVE = {"PENDING", "RUNNING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "CONFIGURING", "COMPLETING", "RESIZING",
        "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT", "RESV_DEL_HOLD", "SPECIAL_EXIT"}


@dataclass(frozen=True)
class TaskState:
    state: str  # Slurm's word, upper case: RUNNING, CANCELLED, TIMEOUT...; UNKNOWN when no one knows
    detail: str = ""  # "by 0" after CANCELLED; squeue's reason (Resources, BeginTime...)
    exit_code: str = ""  # sacct's "code:signal"

    @property
    def live(self) -> bool:
        return self.state in LIVE


def _tasks(text: str) -> list[int] | None:
    """'3' -> [3]; '[0-2,5%3]' -> [0, 1, 2, 5]; None for what is not a task list."""
    text = text.split("%")[0].strip("[]")
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            return None
        out += range(int(lo), int(hi or lo) + 1)
    return out


def parse_sacct(text: str, array_id: str) -> dict[int, TaskState]:
    """`sacct -X -P -n -o JobID,State,ExitCode` lines of one array, per task; a task's own line beats a range."""
    own: dict[int, TaskState] = {}
    ranged: dict[int, TaskState] = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) < 2 or parts[0] != array_id and not parts[0].startswith(f"{array_id}_"):
            continue
        word, _, detail = parts[1].strip().partition(" ")
        state = TaskState(word.upper(), detail.strip(), parts[2].strip() if len(parts) > 2 else "")
        spec = parts[0][len(array_id) + 1:] or "0"  # one shard is a plain job: its task 0
        tasks = _tasks(spec)
        if tasks is None:
            continue
        for t in tasks:
            (ranged if spec.startswith("[") else own)[t] = state
    return ranged | own


def parse_squeue(text: str, array_id: str) -> dict[int, TaskState]:
    """`squeue -r -t all -h -o %F|%K|%T|%r` lines, per task of array_id."""
    out: dict[int, TaskState] = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) < 3 or parts[0] != array_id:
            continue
        for t in _tasks("0" if parts[1] == "N/A" else parts[1]) or []:  # N/A: a plain job, one shard
            out[t] = TaskState(parts[2].upper(), parts[3] if len(parts) > 3 and parts[3] != "None" else "")
    return out


def _ask(argv: list[str]) -> tuple[str, str | None]:
    """(stdout, None) or ("", the error's first line)."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as err:
        return "", str(err)
    if done.returncode != 0:
        return "", (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[0]
    return done.stdout, None


class ArrayStates:
    """Per-task states of one array; `gone_s`: how long a task unknown to squeue and sacct is still waited for."""

    def __init__(self, array_id: str, tasks: int, gone_s: float) -> None:
        self.array_id, self.tasks, self.gone_s = array_id, tasks, gone_s
        self.sacct_error: str | None = None
        self._last: dict[int, TaskState] = {}
        self._missing: dict[int, tuple[float, int]] = {}  # task -> (first missed, polls missed)

    def poll(self, now: float) -> dict[int, TaskState]:
        queue, error = _ask(["squeue", "-r", "-t", "all", "-h", "-j", self.array_id, "-o", "%F|%K|%T|%r"])
        if error is not None and "Invalid job id" not in error:
            return {t: self._last.get(t, TaskState("UNKNOWN")) for t in range(self.tasks)}  # a hiccup: ask again
        states = parse_squeue(queue, self.array_id)
        finished_or_missing = [t for t in range(self.tasks) if t not in states or not states[t].live]
        if finished_or_missing:
            acct, self.sacct_error = _ask(["sacct", "-X", "-P", "-n", "-j", self.array_id,
                                           "-o", "JobID,State,ExitCode"])
            accounted = parse_sacct(acct, self.array_id)
            for t in finished_or_missing:
                if t in accounted and (t not in states or accounted[t].state == states[t].state):
                    states[t] = accounted[t]  # sacct's word for a finished task carries its exit code and "by UID"
        for t in range(self.tasks):
            if t in states:
                self._missing.pop(t, None)
                continue
            since, polls = self._missing.get(t, (now, 0))
            self._missing[t] = (since, polls + 1)
            last = self._last.get(t, TaskState("UNKNOWN"))
            if last.state == "PENDING" and polls + 1 >= 2:
                # Slurm drops a task cancelled before it started from the array's pending set: no record is left
                states[t] = TaskState("CANCELLED", "while pending")
            elif not last.live and last.state != "UNKNOWN":
                states[t] = last  # it ended; squeue has since forgotten it
            elif now - since >= self.gone_s:
                states[t] = TaskState("GONE", f"sacct: {self.sacct_error}" if self.sacct_error else "")
            else:
                states[t] = last  # missed once, or not yet listed: its last state holds for now
        self._last = {**self._last, **{t: s for t, s in states.items() if s.state != "UNKNOWN"}}
        return states
