"""Timings that look stalled are found against their line's work, and a re-measurement that shows a stall is used."""

import pandas as pd
import pytest

from bench.analysis.conditions import condition
from bench.analysis.suspects import again_by_case, note, spells, suspects, turning, usual_probe
from bench.analysis.verdict import FAILS, HOLDS, INCONCLUSIVE


def _line(times_ms, backend="flex", kvs=(1024, 4096, 16384)):
    return [{"case_id": f"{backend}/kv{kv}", "status": "ok", "backend": backend, "variant": "gqa", "phase": "decode",
             "seq_q": 1, "seq_kv": kv, "flops": 4.0 * 8 * 64 * kv, "median_s": t / 1e3, "sparsity": None,
             "lengths": None, "page_size": None} for kv, t in zip(kvs, times_ms, strict=True)]


def test_a_flat_stalled_time_and_a_jump_are_suspect_and_a_steady_line_is_not():
    assert suspects(pd.DataFrame(_line([0.05, 0.2, 0.8]))) == []
    assert suspects(pd.DataFrame(_line([0.02, 0.03, 0.06]))) == []  # per-call costs: flat, but under a millisecond
    flat = suspects(pd.DataFrame(_line([15.8, 15.9, 16.0])))
    assert [s["case_id"] for s in flat] == ["flex/kv1024", "flex/kv4096"] and "flat against" in flat[0]["reason"]
    jump = suspects(pd.DataFrame(_line([0.05, 0.2, 16.0])))
    assert [s["case_id"] for s in jump] == ["flex/kv16384"] and "less work per second" in jump[0]["reason"]


def test_only_a_re_measurement_faster_by_half_replaces_the_first_and_the_note_names_both_kinds():
    remeasured = [{"case_id": "a", "reason": "r", "first_s": 0.016, "again_s": 0.0007},
                  {"case_id": "b", "reason": "r", "first_s": 0.016, "again_s": 0.015}]
    assert set(again_by_case(remeasured)) == {"a"}
    text = note(remeasured)
    assert "1 timing(s) looked stalled" in text and "a (r; again 0.70 ms)" in text and "measured alike again" in text
    assert note(None) == ""


def _probed_line(probes):
    rows = _line([0.05, 0.2, 0.8, 3.2], kvs=(1024, 4096, 16384, 65536))
    return pd.DataFrame([r | {"control_flops": p} for r, p in zip(rows, probes, strict=True)])


def test_a_case_whose_probe_ran_well_under_the_run_s_usual_speed_is_a_spell_suspect_the_slowest_first():
    assert spells(_probed_line([8.6e10, 8.5e10, 8.7e10, 8.4e10])) == []
    found = spells(_probed_line([7.0e10, 8.5e10, 6.5e10, 8.6e10]))  # usual (median) 7.75e10: 0.90 of it is 6.98e10
    assert [s["case_id"] for s in found] == ["flex/kv16384"] and found[0]["kind"] == "spell"
    assert "its probe at 0.84 of the run's usual speed" in found[0]["reason"]
    assert spells(pd.DataFrame(_line([0.05, 0.2, 0.8]))) == []  # a file from before the probe
    assert usual_probe(_probed_line([7.0e10, 8.5e10, 6.5e10, 8.6e10])) == pytest.approx(7.75e10)


def test_a_spell_s_re_measurement_is_taken_only_when_faster_at_the_usual_speed():
    spell = {"kind": "spell", "reason": "r", "first_s": 0.004}
    remeasured = [spell | {"case_id": "taken", "again_s": 0.003, "again_share": 0.98},
                  spell | {"case_id": "still-in-a-spell", "again_s": 0.003, "again_share": 0.8},
                  spell | {"case_id": "not-faster", "again_s": 0.0041, "again_share": 1.0}]
    assert set(again_by_case(remeasured)) == {"taken"}
    text = note(remeasured)
    assert "1 timing(s) ran in a slow spell of the host" in text and "taken (4.00 → 3.00 ms)" in text
    assert "2 suspect timing(s) measured alike again" in text


def test_the_spelled_cases_re_measured_first_are_those_whose_condition_s_word_the_spell_may_have_turned():
    # usual probe 8.6e10; "variant" and "plain2" ran in a spell at 0.8 of it
    probes = {"plain": 8.6e10, "variant": 6.88e10, "far": 6.88e10, "plain2": 6.88e10, "other": 8.6e10,
              "x": 8.6e10, "y": 8.6e10}
    times = {"plain": 10e-3, "variant": 15e-3, "far": 30e-3, "plain2": 10e-3, "other": 11.5e-3, "x": 1e-3, "y": 1e-3}
    frame = pd.DataFrame([{"case_id": c, "status": "ok", "median_s": times[c], "control_flops": probes[c]}
                          for c in probes])

    def within(name, top, bottom, why=""):  # a "within 1.3x" condition on top / bottom
        r = times[top] / times[bottom]
        return condition({"name": name}, r, (r * 0.97, r * 1.03), 1.3, holds_above=False, pairs=[(top, bottom)],
                         why=why)

    slowed = within("variant", "variant", "plain")  # 1.5x: fails; 1.2x with the spell taken out: holds
    assert slowed.verdict == FAILS and turning([slowed], frame) == {"variant"}
    lifted = within("other", "other", "plain2")  # 1.15x: holds; its bottom at the usual speed, 1.44x: fails
    assert lifted.verdict == HOLDS and turning([lifted], frame) == {"plain2"}
    far = within("far", "far", "plain")  # 3x, or 2.4x: fails either way
    alike = within("alike", "variant", "plain2")  # both sides in the spell: 1.5x either way
    sinking = within("sinking", "y", "plain2")  # 0.1x, or 0.125x: holds either way
    assert turning([far, alike, sinking], frame) == frozenset()
    assert turning([slowed, far, lifted], frame) == {"variant", "plain2"}
    on_chip = condition({"name": "on-chip"}, 1.3, (1.0, 1.6), 1.3, holds_above=False, pairs=[("variant", "plain")],
                        why="a cache on-chip")  # open for a stated reason: a time cannot decide it
    assert on_chip.verdict == INCONCLUSIVE and turning([on_chip], frame) == frozenset()
    assert turning([slowed], frame.drop(columns="control_flops")) == frozenset()  # a file from before the probe
