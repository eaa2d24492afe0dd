"""bench/REFERENCE.md, generated from the code, so the reference states each fact once: where the code does.

    python -m bench.commands.refdoc --write     # after changing an option, a status, a record field, a docstring, a
    module
    python -m bench.commands.refdoc --check     # exit 1 when the committed file differs from what the code gives now

Its sources: the command line's declarations (bench/commands/arguments.json), the exit codes (EXIT_CODES below,
which tests/test_docs.py holds against bench.cli), bench.results.status, the profiles (bench.profiles.PROFILES), the
backend registry, the record's fields and their meanings (bench.results.record.FIELDS), the docstrings of the modules
that
state a rule (RULES), and the first sentence of every module's docstring (the module map).
tests/test_docs.py fails, naming the command above, whenever the committed file is stale.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import re
import sys
from pathlib import Path
from typing import Any

PACKAGE = Path(__file__).resolve().parent.parent
REFERENCE = PACKAGE / "REFERENCE.md"
COMMAND = "python -m bench.commands.refdoc --write"

# How `python -m bench` ends (bench.cli.main). tests/test_docs.py checks these against what main returns.
EXIT_CODES: dict[int, str] = {
    0: "done: no failing case, no regression",
    1: "a finding: a case `error`, `incorrect`, `timeout` or `crashed`, a regression, a conformance group that "
       "fails; or a bug in attnbench, with its traceback (please report it)",
    2: "bad input, found before any work: an option, a shape, a results file that is missing, corrupt or from "
       "another tool; one line naming it (bench.errors.InputError)",
    130: "interrupted (Ctrl-C): one line with the cases kept and the command that resumes; never a traceback",
}

# (heading, modules whose whole docstring states the rule): the reference's rule sections, in order
RULES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Conventions: masks, score variants, MLA, FLOPs and bytes",
     ("bench.problem.masks", "bench.problem.scores", "bench.problem.shapes", "bench.kinds.mla_calls",
      "bench.counts.metrics", "bench.reference")),
    ("Sparse attention: keep-sets, the indexer, useful and executed FLOPs",
     ("bench.problem.sparsity", "bench.problem.keepset", "bench.counts.pairs", "bench.problem.indexer",
      "bench.kinds.sparse",
      "bench.backends.topk", "bench.analysis.sparse_cost")),
    ("Linear attention: the recurrences, their FLOPs and state",
     ("bench.problem.linear", "bench.linear.reference", "bench.linear.counts", "bench.kinds.linear",
      "bench.backends.linear")),
    ("How a case is measured",
     ("bench.engine.runner", "bench.kinds.guards", "bench.measure.timer", "bench.measure.modes",
      "bench.measure.rotation", "bench.measure.caches", "bench.measure.stats", "bench.measure.kernels",
      "bench.measure.nvml", "bench.measure.memory", "bench.measure.calibrate", "bench.measure.environment")),
    ("Claims: a condition's word and the claim's",
     ("bench.analysis.conditions", "bench.analysis.decided", "bench.analysis.claim_rows")),
    ("Backends: how each runs attention",
     ("bench.backends.base", "bench.backends.naive", "bench.backends.sdpa", "bench.backends.flex",
      "bench.backends.flash_attn")),
    ("Planning a run: cost model, time budget, questions",
     ("bench.plan.cost", "bench.engine.budget", "bench.engine.questions", "bench.engine.isolate")),
    ("Results files", ("bench.results.document", "bench.results.journal", "bench.results.merge")),
    ("Regression checks: compare, bench ab, the CI gate",
     ("bench.regress.compare", "bench.regress.noise", "bench.regress.blocks", "bench.regress.ab",
      "bench.regress.ab.verdict", "bench.regress.baseline", "bench.regress.history", "bench.regress.gate",
      "bench.regress.power")),
    ("Model configs and the KV cache",
     ("bench.models.config_json", "bench.models.config_hybrid", "bench.models.linear", "bench.models.kvsize",
      "bench.models.kvcache")),
    ("Speculative decoding: drafts, tree masks and the verification claim",
     ("bench.problem.draft", "bench.kinds.draft", "bench.claims.verify")),
    ("Serving batches", ("bench.serving", "bench.serving.workload", "bench.serving.paged", "bench.serving.ragged")),
    ("Several devices and Slurm", ("bench.launch", "bench.launch.devices", "bench.launch.slurm")),
    ("Your own kernel", ("bench.backends.outside", "bench.conformance")),
    ("Extending attnbench: backends, case kinds, claims, figures",
     ("bench.backends", "bench.kinds", "bench.claims", "bench.report.sections", "bench.report.catalogue")),
)


# ---------------------------------------------------------------------------------------------------- docstrings
def module_path(module: str) -> Path:
    rel = Path(*module.split(".")[1:])
    for path in (PACKAGE / rel / "__init__.py", PACKAGE / rel.with_suffix(".py")):
        if path.exists():
            return path
    raise FileNotFoundError(f"bench.commands.refdoc.RULES names {module}, which is no longer a module: "
                            f"edit RULES in {__file__}")


def docstring(path: Path) -> str:
    return ast.get_docstring(ast.parse(path.read_text())) or ""


def first_sentence(doc: str) -> str:
    """The docstring's first paragraph up to its first full stop (a module map line)."""
    para = " ".join(doc.strip().split("\n\n", 1)[0].split())
    match = re.search(r"(?<!e\.g)(?<!i\.e)(?<!\bvs)(?<!\.\.)\.(\s|$)", para)  # not "e.g. ", nor the dot of "bench.x"
    return para[:match.end()].strip() if match else para


def modules() -> list[tuple[str, Path]]:
    """Every module of the package, as (dotted name, path), packages before their modules."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found.append((".".join(parts), path))
    return sorted(found, key=lambda item: item[0].split("."))


# ------------------------------------------------------------------------------------------------- command line
def _option_text(call: dict[str, Any]) -> tuple[str, str]:
    kwargs = call["kwargs"]
    flags = call["argument"]
    if not flags[0].startswith("-"):
        name = kwargs.get("metavar") or flags[0].upper()
        name += " ..." if kwargs.get("nargs") in ("+", "*") else ""
        if kwargs.get("nargs") in ("?", "*"):
            name = f"[{name}]"
    else:
        value = "" if kwargs.get("action") in ("store_true", "store_false") else \
            " " + (kwargs.get("metavar") or "{" + ",".join(kwargs["choices"]) + "}" if "choices" in kwargs
                   else kwargs.get("metavar") or kwargs.get("dest", flags[-1].lstrip("-")).upper().replace("-", "_"))
        name = ", ".join(flags) + value
    help_ = (kwargs.get("help") or "").replace("%(default)s", str(kwargs.get("default"))).replace("%%", "%")
    return name, help_


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _options(calls: list[dict[str, Any]], lines: list[str], prefix: str) -> None:
    rows: list[tuple[str, str]] = []

    def flush() -> None:
        if rows:
            lines.extend(["| option | what it does |", "|---|---|"])
            lines.extend(f"| `{_cell(name)}` | {_cell(help_)} |" for name, help_ in rows)
            lines.append("")
            rows.clear()

    for call in calls:
        if "argument" in call:
            rows.append(_option_text(call))
        elif "group" in call:
            flush()
            lines.extend([f"*{call['group']['title']}*", ""])
            _options(call["calls"], lines, prefix)
        elif "subparsers" in call:
            flush()
            _options(call["calls"], lines, prefix)
        else:  # a sub-command (bench baseline save|show|path)
            flush()
            lines.extend([f"#### `{prefix} {call['parser']}`", "", call["kwargs"].get("help", ""), ""])
            _options(call["calls"], lines, f"{prefix} {call['parser']}")
    flush()


def command_line() -> list[str]:
    spec = json.loads((PACKAGE / "commands" / "arguments.json").read_text())
    lines = ["## Command line", "",
             "Every `python -m bench` command and its options, from `bench/commands/arguments.json` (which "
             "`python -m bench.commands.spec --write` records from each command's `add_arguments`). "
             "`python -m bench COMMAND --help` prints the same.", ""]
    for name, command in spec["commands"].items():
        lines.extend([f"### `bench {name}`", "", command["help"], ""])
        _options(command["calls"], lines, f"bench {name}")
    lines.extend(["### pytest: `--attn-` options", "",
                  "`python -m pytest --pyargs bench.suite --attn-profile quick ...` runs the same cases through "
                  "pytest and pytest-benchmark (bench.suite.plugin). These `bench run` options have a `--attn-` "
                  "twin (bench.engine.options; the launchers', `--list`, `--plan`, `--malloc`, `--report`, "
                  "`--tables` and `--in-process` do not):", ""])
    twins = [f"`--attn-{call['argument'][0][2:]}`" for call in spec["run_options"]]
    lines.extend([", ".join(twins), ""])
    return lines


# ------------------------------------------------------------------------------------------------ small tables
def exit_codes() -> list[str]:
    lines = ["## Exit codes", "", "Every `python -m bench` command (bench.cli):", "", "| exit code | meaning |",
             "|---|---|"]
    lines.extend(f"| {code} | {_cell(text)} |" for code, text in EXIT_CODES.items())
    return [*lines, ""]


def statuses() -> list[str]:
    from bench.results import status

    meaning: dict[str, str] = {}
    current = None
    for line in docstring(module_path("bench.results.status")).splitlines()[1:]:
        match = re.match(r"(\w+)\s{2,}(.*)", line)
        if match and match.group(1) in status.STATUSES:
            current = match.group(1)
            meaning[current] = match.group(2)
        elif current and line.startswith(" "):
            meaning[current] += " " + line.strip()
    lines = ["## Statuses", "",
             first_sentence(docstring(module_path("bench.results.status"))) + " (bench.results.status)", "",
             "| status | meaning | run exits 1 | ok → this fails `bench compare` |", "|---|---|---|---|"]
    for name in status.STATUSES:
        lines.append(f"| `{name}` | {_cell(meaning.get(name, status.LABELS[name]))} | "
                     f"{'yes' if name in status.EXIT_1 else 'no'} | {'yes' if name in status.FAILING else 'no'} |")
    return [*lines, "", "A timed case whose confidence-interval target was missed is `ok` with `noisy: true`.", ""]


def _values(value: Any) -> str:
    if isinstance(value, tuple):
        return ",".join("contiguous" if v is None else str(v) for v in value)
    return "none" if value is None else f"{value:g}" if isinstance(value, float) else str(value)


def _sweep(sweep: Any, default: Any) -> str:
    from bench.plan.sweep import axis_fields

    flags = {f.name: f.metadata["flag"] for f in axis_fields()}
    parts = []
    for f in dataclasses.fields(sweep):
        value = getattr(sweep, f.name)
        if f.name == "also" or value == getattr(default, f.name):
            continue
        if f.name in ("case_budget_s", "time_budget_s"):
            value = f"{value:g}s" if value is not None else value
        parts.append(f"--{flags[f.name]} {_values(value)}" if f.name in flags else f"{f.name}={_values(value)}")
    text = " ".join(parts) or "(the defaults)"
    return "`" + text + "`" + "".join(f"; then `{_sweep(more, default).strip('`')}`" for more in sweep.also)


def profiles() -> list[str]:
    from bench.plan.sweep import Sweep, axis_fields
    from bench.profiles import PROFILES

    default = Sweep()
    lines = ["## Profiles", "",
             "`bench run --profile NAME` (bench.profiles.PROFILES): each profile as the axes it sets; an axis "
             "it does not name takes its default, and an axis given on the command line replaces the profile's "
             "(and drops its extra sweeps, the `then` parts).", "",
             "Defaults: " + " ".join(f"`--{f.metadata['flag']} {_values(getattr(default, f.name))}`"
                                     for f in axis_fields() if f.name != "backends") +
             " and every backend the device runs.", "",
             "| profile | device | axes |", "|---|---|---|"]
    for device, by_name in PROFILES.items():
        for name, sweep in by_name.items():
            lines.append(f"| `{name}` | {device} | {_cell(_sweep(sweep, default))} |")
    return [*lines, ""]


def backends() -> list[str]:
    from bench.backends import BACKENDS

    lines = ["## Backends", "",
             "The built-in registry (bench.backends.BACKENDS); `python -m bench backends` says which runs which dtype "
             "on this machine, or why not, and lists the backends installed packages add.", "",
             "| name | what runs | devices | dtypes | memory | variants | serving layouts |",
             "|---|---|---|---|---|---|---|"]
    for b in BACKENDS.values():
        if b.origin != "built-in":
            continue
        lines.append(f"| `{b.name}` | {_cell(b.summary)} | {', '.join(b.devices)} | {', '.join(b.dtypes)} | "
                     f"{b.memory} | {', '.join(b.variants) or '–'} | {', '.join(b.layouts) or '–'} |")
    return [*lines, ""]


def record_fields() -> list[str]:
    from bench.results.record import FIELDS

    lines = ["## Record fields", "",
             "A case's record is its results entry's `extra_info`, one flat dict; these are its fields, in order, with "
             "their meanings (bench.results.record.FIELDS; the shape fields from bench.problem.shapes). A shape field "
             "beyond the classic ones enters the case id as `-<field>=<value>` only when it is not at its default, so "
             "existing ids never change. Baselines pooled from several runs add `pass_rounds` and each "
             "pass's controls (`pass_gemm`, `pass_control`, `pass_read`); `bench ab` adds `ab_slices`.",
             "", "| field | meaning |", "|---|---|"]
    lines.extend(f"| `{name}` | {_cell(doc)} |" for name, doc in FIELDS.items())
    return [*lines, ""]


def report_parts() -> list[str]:
    from bench.analysis.verdict import WORDS
    from bench.claims import CLAIMS, judge_of
    from bench.report.catalogue import CATALOGUE

    lines = ["## Report: figures and claims", "",
             "The figures a report can draw, in report order (bench.report.catalogue.CATALOGUE), each with the "
             "sentence printed under it:", "", "| file | title | how to read it |", "|---|---|---|"]
    lines.extend(f"| `{e.file}` | {_cell(e.title)} | {_cell(e.how_to_read)} |" for e in CATALOGUE)
    lines.extend(["", "The claims a report judges, one spec each (bench.claims.CLAIMS: the words, thresholds and "
                  "command the planner and the report share), each judged by a function of one run; a verdict is one "
                  "of " + ", ".join(f"**{w}**" for w in WORDS) + " (bench.analysis.verdict):", "",
                  "| claim | how it is judged | the command that measures it |", "|---|---|---|"])
    for spec in CLAIMS:
        judge = judge_of(spec)
        doc = " ".join((judge.__doc__ or "").split("\n\n", 1)[0].split())
        lines.append(f"| {_cell(spec.text)} | {_cell(doc) or '–'} (`{spec.judge}`) | `{spec.command}` |")
    return [*lines, ""]


def rules() -> list[str]:
    lines = []
    for heading, names in RULES:
        lines.extend([f"## {heading}", ""])
        for name in names:
            lines.extend([f"### {name}", "", "```text", docstring(module_path(name)), "```", ""])
    return lines


def module_map() -> list[str]:
    lines = ["## Module map", "",
             "Every module of the package, with the first sentence of its docstring (read the module for the rest).",
             "", "| module | what it is |", "|---|---|"]
    for name, path in modules():
        rel = path.relative_to(PACKAGE.parent).as_posix()
        lines.append(f"| [`{name}`]({Path(rel).relative_to('bench').as_posix()}) | "
                     f"{_cell(first_sentence(docstring(path))) or '–'} |")
    data = sorted(p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*")
                  if p.is_file() and p.suffix in (".json", ".md") and "__pycache__" not in p.parts)
    lines.extend(["", "Data files shipped with the package: " + ", ".join(f"`{d}`" for d in data) + ".", ""])
    return lines


def generate() -> str:
    parts = [
        ["# attnbench reference", "",
         f"Generated from the code by `{COMMAND}`: do not edit by hand (tests/test_docs.py fails when this file "
         "and the code disagree). The [README](../README.md) is the guide; this is what the code states, in one "
         "place.", "",
         "Contents: [command line](#command-line), [exit codes](#exit-codes), [statuses](#statuses), "
         "[profiles](#profiles), [backends](#backends), [record fields](#record-fields), "
         "[figures and claims](#report-figures-and-claims), the rules "
         "(" + ", ".join(f"[{h.split(':')[0].lower()}](#{_slug(h)})" for h, _ in RULES) + "), "
         "[module map](#module-map).", ""],
        command_line(), exit_codes(), statuses(), profiles(), backends(), record_fields(), report_parts(), rules(),
        module_map()]
    return "\n".join(line for part in parts for line in part).rstrip() + "\n"


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def main(argv: list[str]) -> int:
    from bench.commands.spec import write_or_check

    return write_or_check(REFERENCE, generate(), argv, "bench.commands.refdoc")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
