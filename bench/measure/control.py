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
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Mapping

PROBE_N = 96  # 1.8 MFLOP, 108 KiB of operands: inside any L2, about 20 us on one core
PROBE_FLOPS = 2 * PROBE_N**3


class Probe:
    """Times the fixed product each time it is called (untimed by the caller); flops_per_s is their median speed."""

    def __init__(self) -> None:
        import torch  # here: the spell rule below is read by the analysis and bench compare, which need no torch

        self._mm = torch.mm
        gen = torch.Generator().manual_seed(0)
        self.a = torch.randn(PROBE_N, PROBE_N, generator=gen)
        self.b = torch.randn(PROBE_N, PROBE_N, generator=gen)
        self.out = torch.empty(PROBE_N, PROBE_N)
        self.seconds: list[float] = []

    def __call__(self) -> None:
        # once untimed, so that the timed product finds its operands in cache whatever the case's call evicted: the
        # probe then reads the core's speed, not the case's memory traffic (which a change of the code may move)
        self._mm(self.a, self.b, out=self.out)
        t0 = time.perf_counter()
        self._mm(self.a, self.b, out=self.out)
        self.seconds.append(time.perf_counter() - t0)

    def flops_per_s(self) -> float | None:
        """The probe's median FLOP/s over its calls, None before any."""
        if not self.seconds:
            return None
        return PROBE_FLOPS / max(statistics.median(self.seconds), 1e-12)


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
