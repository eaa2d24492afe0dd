"""Writes a report folder: index.html (self-contained), report.md (GitHub), tidy.csv (one row per case and run),
claims.csv (one row per claim and condition: bench.analysis.claim_rows) and the figures as PNGs.

Every string that came from a results file is escaped on the way out: html.escape for HTML, and the same
plus Markdown's own specials for report.md. index.html also carries a Content-Security-Policy that allows
no script and no network at all, so even an escaping mistake could not run code or fetch anything.
"""

from __future__ import annotations

import base64
import hashlib
import html
import io
import re
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from bench.analysis.claim_rows import claim_rows, columns
from bench.analysis.load import Loaded, RunInfo, load_results
from bench.report.blocks import Beside, Cell, Fold, Link
from bench.report.catalogue import FIGURES
from bench.report.document import Block, Heading, Image, Para, Table, build, judged
from bench.report.figures import make_figures
from bench.results import ResultsError

CSS = """
body { font: 15px/1.5 system-ui, -apple-system, "Segoe UI", sans-serif; color: #222; margin: 2em auto;
       max-width: 1280px; padding: 0 1.5em; }
h1 { font-size: 1.6em; border-bottom: 2px solid #ddd; padding-bottom: .3em; }
h2 { margin-top: 2em; border-bottom: 1px solid #eee; }
table { border-collapse: collapse; margin: 1em 0; font-size: .88em; }
th, td { border: 1px solid #ddd; padding: .3em .6em; text-align: left; vertical-align: top; }
th { background: #f6f6f6; }
tr:nth-child(even) td { background: #fbfbfb; }
figure { margin: 1.5em 0; }
figure img { max-width: 100%; height: auto; border: 1px solid #eee; }
figcaption { color: #555; margin-top: .4em; }
.warning { background: #fff4e5; border-left: 4px solid #f0a020; padding: .5em 1em; }
td.holds, td.fails, td.open, td.na { white-space: nowrap; }
tbody tr td.holds { background: #e6f4ea; font-weight: 600; }
tbody tr td.fails { background: #fde8e8; font-weight: 600; }
tbody tr td.open { background: #fff4e5; font-weight: 600; }
tbody tr td.na { color: #777; }
h3 { margin-top: 1.8em; }
p.answer { font-size: 1.05em; border-left: 4px solid #8ab4f8; padding-left: .6em; }
.beside { display: flex; flex-wrap: wrap; gap: 1.5em; align-items: flex-start; }
.beside > .main { flex: 1 1 600px; min-width: 0; overflow-x: auto; }
.beside > .aside { flex: 0 1 480px; }
.beside figure { margin: 0 0 1em 0; }
.below { display: flex; flex-wrap: wrap; gap: 1.5em; align-items: flex-start; }
.below figure { flex: 0 1 560px; }
.below figure.wide { flex: 1 1 100%; }
.below figure img { max-width: min(100%, 1100px); }
details { margin: 1em 0; }
summary { cursor: pointer; color: #1a56a8; }
a { color: #1a56a8; text-decoration: none; }
a:hover { text-decoration: underline; }
"""
CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"
VERDICT_CLASS = {"holds": "holds", "does not hold": "fails", "depends": "open", "inconclusive": "open",
                 "not measured": "na", "not judged": "na"}


def safe_name(text: str) -> str:
    """A run id as a file or folder name: no separators, no leading dots (ids come from files)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip(".-") or "run"


def report_id(runs: list[RunInfo]) -> str:
    """The newest run's id; for several runs a combined id (shortened, with a hash, when long)."""
    if len(runs) == 1:
        return safe_name(runs[0].run_id)
    combined = "compare-" + "-".join(safe_name(r.run_id) for r in runs)
    if len(combined) > 80:
        digest = hashlib.sha1(combined.encode()).hexdigest()[:8]
        combined = f"compare-{safe_name(runs[-1].run_id)[:40]}-and-{len(runs) - 1}-more-{digest}"
    return combined


def render_figures(loaded: Loaded) -> tuple[dict[str, dict[str, str]], dict[str, bytes]]:
    """Draw every figure of every run -> ({run_id: {figure: file}}, {file: PNG bytes})."""
    files: dict[str, dict[str, str]] = {}
    pngs: dict[str, bytes] = {}
    several = len(loaded.runs) > 1
    for i, run in enumerate(loaded.runs):
        df = loaded.frame[loaded.frame["run_id"] == run.run_id]
        files[run.run_id] = {}
        for name, fig in make_figures(df, run.meta).items():
            file = f"run{i + 1}-{FIGURES[name].file}" if several else FIGURES[name].file
            buf = io.BytesIO()
            fig.savefig(buf, format="png")
            pngs[file] = buf.getvalue()
            files[run.run_id][name] = file
    return files, pngs


# ---- HTML ----------------------------------------------------------------------------------------------------

def _e(value: str) -> str:
    return html.escape(str(value), quote=True)


WIDE = 1.6  # a figure this many times wider than tall is drawn below its claim's text, not beside it


def _aspect(png: bytes) -> float:
    """A PNG's width over its height, from its IHDR chunk."""
    width, height = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
    return width / height if height else 1.0


def _html_cell(cell: Cell) -> str:
    if isinstance(cell, Link):
        return f'<a href="#{safe_name(cell.anchor)}">{_e(cell.text)}</a>'
    return _e(cell)


def _html_block(block: Block, pngs: dict[str, bytes]) -> str:
    if isinstance(block, Heading):
        anchor = f' id="{safe_name(block.anchor)}"' if block.anchor else ""
        return f"<h{block.level}{anchor}>{_e(block.text)}</h{block.level}>"
    if isinstance(block, Para):
        cls = {"warning": ' class="warning"', "answer": ' class="answer"'}.get(block.kind, "")
        return f"<p{cls}>{_e(block.text)}</p>"
    if isinstance(block, Table):
        head = "".join(f"<th>{_e(h)}</th>" for h in block.headers)
        body = []
        for row in block.rows:
            cells = []
            for i, cell in enumerate(row):
                cls = VERDICT_CLASS.get(cell, "") if i in block.verdict_columns and isinstance(cell, str) else ""
                cells.append(f'<td class="{cls}">{_html_cell(cell)}</td>' if cls else f"<td>{_html_cell(cell)}</td>")
            body.append("<tr>" + "".join(cells) + "</tr>")
        return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
    if isinstance(block, Image):
        data = base64.b64encode(pngs[block.file]).decode("ascii")
        title = f"<h3>{_e(block.title)}</h3>" if block.heading else ""
        caption = _e(block.caption) if block.heading else f"<strong>{_e(block.title)}.</strong> {_e(block.caption)}"
        return (f'<figure>{title}<img src="data:image/png;base64,{data}" alt="{_e(block.title)}">'
                f"<figcaption>{caption}</figcaption></figure>")
    if isinstance(block, Fold):
        inner = "\n".join(_html_block(b, pngs) for b in block.blocks)
        return f"<details><summary>{_e(block.summary)}</summary>\n{inner}\n</details>"
    if isinstance(block, Beside):
        main = "\n".join(_html_block(b, pngs) for b in block.main)
        # a figure much wider than tall (several panels) would shrink past reading beside the text: it goes below
        # and so do two figures or more, which would stretch the column past the text's
        narrow = [b for b in block.aside if not (isinstance(b, Image) and _aspect(pngs[b.file]) > WIDE)]
        narrow = narrow if len(block.aside) == 1 else []
        below = "\n".join(_html_block(b, pngs).replace("<figure>", '<figure class="wide">', 1)
                           if isinstance(b, Image) and _aspect(pngs[b.file]) > WIDE else _html_block(b, pngs)
                           for b in block.aside if b not in narrow)
        if narrow:
            aside = "\n".join(_html_block(b, pngs) for b in narrow)
            main = f'<div class="beside"><div class="main">\n{main}\n</div><div class="aside">\n{aside}\n</div></div>'
        return main + (f'\n<div class="below">\n{below}\n</div>' if below else "")
    raise TypeError(f"unknown block {block!r}")


def to_html(blocks: Iterable[Block], pngs: dict[str, bytes]) -> str:
    blocks = list(blocks)
    title = next((b.text for b in blocks if isinstance(b, Heading) and b.level == 1), "attnbench report")
    body = "\n".join(_html_block(b, pngs) for b in blocks)
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">\n'
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}">\n'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>{_e(title)}</title>\n<style>{CSS}</style></head>\n<body>\n{body}\n</body></html>\n")


# ---- Markdown ------------------------------------------------------------------------------------------------

_MD_SPECIAL = re.compile(r"([\\`*_\[\]|#~!])")


def _md(value: str) -> str:
    """Escaped for GitHub Markdown: HTML entities first (no raw tags), then Markdown's own specials."""
    flat = " ".join(str(value).split())  # a newline would end a table row
    return _MD_SPECIAL.sub(r"\\\1", html.escape(flat, quote=False))


def _md_cell(cell: Cell) -> str:
    if isinstance(cell, Link):
        return f"[{_md(cell.text)}](#{safe_name(cell.anchor)})"
    return _md(cell)


def _md_block(block: Block) -> str:
    if isinstance(block, Heading):
        # an explicit anchor: GitHub's own, from the heading's text, drops characters it cannot spell
        anchor = f'<a id="{safe_name(block.anchor)}"></a>\n\n' if block.anchor else ""
        return f"{anchor}{'#' * block.level} {_md(block.text)}"
    if isinstance(block, Para):
        if block.kind == "answer":
            return f"**{_md(block.text)}**"
        return f"> **Warning:** {_md(block.text)}" if block.kind == "warning" else _md(block.text)
    if isinstance(block, Table):
        lines = ["| " + " | ".join(_md(h) or " " for h in block.headers) + " |",
                 "|" + "---|" * len(block.headers)]
        for row in block.rows:
            cells = [f"**{_md_cell(c)}**" if i in block.verdict_columns and c else _md_cell(c)
                     for i, c in enumerate(row)]
            lines.append("| " + " | ".join(cells) + " |")
        return "\n".join(lines)
    if isinstance(block, Image):
        title = f"### {_md(block.title)}" if block.heading else f"**{_md(block.title)}**"
        return f"{title}\n\n![{_md(block.title)}]({block.file})\n\n{_md(block.caption)}"
    if isinstance(block, Fold):  # Markdown folds nothing: the blocks stand under their section's heading
        return "\n\n".join(_md_block(b) for b in block.blocks)
    if isinstance(block, Beside):
        return "\n\n".join(_md_block(b) for b in (*block.main, *block.aside))
    raise TypeError(f"unknown block {block!r}")


def to_markdown(blocks: Iterable[Block]) -> str:
    return "\n\n".join(_md_block(b) for b in blocks) + "\n"


# ---- files ---------------------------------------------------------------------------------------------------

def write_report(loaded: Loaded, out_dir: str | Path | None = None) -> Path:
    """Write the report folder for already-loaded runs; returns the path of index.html."""
    if not loaded.runs:
        raise ResultsError("no results to report: " + ("; ".join(loaded.errors) or "no inputs"))
    out = Path(out_dir) if out_dir is not None else Path("reports") / report_id(loaded.runs)
    out.mkdir(parents=True, exist_ok=True)
    files, pngs = render_figures(loaded)
    for file, data in pngs.items():
        (out / file).write_bytes(data)
    claims = judged(loaded)  # once: the document and claims.csv say the same
    blocks = build(loaded, files, claims)
    loaded.frame.to_csv(out / "tidy.csv", index=False)
    rows = [row for run in loaded.runs for row in claim_rows(claims[run.run_id], run.run_id)]
    pd.DataFrame(rows, columns=columns(rows)).to_csv(out / "claims.csv", index=False)
    (out / "report.md").write_text(to_markdown(blocks), encoding="utf-8")
    index = out / "index.html"
    index.write_text(to_html(blocks, pngs), encoding="utf-8")
    return index


def build_report(paths: Iterable[str | Path], out_dir: str | Path | None = None) -> Path:
    """Results files/folders -> report folder (default reports/<run-id>/); returns index.html's path.

    Unreadable inputs are left out and named in the report; ResultsError when none could be read."""
    return write_report(load_results(paths), out_dir)
