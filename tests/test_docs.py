"""The README is the guide and bench/REFERENCE.md the reference, generated from the code (bench.commands.refdoc): the
reference
must be what the code generates now, and every fact the README repeats from the code is checked against it."""

from __future__ import annotations

import re
from pathlib import Path

from bench import profiles
from bench.commands import refdoc
from bench.engine import options, sweeps
from bench.results.record import FIELDS

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
REFERENCE = refdoc.REFERENCE.read_text()


def _section(title: str, text: str = REFERENCE) -> str:
    """From the heading `title` to the next heading of the same or a higher level."""
    start = text.index(title)
    level = len(title) - len(title.lstrip("#"))
    end = re.search(rf"\n#{{1,{level}}} ", text[start + len(title):])
    return text[start:start + len(title) + end.start() if end else None]


# ------------------------------------------------------------------------------------------ the generated reference

def test_the_reference_is_what_the_code_generates():
    assert refdoc.generate() == REFERENCE, f"bench/REFERENCE.md is stale: run {refdoc.COMMAND}"


def test_the_readme_stays_a_guide():
    lines = README.count("\n")
    assert lines <= 400, f"README.md has {lines} lines: move reference material into the code (bench/REFERENCE.md)"
    assert "bench/REFERENCE.md" in README


def test_results_schema_table_lists_every_record_field():
    table = _section("## Record fields")
    documented = set(re.findall(r"`([a-z_0-9]+)`", table))
    assert set(FIELDS) <= documented, f"undocumented record fields: {sorted(set(FIELDS) - documented)}"


def test_every_run_option_has_its_attn_twin_in_the_pytest_section():
    text = _section("### pytest: `--attn-` options")
    flags = [f.metadata["flag"] for f in sweeps.axis_fields()] + [o.flag for o in options.RUN_OPTIONS]
    missing = [flag for flag in flags if f"--attn-{flag}" not in text]
    assert not missing, f"the reference's pytest section misses --attn-{missing}"


def test_every_command_and_option_is_in_the_reference():
    from bench.commands.spec import build_parser

    parser = build_parser()
    (sub,) = [a for a in parser._actions if a.choices and isinstance(a.choices, dict)]
    for name, command in sub.choices.items():
        text = _section(f"### `bench {name}`")
        for action in command._actions:
            for flag in action.option_strings:
                assert flag in ("-h", "--help") or f"`{flag}" in text or f", {flag}" in text, f"bench {name} {flag}"


def test_no_file_cites_a_document_users_do_not_have():
    root = Path(__file__).resolve().parents[1]
    for path in [root / "README.md", root / "noxfile.py", root / "pyproject.toml", *root.glob("bench/**/*.py"),
                 *root.glob("bench/**/*.md"), *root.glob("tests/*.py")]:
        if path.name == "test_docs.py":
            continue
        assert "DESIGN" + ".md" not in path.read_text(), path


# ------------------------------------------------------------------------------ tables and facts that mirror code

def _first_column(section: str) -> list[str]:
    """The first cell of every body row of the markdown table(s) in `section`, backticks stripped."""
    rows = [line for line in section.splitlines() if line.startswith("|")]
    cells = [row.split("|")[1].strip() for row in rows]
    return [c.strip("`") for c in cells if c and not set(c) <= set("-: ")][1:]  # [1:]: the header


def test_statuses_table_is_bench_status_statuses():
    from bench.results.status import STATUSES

    assert _first_column(_section("## Statuses")) == list(STATUSES)


def test_the_statuses_the_readme_names_are_bench_status_statuses():
    from bench.results.status import STATUSES

    sentence = re.search(r"ends in exactly one status: (.*?)\(", README, re.S).group(1)
    assert re.findall(r"`(\w+)`", sentence) == list(STATUSES)


def test_profiles_table_lists_every_profile_and_nothing_else():
    documented = _first_column(_section("## Profiles"))
    for device, by_name in profiles.PROFILES.items():
        rows = [row.split("|")[1].strip(" `") for row in _section("## Profiles").splitlines()
                if row.startswith("| `") and f"| {device} |" in row]
        assert rows == list(by_name), device
    assert set(documented) == {name for by_device in profiles.PROFILES.values() for name in by_device}


def test_the_profiles_the_readme_names_exist():
    known = {name for by_device in profiles.PROFILES.values() for name in by_device}
    named = re.search(r"--profile quick +# or: (.*)", README).group(1).split(", ")
    assert {"quick", *named} == known, "the README names every profile, and only those"


def test_the_readme_s_time_budget_is_the_default_profile_s():
    minutes = int(re.search(r"default profile plans to (\d+) minutes", README).group(1))
    assert minutes * 60 == profiles.DEFAULT_TIME_BUDGET_S == profiles.PROFILES["cpu"]["default"].time_budget_s
    assert f"planned to {minutes} minutes" in README[:README.index("\n## ")]


def test_the_verdict_words_the_readme_uses_are_the_code_s():
    from bench.analysis.verdict import WORDS
    from bench.regress.verdicts import VERDICTS

    report = _section("## Read the report", README)
    assert [w for w in re.findall(r"\*\*([a-z ]+)\*\*", report)] == list(WORDS)
    compare = _section("## Check for regressions", README)
    assert set(re.findall(r"\*\*([a-z ]+)\*\*", compare)) == set(VERDICTS)


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

    documented = {int(c) for c in _first_column(_section("## Exit codes"))}
    assert documented == _exit_codes_of_main() == set(refdoc.EXIT_CODES)
    assert {int(c) for c in _first_column(_section("## Reference", README))} == documented
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


def _anchors(path: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    return {_slug(h) for h in re.findall(r"^#+ (.+)$", text, re.M)}


def test_every_relative_link_points_to_a_file_or_heading():
    for doc in (ROOT / "README.md", refdoc.REFERENCE):
        text = re.sub(r"```.*?```", "", doc.read_text(), flags=re.S)  # links in code blocks are not links
        targets = re.findall(r"\]\(([^)\s]+)\)", text)
        assert targets
        for target in targets:
            if re.match(r"[a-z]+:", target):
                continue  # https:, mailto:
            path, _, anchor = target.partition("#")
            file = (doc.parent / path).resolve() if path else doc
            assert file.exists(), f"{doc.name} links to a missing file: {target}"
            if anchor:
                assert anchor in _anchors(file), f"{doc.name} links to a missing heading: {target}"


def test_module_map_names_every_module_and_package():
    section = _section("## Module map")
    bench_dir = ROOT / "bench"
    modules = [".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
               for p in bench_dir.rglob("*.py") if "__pycache__" not in p.parts]
    missing = sorted(m for m in modules if f"[`{m}`]" not in section)
    assert not missing, f"the module map misses {missing}: run {refdoc.COMMAND}"


def test_every_bench_command_in_the_readme_exists():
    from bench.cli import COMMANDS

    used = set(re.findall(r"python -m bench ([a-z][a-z-]*)", README + REFERENCE))
    assert used - set(COMMANDS) == set(), f"unknown commands: {sorted(used - set(COMMANDS))}"


def test_the_python_example_runs(monkeypatch):
    code = README.split("## From Python", 1)[1].split("```python", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(Path(__file__).resolve().parents[1])  # the example reads results/example/
    scope: dict = {}
    exec(code, scope)
    assert tuple(scope["out"].shape) == (1, 8, 1024, 64) and scope["run"].entries()[0].record.case_id


def test_the_package_ships_the_reference():
    text = (ROOT / "pyproject.toml").read_text()
    assert '"bench" = ["REFERENCE.md"]' in text.split("[tool.setuptools.package-data]", 1)[1].split("\n[", 1)[0]
