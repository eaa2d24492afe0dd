"""Timings that look stalled are found against their line's work, and a re-measurement that shows a stall is used."""

import pandas as pd

from bench.analysis.suspects import again_by_case, note, suspects


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
