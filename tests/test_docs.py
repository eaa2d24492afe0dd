"""The README states the rules the code relies on: its tables stay in step with the code's own lists."""

from __future__ import annotations

import re
from pathlib import Path

from bench.engine import options, sweeps
from bench.record import FIELDS

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def _section(title: str) -> str:
    start = README.index(title)
    end = README.find("\n#", start + len(title))
    return README[start:end if end != -1 else None]


def test_results_schema_table_lists_every_record_field():
    table = _section("### Results schema")
    documented = set(re.findall(r"`([a-z_0-9]+)`", table))
    assert set(FIELDS) <= documented, f"undocumented record fields: {sorted(set(FIELDS) - documented)}"


def test_every_run_option_has_its_attn_twin_in_the_pytest_section():
    text = _section("### From pytest")
    flags = [f.metadata["flag"] for f in sweeps.axis_fields()] + [o.flag for o in options.RUN_OPTIONS]
    missing = [flag for flag in flags if f"--attn-{flag}" not in text]
    assert not missing, f"README's pytest section misses --attn-{missing}"


def test_no_file_cites_a_document_users_do_not_have():
    root = Path(__file__).resolve().parents[1]
    for path in [root / "README.md", root / "noxfile.py", root / "pyproject.toml", *root.glob("bench/**/*.py"),
                 *root.glob("tests/*.py")]:
        if path.name == "test_docs.py":
            continue
        assert "DESIGN" + ".md" not in path.read_text(), path
