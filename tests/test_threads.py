"""torch's CPU threads when --threads is not given: every core this process may use but one."""

import os

import pytest

from bench.engine import options


def _threads(**request) -> int | None:
    plan = options.plan(options.RunRequest(profile="quick", **request), default_out=False, listing=True)
    return plan.threads


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs sched_setaffinity")
def test_a_cpu_run_leaves_one_of_the_cores_it_may_use_free():
    cores = os.sched_getaffinity(0)
    assert _threads(device="cpu") == max(1, len(cores) - 1)
    try:  # a process confined to one core keeps its one thread
        os.sched_setaffinity(0, {min(cores)})
        assert _threads(device="cpu") == 1
    finally:
        os.sched_setaffinity(0, cores)


def test_threads_given_are_kept_and_a_planned_elsewhere_run_is_left_to_its_machine():
    assert _threads(device="cpu", threads="3") == 3
    plan = options.plan(options.RunRequest(profile="quick", device="cpu"), default_out=False, listing=True,
                        here=False)
    assert plan.threads is None  # a Slurm job's node has its own cores: its worker decides there
