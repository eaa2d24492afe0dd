"""The machine's own speed during a case: the local control of the regression check (CPU).

A shared host has slow spells: for seconds at a time every call on a core runs 10-40% slower, and now and then 2-3x
(a busy sibling hyperthread, another tenant, the hypervisor). A case's headline is timed in well under a second, so
one spell moves one case's median between two runs of the same code while its own rounds look tight, and a run's
GEMM at its start and end (the run-level control) cannot see it. So between the headline's rounds, untimed, a fixed
probe is timed: one PROBE_N^3 fp32 matrix product on the case's threads, after an untimed one that brings its
operands into cache.
The median of the probes is the machine's speed beside the case, `control_flops` in its record, and `bench compare`
asks a change in time to hold in units of it too.

Measured on a 2-core AMD EPYC (a KVM guest, torch 2.13 CPU, one thread), timing in turn for 120 s 20 calls each of a
GQA prefill (S 256), this probe and a 2 MiB copy: the prefill's median of 20 ran slower than its usual by more than
1.15x in 391 of about 1,700 turns, and moved with the probe (correlation of the logs 0.76). Over windows of eight
turns, a case's length, the prefill's 99th percentile fell from 1.31x its usual to 1.08x in units of the probes
timed between its rounds; probes timed only before and after the window left it at 1.23x.

A cold case reads its inputs from memory, and the memory's speed moves on its own: the other tenants of a host share
its memory bandwidth, which an in-cache product does not see. In two back-to-back default runs on that AMD, the run's
read ceiling measured 31.3 and 28.8 GB/s at the first run's start and end, 24.6 and 30.1 GB/s at the second's, its
GEMM within 2%; the cold cases' times moved between the runs by 0.99-1.10x (median, per eighth of the run) and 25
of them by 1.12-1.77x, while the warm cases' stayed within 0.96-1.02x. So a cold case's probe also times a read of
PROBE_READ_BYTES from its own rotation's copies half a rotation from the next call's (memory it reads, out of cache):
`control_read`, bytes/s, and `bench compare` asks a cold case's change to hold in units of it too. With another
process copying 256 MiB arrays 4 s of every 8, a 2 MiB read's median slowed 1.2x, the cold GQA and MQA decode steps
beside it 1.02-1.09x and a compute-bound bf16 step not at all: a case slows less than the read, so the control is a
second judge beside the seconds (a change must hold in both), never a correction of them.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping
from typing import Any

PROBE_N = 96  # 1.8 MFLOP, 108 KiB of operands: inside any L2, about 20 us on one core
PROBE_FLOPS = 2 * PROBE_N**3
PROBE_READ_BYTES = 2**20  # the memory probe's read: about 40 us from memory on one core


class Probe:
    """Times the fixed product each time it is called (untimed by the caller); flops_per_s is their median speed.

    With `read` (a cold case: bench.measure.rotation.Rotating.read_far), it also times a read of PROBE_READ_BYTES
    from memory after each product; read_bytes_per_s is their median speed."""

    def __init__(self, read: Callable[[Any], int] | None = None) -> None:
        import torch  # here: the spell rule below is read by the analysis and bench compare, which need no torch

        self._mm = torch.mm
        gen = torch.Generator().manual_seed(0)
        self.a = torch.randn(PROBE_N, PROBE_N, generator=gen)
        self.b = torch.randn(PROBE_N, PROBE_N, generator=gen)
        self.out = torch.empty(PROBE_N, PROBE_N)
        self.seconds: list[float] = []
        self.read = read
        self.buffer = torch.empty(PROBE_READ_BYTES, dtype=torch.uint8) if read else None
        self.read_rates: list[float] = []

    def __call__(self) -> None:
        # once untimed, so that the timed product finds its operands in cache whatever the case's call evicted: the
        # probe then reads the core's speed, not the case's memory traffic (which a change of the code may move)
        self._mm(self.a, self.b, out=self.out)
        t0 = time.perf_counter()
        self._mm(self.a, self.b, out=self.out)
        self.seconds.append(time.perf_counter() - t0)
        if self.read is not None:
            t0 = time.perf_counter()
            n = self.read(self.buffer)
            if n:
                self.read_rates.append(n / max(time.perf_counter() - t0, 1e-12))

    def flops_per_s(self) -> float | None:
        """The probe's median FLOP/s over its calls, None before any."""
        if not self.seconds:
            return None
        return PROBE_FLOPS / max(statistics.median(self.seconds), 1e-12)

    def read_bytes_per_s(self) -> float | None:
        """The memory probe's median bytes/s over its calls, None without a read."""
        return statistics.median(self.read_rates) if self.read_rates else None


# A probe this far under its run's usual speed ran in a slow spell of the host. In three default runs on a shared
# 2-core AMD EPYC, 85% of the cases' probes sat within 0.97-1.04 of their run's median and the rest at 0.74-0.88; those
# cases took 1.26-1.29x (median; 90th percentile 1.56-1.71x) their time in the other runs, more than the probe itself
# slowed (memory contention slows a call that reads memory more than an in-cache product).
SPELL_SHARE = 0.9


def spell_shares(probes: Mapping[str, float | None]) -> dict[str, float]:
    """{case: its probe's share of the run's usual speed (the median over the run's cases)} for the cases timed in a
    slow spell (under SPELL_SHARE); {} with fewer than two probes."""
    speeds = {k: float(v) for k, v in probes.items() if isinstance(v, (int, float)) and v == v and v > 0}
    if len(speeds) < 2:
        return {}
    usual = statistics.median(speeds.values())
    return {k: v / usual for k, v in speeds.items() if v < SPELL_SHARE * usual}
