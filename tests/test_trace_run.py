"""`bench run --workload` end to end: --plan shows the schedule, a bad trace is refused before any work, and a tiny
trace's buckets and sampled real steps run checked against float64, with the workload kept in the results file and
read by the report."""

from __future__ import annotations

import json

import pytest

from bench.cli import main

PLAN_ON_AN_H200 = ["--device", "cuda", "--gpu", "H200", "--plan"]  # the spec sheet's ceilings: nothing calibrated


def test_plan_shows_each_traces_schedule_and_its_buckets(capsys):
    assert main(["run", "--workload", "azure-code", "--buckets", "3", "--backend", "naive", *PLAN_ON_AN_H200]) == 0
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if line.startswith("trace azure-code:"))
    assert "3,000 requests" in line and "distinct shapes" in line and "query tokens" in line
    assert "3 prefill and 3 decode buckets" in line and "bucketing error" in line
    # shared by the kinds' steps (azure-code: 15,382 steps, 3,672 of them mixed), past each kind's least of 5
    assert "32 real steps timed exactly to check them in time (5 prefill, 21 decode, 6 mixed)" in line
    # one naive case a bucket, then one a sampled step's half (a mixed step has two); two sampled halves are the same
    # case
    assert sum("lengths=rows:" in line for line in out.splitlines()) == 6 + 5 + 21 + 2 * 6 - 1


def test_a_trace_with_a_bad_row_is_refused_naming_its_line_and_nothing_runs(tmp_path, capsys):
    trace = tmp_path / "t.csv"
    trace.write_text("prompt_tokens,output_tokens\n100,4\n100,four\n")
    out = tmp_path / "run.json"
    assert main(["run", "--workload", str(trace), "--backend", "naive", "--device", "cpu", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"{trace}:3: output_tokens 'four' is not a whole number" in err and not out.exists()


@pytest.mark.slow  # runs a sweep
def test_a_tiny_traces_buckets_run_checked_and_the_report_reads_them(tmp_path):
    from bench.analysis.load import read_results
    from bench.analysis.time_to_serve import check_table, serve_table
    from bench.claims.trace import grid_vs_trace

    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps({"prompt_tokens": p, "output_tokens": o, "arrival_s": t}) + "\n"
                             for p, o, t in [(40, 6, 0.0), (70, 3, 0.01), (25, 8, 0.05), (90, 2, 0.08)]))
    out = tmp_path / "run.json"
    code = main(["run", "--workload", str(trace), "--buckets", "2", "--backend", "naive,sdpa-math",
                 "--heads", "4", "--kv-heads", "2", "--head-dim", "16", "--seq", "64", "--decode-kv", "128",
                 "--device", "cpu", "--budget", "0.02", "--out", str(out)])
    assert code == 0
    df, run = read_results(out)
    traced = df[df["lengths"].fillna("").str.startswith("rows:")]
    assert len(traced) >= 4 and (traced["status"] == "ok").all() and (traced["max_abs_err"] < 1e-5).all()
    workload = run.meta.workloads[str(trace)]
    assert workload["requests"] == 4 and workload["source"] == "jsonl"
    halves = {c[phase] for c in workload["checks"] for phase in ("prefill", "decode") if c[phase]}
    assert {b["lengths"] for b in workload["buckets"]} | halves == set(traced["lengths"])
    table = serve_table(df, run.meta.workloads)
    assert set(table["backend"]) == {"naive", "sdpa-math"} and table["complete"].all()
    checks = check_table(df, run.meta.workloads)
    assert set(checks["backend"]) == {"naive", "sdpa-math"} and (checks["steps"] == len(workload["checks"])).all()
    assert {c["kind"] for c in workload["checks"]} == {"prefill", "decode", "mixed"}
    assert grid_vs_trace(df, run.meta).verdict in ("holds", "does not hold", "inconclusive")
