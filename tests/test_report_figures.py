"""The report's figure machinery: catalogue vs drawers, registry-driven style, text that fits its figure."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.analysis.load import read_results
from tests.results_factory import make_record, make_run

LONG_REASON = "package not importable (No module named 'flash_attn'); pip install 'attnbench[flash]' on a CUDA machine"
LONG_NAME = "my-very-long-experimental-backend-name"


def _frame(recs: list[dict], tmp_path: Path):
    path = tmp_path / "run.json"
    path.write_text(json.dumps(make_run(recs, run_id="r")))
    return read_results(path)[0]


def test_building_the_document_does_not_import_matplotlib():
    code = ("import sys, bench.report.document, bench.report.catalogue; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'matplotlib'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parent.parent).stdout
    assert out.strip() == "[]"


def test_every_catalogued_figure_has_a_drawer_and_back():
    import importlib
    import inspect
    import pkgutil

    import bench.report.figures as figures_pkg
    from bench.report.catalogue import CATALOGUE, FIGURES

    assert list(FIGURES) == [e.name for e in CATALOGUE]
    assert len({e.file for e in CATALOGUE}) == len(CATALOGUE)
    assert all(callable(e.drawer()) for e in CATALOGUE)
    # and back: every public function of a figure module that takes the frame and returns a Figure is catalogued
    # (history's figures belong to `bench history`, not to the report)
    drawn = {e.draw for e in CATALOGUE}
    for info in pkgutil.iter_modules(figures_pkg.__path__):
        module = importlib.import_module(f"bench.report.figures.{info.name}")
        for name, fn in inspect.getmembers(module, inspect.isfunction):
            sig = inspect.signature(fn)
            draws = (str(sig.return_annotation) in ("Figure", "Figure | None")
                     and [str(p.annotation) for p in sig.parameters.values()] == ["pd.DataFrame"])
            if fn.__module__ == module.__name__ and not name.startswith("_") and draws and info.name != "history":
                assert f"{info.name}:{name}" in drawn, f"{info.name}.{name} draws a figure no entry names"


def test_style_reads_the_registry_and_marks_every_failing_status(monkeypatch):
    from bench.backends import BACKENDS
    from bench.report.style import STATUS_MARKERS, backend_color, backend_marker, backend_sort_key
    from bench.results.status import NOT_OK

    assert set(STATUS_MARKERS) == set(NOT_OK)
    for name, backend in BACKENDS.items():
        assert (backend_color(name), backend_marker(name)) == (backend.color, backend.marker)
    assert sorted(["zzz", *reversed(BACKENDS), "aaa"], key=backend_sort_key) == [*BACKENDS, "aaa", "zzz"]
    # an unknown backend: a colour no registered backend has, the same in every process (not hash()); slots start
    # empty as in the fresh process below (names other tests of this process coloured would take theirs first)
    monkeypatch.setattr("bench.report.style._SLOTS", {})
    assert backend_color(LONG_NAME) not in {b.color for b in BACKENDS.values()}
    other = subprocess.run([sys.executable, "-c", f"from bench.report.style import backend_color as c; "
                            f"print(c({LONG_NAME!r}))"], capture_output=True, text=True, check=True,
                           cwd=Path(__file__).resolve().parent.parent).stdout.strip()
    assert other == backend_color(LONG_NAME)


def test_claims_group_backends_by_their_memory_trait():
    from bench.analysis.traits import BASELINE, FLASH_STYLE, MATERIALISING, PAGED_KERNELS
    from bench.backends import BACKENDS
    from bench.backends.base import PAGED_LAYOUTS

    assert "naive" in MATERIALISING and "sdpa-flash" in FLASH_STYLE
    assert sorted(MATERIALISING + FLASH_STYLE) == sorted(BACKENDS)
    assert BASELINE in MATERIALISING
    assert set(PAGED_KERNELS) == {n for n, b in BACKENDS.items() if b.layout(PAGED_LAYOUTS) in ("paged-mask",
                                                                                                "paged-table")}


def test_no_report_module_names_a_backend():
    """The report reads groups of backends from the registry's traits (bench.analysis.traits), never names.

    gpu_check is the exception: its anchors are published figures of named kernels."""
    from bench.backends import BACKENDS

    root = Path(__file__).resolve().parent.parent / "bench" / "report"
    for path in root.rglob("*.py"):
        if path.name == "gpu_check.py":
            continue
        source = path.read_text()
        for name in BACKENDS:
            assert f'"{name}"' not in source and f"'{name}'" not in source, (path.name, name)


@pytest.mark.parametrize("width", [120.0, 300.0])
def test_wrap_keeps_every_word_and_every_line_within_the_width(width):
    from bench.report.figures.layout import text_width, wrap

    text = f"Did not run at any size: flash-attn ({LONG_REASON}); {LONG_NAME * 2} (error)"
    lines = wrap(text, width, 9).split("\n")
    assert len(lines) > 1 and all(text_width(line, 9) <= width for line in lines)
    assert "".join(lines).replace(" ", "") == text.replace(" ", "")  # cut only at spaces, or inside a long word


def _narrow_runs() -> dict[str, list[dict]]:
    """Single-panel runs like `bench run --profile heads --seq 256`, the case that once lost legend entries."""
    heads = []
    for h in (1, 2, 4, 8, 16, 32):
        for i, backend in enumerate(("naive", "sdpa-math", "sdpa-flash")):
            heads.append(make_record(backend, h, h, 256, head_dim=512 // h, median_s=1e-3 * (1 + i + h / 8),
                                     noisy=h == 2, peak_mem_bytes=2**20 * (i + 1)))
    crowded = []  # every backend, every status, noisy timings, a long name, long never-ran reasons
    names = ["naive", "sdpa", "sdpa-math", "sdpa-flash", "sdpa-efficient", "flex", LONG_NAME]
    for seq in (256, 512, 1024):
        for i, backend in enumerate(names):
            status = {("naive", 1024): "oom", ("sdpa-math", 512): "incorrect", ("flex", 1024): "unsupported",
                      ("sdpa", 512): "error"}.get((backend, seq), "ok")
            crowded.append(make_record(backend, 8, 8, seq, status, median_s=1e-3 * seq / 256 * (1 + i / 5),
                                       noisy=seq == 512, model_mem_bytes=seq * 900))
            crowded.append(make_record(backend, 8, 1, seq, phase="decode", median_s=1e-4 * (1 + i), noisy=True))
        crowded.append(make_record("flash-attn", 8, 8, seq, "unsupported", reason=f"flash-attn: {LONG_REASON}"))
        crowded.append(make_record("sdpa-cudnn", 8, 8, seq, "error", reason="sdpa-cudnn: RuntimeError: cuDNN "
                                   "Frontend error: No execution plans support the graph."))
    return {"heads": heads, "crowded": crowded}


@pytest.mark.parametrize("run", ["heads", "crowded"])
def test_no_figure_cuts_its_text_or_squeezes_its_panels(run, tmp_path):
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from bench.report.figures import make_figures

    figures = make_figures(_frame(_narrow_runs()[run], tmp_path))
    assert {"throughput", "latency", "peak_memory"} <= set(figures)
    for name, fig in figures.items():
        FigureCanvasAgg(fig).draw()  # the constrained layout runs here, as when the PNG is written
        box = fig.bbox
        texts = [fig._suptitle, fig._supxlabel, *fig.legends, *(ax.get_legend() for ax in fig.axes)]
        for artist in (t for t in texts if t is not None):
            extent = artist.get_window_extent()
            where = f"{name}: {type(artist).__name__} {extent}"
            assert box.x0 - 1 <= extent.x0 and extent.x1 <= box.x1 + 1, where
            assert box.y0 - 1 <= extent.y0 and extent.y1 <= box.y1 + 1, where
        for legend in fig.legends:
            assert all(t.get_text() for t in legend.get_texts())
        panels = [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]
        assert all(ax.bbox.width > 150 and ax.bbox.height > 100 for ax in panels), name



def test_a_backend_outside_every_panels_slice_is_not_in_the_legend_and_is_named(tmp_path):
    from bench.report.figures.decode import decode

    recs = [make_record("sdpa", 8, 8, seq, phase="decode", median_s=1e-4 * seq / 256) for seq in (256, 512, 1024)]
    recs += [make_record("naive", 8, 8, seq, phase="decode", median_s=2e-4 * seq / 256) for seq in (256, 512, 1024)]
    recs.append(make_record("sdpa-math", 8, 8, 512, phase="decode", batch=4))  # another configuration only
    fig = decode(_frame(recs, tmp_path))
    legend = [t.get_text() for lg in fig.legends for t in lg.get_texts()]
    assert "sdpa" in legend and "naive" in legend and "sdpa-math" not in legend
    title = " ".join(lg.get_title().get_text() for lg in fig.legends).replace("\n", " ")
    assert "sdpa-math ran only at other configurations" in title


def test_a_dtype_and_variant_the_sweep_never_paired_gets_no_empty_axes(tmp_path):
    from bench.report.figures.decode import decode

    recs = [make_record("sdpa", 8, kv, seq, phase="decode", dtype=dtype, median_s=1e-4 * seq / 256)
            for kv, dtype in ((8, "fp32"), (8, "bf16"), (1, "fp32")) for seq in (256, 1024)]  # no MQA in bf16
    fig = decode(_frame(recs, tmp_path))
    hidden = [ax for ax in fig.axes if not ax.axison]
    assert len(hidden) == 1
    assert [t.get_text() for t in hidden[0].texts] == ["no MQA · bf16 case in this sweep"]
    assert all(ax.lines for ax in fig.axes if ax.axison)  # every panel shown has its lines
