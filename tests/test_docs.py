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


# ------------------------------------------------------------------------------------------ tables that mirror code

def _first_column(section: str) -> list[str]:
    """The first cell of every body row of the markdown table(s) in `section`, backticks stripped."""
    rows = [line for line in section.splitlines() if line.startswith("|")]
    cells = [row.split("|")[1].strip() for row in rows]
    return [c.strip("`") for c in cells if c and not set(c) <= set("-: ")][1:]  # [1:]: the header


def test_statuses_table_is_bench_status_statuses():
    from bench.status import STATUSES

    assert _first_column(_section("### Statuses")) == list(STATUSES)


def test_profiles_table_lists_every_profile_and_nothing_else():
    documented = _first_column(_section("### Profiles"))
    known = {name for by_device in sweeps.PROFILES.values() for name in by_device}
    assert len(documented) == len(set(documented)), documented
    assert set(documented) == known, f"README only: {set(documented) - known}; code only: {known - set(documented)}"


def _exit_codes_of_main() -> set[int]:
    """What bench.cli.main returns for each way a command can end (a bug is not caught: Python's own exit 1)."""
    import argparse

    from bench import cli
    from bench.errors import InputError, UsageError

    def raises(err):
        def run(args):
            raise err
        return run

    ends = [lambda args: None, lambda args: 0, lambda args: 1, raises(InputError("bad")), raises(UsageError("bad")),
            raises(FileNotFoundError("missing")), raises(KeyboardInterrupt())]
    codes = {1}  # an uncaught exception (a bug in attnbench) exits 1 with its traceback
    real = cli.build_parser
    try:
        for end in ends:
            parser = argparse.ArgumentParser()
            parser.set_defaults(_run=end)
            cli.build_parser = lambda parser=parser: parser
            codes.add(cli.main([]))
    finally:
        cli.build_parser = real
    return codes


def test_exit_code_table_matches_the_cli():
    import ast

    import bench.cli

    documented = {int(c) for c in _first_column(_section("### Exit codes"))}
    assert documented == _exit_codes_of_main()
    tree = ast.parse(Path(bench.cli.__file__).read_text())
    literal = {node.value.value for node in ast.walk(tree)
               if isinstance(node, ast.Return) and isinstance(node.value, ast.Constant)
               and isinstance(node.value.value, int)}
    assert literal <= documented, f"bench/cli.py returns undocumented exit codes {sorted(literal - documented)}"


# ------------------------------------------------------------------------------------------ the first screen, links

def test_first_screen_has_the_two_commands_a_figure_and_next_steps():
    first = README[:README.index("\n## ")]
    assert "nox -s tests" in first and "nox -s bench" in first
    figure = re.search(r"!\[[^\]]*\]\((reports/example/[^)]+\.png)\)", first)
    assert figure, "the first screen embeds a figure of the example report"
    assert len(re.findall(r"^python -m bench ", first, re.M)) >= 3, "three next commands"


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_relative_link_points_to_a_file_or_heading():
    root = Path(__file__).resolve().parents[1]
    text = re.sub(r"```.*?```", "", README, flags=re.S)  # links in code blocks are not links
    anchors = {_slug(h) for h in re.findall(r"^#+ (.+)$", text, re.M)}
    targets = re.findall(r"\]\(([^)\s]+)\)", text)
    assert targets
    for target in targets:
        if re.match(r"[a-z]+:", target):
            continue  # https:, mailto:
        path, _, anchor = target.partition("#")
        if path:
            assert (root / path).exists(), f"README links to a missing file: {target}"
        else:
            assert anchor in anchors, f"README links to a missing heading: {target}"


def test_module_map_names_every_module_and_package():
    section = _section("### Module map")
    bench_dir = Path(__file__).resolve().parents[1] / "bench"
    names = [p.name for p in bench_dir.iterdir()
             if p.name not in ("__pycache__",) and (p.suffix == ".py" or (p / "__init__.py").exists())]
    for sub in [p for p in bench_dir.iterdir() if (p / "__init__.py").exists()]:
        names += [p.name for p in sub.iterdir() if p.suffix == ".py" and p.name != "__init__.py"]
    missing = sorted(n for n in set(names) if n not in section and n.removesuffix(".py") not in section)
    assert not missing, f"the module map misses {missing}"


def test_every_bench_command_in_the_readme_exists():
    from bench.cli import COMMANDS

    used = set(re.findall(r"python -m bench ([a-z][a-z-]*)", README))
    assert used - set(COMMANDS) == set(), f"README uses unknown commands: {sorted(used - set(COMMANDS))}"


def test_the_python_example_runs(monkeypatch):
    code = README.split("## From Python", 1)[1].split("```python", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(Path(__file__).resolve().parents[1])  # the example reads results/example/
    scope: dict = {}
    exec(code, scope)
    assert tuple(scope["out"].shape) == (1, 8, 1024, 64) and scope["run"].records()
