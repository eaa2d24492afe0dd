"""`bench ab --blocks auto`: more ABBA blocks for the cases their blocks have not decided, until they decide or the
time (--ab-time) is spent (pure: the engine measures, this decides what to measure next).

Every case first gets `start` blocks. Then, in rounds, each case still inconclusive (bench.regress.blocks: its
interval straddles the threshold) gets `step` more blocks, until it decides, reaches `max_blocks`, or the A/B has
measured for `time_s` seconds. Each extra block, like the first ones, runs in fresh worker processes (the engine
restarts both sides before each of the `step` blocks): in the workers of earlier blocks it would repeat their
state, and add no new unit to the interval. The time is checked before each case's next block, so the limit is
overrun by at most one block. A case decided once is not measured again: its verdict is final.
"""

from __future__ import annotations

from dataclasses import dataclass

from bench.errors import UsageError
from bench.regress.blocks import MIN_BLOCKS

START = MIN_BLOCKS  # the fewest blocks whose interval can exist at alpha (bench.regress.blocks)
STEP = 4
# Time-only slices (bench.regress.ab.worker) make a block of a millisecond kernel about half a second, and a case
# whose blocks scatter by 10% needs about a hundred of them to place a x1.1 move above x1.05; --ab-time bounds it.
MAX_BLOCKS = 200
DEFAULT_TIME_S = 300.0


@dataclass(frozen=True)
class AutoBlocks:
    start: int = START
    step: int = STEP
    max_blocks: int = MAX_BLOCKS
    time_s: float = DEFAULT_TIME_S  # the whole A/B's measuring time after which no block is added

    def __post_init__(self) -> None:
        if not (2 <= self.start <= self.max_blocks and self.step >= 1):
            raise UsageError(f"auto blocks: start {self.start}, step {self.step}, max {self.max_blocks}: need "
                             "2 <= start <= max and step >= 1")
        if not self.time_s > 0:
            raise UsageError(f"--ab-time {self.time_s}: a positive number of seconds")


def parse_blocks(text: str) -> int | None:
    """'--blocks N' -> N (at least MIN_BLOCKS: fewer give no interval at alpha); 'auto' -> None."""
    raw = str(text).strip().lower()
    if raw == "auto":
        return None
    try:
        n = int(raw)
    except ValueError:
        raise UsageError(f"--blocks {text!r}: a whole number of ABBA blocks (at least {MIN_BLOCKS}), or auto") from None
    if n < MIN_BLOCKS:
        raise UsageError(f"--blocks {n}: at least {MIN_BLOCKS} (a case's signed-rank interval at alpha 0.01 needs "
                         f"{MIN_BLOCKS} block ratios; fewer could never decide)")
    return n


def parse_time(text: str) -> float:
    """'--ab-time 300' or '5m' -> seconds."""
    raw = str(text).strip().lower()
    scale = 60.0 if raw.endswith("m") else 1.0
    try:
        value = float(raw.rstrip("ms")) * scale
    except ValueError:
        raise UsageError(f"--ab-time {text!r}: seconds (300) or minutes (5m)") from None
    if not value > 0:
        raise UsageError(f"--ab-time {text!r}: a positive time")
    return value


def to_extend(undecided: dict[str, int], elapsed_s: float, auto: AutoBlocks) -> list[str]:
    """Of the cases not yet decided (id -> blocks it has), those to give `step` more blocks now, in their order;
    [] when the time is spent or every undecided case has its most blocks: the A/B stops there."""
    if elapsed_s >= auto.time_s:
        return []
    return [cid for cid, n in undecided.items() if n < auto.max_blocks]


def more(n: int, auto: AutoBlocks) -> int:
    """How many blocks a case that has n gets next (step, not past max_blocks)."""
    return max(0, min(auto.step, auto.max_blocks - n))
