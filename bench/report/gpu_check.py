"""The GPU check's summary: what a results file of the `gpu-check` sweep says against the published anchors.

Plain lines from the records (no pandas): the measured ceilings against the figures measured before on this
machine type, the anchor shapes' TFLOP/s against the published ones (ratio = measured / anchor), decode's KV
bandwidth as a share of the read-only ceiling, the sparse cases' speedups over their dense runs against the ideal
1/density, SDPA's kernel choices, launch-bound, throttled and energy figures, and every unsupported backend with
torch's reason.
"""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path
from statistics import geometric_mean, median

from bench.measure.spec_sheets import spec_sheet
from bench.problem.case import SIZE_FIELDS
from bench.results import read_run

# (what, measured before or published, the figure, unit scale)
CEILING_ANCHORS = (
    ("GEMM bf16", "gemm_flops_per_s_bf16", 790e12, "~790 TFLOP/s measured before on an H200 (80% of the 989 spec)"),
    ("copy", "copy_bytes_per_s", 4.3e12, "~4.3 TB/s measured before (read + write counted)"),
    ("read-only", "read_bytes_per_s", None, "no earlier figure; cuDNN decode reads ~4.5 TB/s on an H200"),
)
# (backend, pass, mask, S) -> (TFLOP/s, source); "bwd" is the backward alone, from the fwd and fwd+bwd cases
ATTENTION_ANCHORS = {
    ("sdpa-cudnn", "fwd", "none", 8192): (701, "cuDNN 9.27 fwd, H200, GQA 64/8 d128 b2 (cudnn-frontend)"),
    ("sdpa-cudnn", "bwd", "none", 8192): (562, "cuDNN 9.27 bwd, H200 (cudnn-frontend)"),
    ("sdpa-flash", "fwd", "none", 8192): (756, "FlashAttention-4 fwd, H200 (cudnn-frontend's table)"),
    ("sdpa-flash", "fwd", "none", 16384): (648, "FlashAttention-3 fwd, H100 (paper), 16k"),
    ("sdpa-flash", "fwd", "causal", 16384): (616, "FlashAttention-3 fwd causal, H100 (paper), 16k"),
    ("sdpa-cudnn", "fwd", "none", 16384): (595, "cuDNN fwd, H100 (FlashAttention-3 paper), 16k"),
    ("sdpa-cudnn", "fwd", "causal", 16384): (539, "cuDNN fwd causal, H100 (FlashAttention-3 paper), 16k"),
}
# every (backend, pass, mask, S) the GPU check reports, anchored or not
ANCHOR_SHAPES = [(b, p, m, s) for b in ("sdpa-cudnn", "sdpa-flash") for s in (8192, 16384) for m in ("none", "causal")
                 for p in ("fwd", "bwd")]
DECODE_ANCHOR = (93.7, "cuDNN decode: 93.7% of peak (4.5 TB/s), H200, batch 128, KV 32k")


def _fmt(x: float | None, scale: float = 1.0, digits: int = 1) -> str:
    return "—" if x is None or not math.isfinite(x) else f"{x / scale:.{digits}f}"


def _ratio(measured: float | None, anchor: float | None) -> str:
    return f"{measured / anchor:.2f}" if measured and anchor else "—"


def _anchor_case(ok: list[dict], backend: str, pass_: str, mask: str, seq: int) -> dict | None:
    """The bf16 d128 prefill case of the anchor's shape, GQA first (the anchors are GQA), then MHA."""
    found = [r for r in ok if r["backend"] == backend and r["pass"] == pass_ and r["mask"] == mask
             and r["seq_q"] == seq and r["head_dim"] == 128 and r["dtype"] == "bf16" and r["phase"] == "prefill"
             and (r.get("sparsity") or "none") == "none"]
    return min(found, key=lambda r: (r["variant"] != "gqa", r["n_kv_heads"])) if found else None


def _tflops(ok: list[dict], backend: str, pass_: str, mask: str, seq: int) -> tuple[float | None, dict | None]:
    if pass_ != "bwd":
        rec = _anchor_case(ok, backend, pass_, mask, seq)
        return (rec["tflops"], rec) if rec else (None, None)
    fwd, both = _anchor_case(ok, backend, "fwd", mask, seq), _anchor_case(ok, backend, "fwd+bwd", mask, seq)
    if not fwd or not both or any(fwd[k] != both[k] for k in SIZE_FIELDS):  # the same sizes, or no difference
        return None, None
    seconds = both["median_s"] - fwd["median_s"]
    return (2.5 * fwd["flops"] / seconds / 1e12 if seconds > 0 else None), both


def summary_lines(path: Path) -> list[str]:
    doc = read_run(path)
    records = [e.record.to_dict() for e in doc.entries()]  # the file's columns, which the anchors below name
    ok = [r for r in records if r["status"] == "ok"]
    cal = doc.meta.calibration.to_dict()  # the anchors below name the file's keys
    gpu = (doc.fingerprint or {}).get("gpu_name")
    sheet = spec_sheet(gpu)
    spec = (f"{sheet.name}, {sheet.flops_per_s / 1e12:g} TFLOP/s, {sheet.bytes_per_s / 1e12:g} TB/s ({sheet.source})"
            if sheet else f"none matches {gpu!r}")
    lines = [f"cases: {dict(Counter(r['status'] for r in records))} of {doc.meta.cases}; complete: "
             f"{doc.meta.complete}", f"spec sheet: {spec}", "ceiling | measured (T/s) | anchor | ratio | anchor source"]
    for what, key, anchor, source in CEILING_ANCHORS:
        value = cal.get(key)
        lines.append(f"{what} | {_fmt(value, 1e12, 3)} | {_fmt(anchor, 1e12)} | {_ratio(value, anchor)} | {source}")
    for key in sorted(k for k in cal if k.startswith("gemm_flops_per_s_") and k != "gemm_flops_per_s_bf16"):
        lines.append(f"GEMM {key.rsplit('_', 1)[1]} | {_fmt(cal[key], 1e12, 3)} TFLOP/s")
    lines.append("attention (bf16, d128, TFLOP/s) | case | measured | anchor | ratio | anchor source")
    for key in ANCHOR_SHAPES:
        backend, pass_, mask, seq = key
        anchor, source = ATTENTION_ANCHORS.get(key, (None, "no published figure at this shape"))
        value, rec = _tflops(ok, backend, pass_, mask, seq)
        where = rec["case_id"] if rec else "not run or not ok"
        lines.append(f"{backend} {pass_} {mask} S={seq} | {where} | {_fmt(value)} | {anchor or '—'} | "
                     f"{_ratio(value, anchor)} | {source}")
    lines += _decode_lines(ok, cal) + _sparse_lines(ok) + _mode_lines(ok) + _kernel_lines(ok) \
        + _unsupported_lines(records)
    return lines


def _sparse_lines(ok: list[dict]) -> list[str]:
    """Each sparse case beside the dense case of its shape on the same backend (or, for a sparse-only kernel, the
    fastest dense one): its time, the indexer's, the speedup and the ideal 1/density."""
    def shape(r: dict) -> tuple:
        return (r["phase"], r["dtype"], r["batch"], r["n_heads"], r["n_kv_heads"], r["head_dim"], r["seq_q"],
                r["seq_kv"], r["mask"], r["pass"])

    sparse = [r for r in ok if (r.get("sparsity") or "none") != "none"]
    if not sparse:
        return ["sparse: no sparse case ran"]
    dense: dict[tuple, dict[str, float]] = {}
    for r in ok:
        if (r.get("sparsity") or "none") == "none":
            dense.setdefault(shape(r), {})[r["backend"]] = r["median_s"]
    lines = ["sparse (time per call; speedup over the dense run, against the ideal 1/density):"]
    for r in sorted(sparse, key=lambda r: (shape(r), r["sparsity"], r["backend"])):
        twins = dense.get(shape(r), {})
        twin = r["backend"] if r["backend"] in twins else min(twins, key=twins.get) if twins else None
        speedup = f"{twins[twin] / r['median_s']:.2f}x over {twin}" if twin else "no dense twin"
        index = f", indexer {r['indexer_s'] * 1e3:.3g} ms" if r.get("indexer_s") else ""
        ideal = f", ideal {1 / r['density']:.3g}x" if r.get("density") else ""
        lines.append(f"  {r['phase']} S={r['seq_kv']} {r['sparsity']} {r['backend']}: {r['median_s'] * 1e3:.3g} ms"
                     f"{index}; {speedup}{ideal}")
    return lines


def _decode_lines(ok: list[dict], cal: dict) -> list[str]:
    read = cal.get("read_bytes_per_s")
    decode = [r for r in ok if r["phase"] == "decode" and r["dtype"] == "bf16" and r["variant"] == "gqa"
              and r.get("kv_bytes_per_s")]
    if not decode or not read:
        return ["decode: no bf16 GQA decode case ran (or no read-only ceiling)"]
    lines = [f"decode bf16 GQA, KV bytes/s as % of the read-only ceiling ({read / 1e12:.2f} TB/s); anchor "
             f"{DECODE_ANCHOR[0]}% ({DECODE_ANCHOR[1]}):"]
    for batch, kv in sorted({(r["batch"], r["seq_kv"]) for r in decode}):
        best = max((r for r in decode if r["batch"] == batch and r["seq_kv"] == kv), key=lambda r: r["kv_bytes_per_s"])
        pct = 100 * best["kv_bytes_per_s"] / read
        lines.append(f"  batch {batch} KV {kv}: best {best['backend']} {best['kv_bytes_per_s'] / 1e12:.2f} TB/s = "
                     f"{pct:.1f}% (ratio to anchor {pct / DECODE_ANCHOR[0]:.2f})")
    return lines


def _mode_lines(ok: list[dict]) -> list[str]:
    """Each mode against the headline (geometric mean of the ratio), launch-bound, throttled and energy."""
    lines = []
    head = {r["case_id"]: r["median_s"] for r in ok}
    modes = sorted({m for r in ok for m in (r.get("timings") or {})})
    for mode in modes:
        ratios = [t[mode]["median_s"] / head[r["case_id"]] for r in ok if (t := r.get("timings")) and mode in t
                  and t[mode]["median_s"] > 0]
        if ratios:
            lines.append(f"mode {mode}: {len(ratios)} cases, median time / headline: geomean "
                         f"{geometric_mean(ratios):.2f}, range {min(ratios):.2f}-{max(ratios):.2f}")
    bound = sorted((r for r in ok if r.get("launch_bound")), key=lambda r: -(r.get("overhead_pct") or 0))
    lines.append(f"launch bound (warm >= 2x kernel): {len(bound)} of {len(ok)}"
                 + "".join(f"; {r['case_id']} {r['overhead_pct']:.0f}%" for r in bound[:3]))
    throttled = [r["case_id"] for r in ok if r.get("throttled")]
    lines.append(f"throttled after a cool-down: {len(throttled)}" + (f" ({', '.join(throttled[:3])} ...)"
                                                                      if throttled else ""))
    energy = [r for r in ok if r.get("joules_per_call")]
    if energy:
        lines.append(f"energy: {len(energy)} cases; median {median(r['watts'] for r in energy):.0f} W; "
                     f"tokens/J median {median(r['tokens_per_joule'] for r in energy):.3g}")
    else:
        lines.append("energy: no NVML energy readings")
    return lines


def _kernel_lines(ok: list[dict]) -> list[str]:
    choices = Counter((r["phase"], r["variant"], r["dtype"], r["pass"], r.get("sdpa_kernel"))
                      for r in ok if r["backend"] == "sdpa")
    lines = ["sdpa's kernel (phase variant dtype pass: kernel x cases): " + "; ".join(
        f"{p} {v} {d} {ps}: {k} x{n}" for (p, v, d, ps, k), n in sorted(choices.items(), key=str))]
    top = Counter(k["name"] for r in ok for k in (r.get("kernels") or [])[:1])
    lines.append("top kernels (biggest in a case, how many cases): " + "; ".join(
        f"{name[:90]} x{n}" for name, n in top.most_common(6)))
    return lines


def _unsupported_lines(records: list[dict]) -> list[str]:
    reasons = Counter((r["backend"], (r.get("reason") or "")[:160]) for r in records if r["status"] == "unsupported")
    failed = Counter((r["backend"], r["status"], (r.get("reason") or "")[:160]) for r in records
                     if r["status"] in ("error", "incorrect", "oom"))
    lines = [f"unsupported: {b} x{n}: {why}" for (b, why), n in sorted(reasons.items())]
    lines += [f"{status}: {b} x{n}: {why}" for (b, status, why), n in sorted(failed.items())]
    return lines or ["every case ran"]
