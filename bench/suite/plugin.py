"""pytest glue over the engine's session (bench.engine.session): options, parametrization, and handing each
measured case to pytest-benchmark. `python -m pytest --pyargs bench.suite --attn-profile quick --benchmark-json=F`.

Only glue lives here: the options and their checks are bench.engine.options; running a case, recording it and the
results file are the Session's. The plugin stays inert unless an --attn-* option is given, so it can be installed as
a pytest11 entry point without touching other test suites.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

# Light on purpose: every pytest run in an environment with attnbench installed loads this module. The options come
# from bench.commands.spec's record of bench.engine.options (no torch); the engine is imported only for a sweep.
from bench.commands.spec import add_run_options, run_option_names

if TYPE_CHECKING:
    from bench.engine.session import Session

SESSION_KEY = pytest.StashKey["Session"]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("attnbench", "attention benchmarks (python -m bench run's options)")
    add_run_options(group.addoption, flag_prefix="attn-", dest_prefix="attn_")
    group.addoption("--attn-run-id", dest="attn_run_id", default=None,
                    help="id of the run (default: time-profile-device)")


def pytest_configure(config: pytest.Config) -> None:
    values = {name: config.getoption(f"attn_{name}") for name in run_option_names()}
    if not any(v not in (None, False) for v in values.values()):
        return
    from bench.engine.options import RunRequest, plan
    from bench.engine.session import Session
    from bench.errors import InputError

    try:
        checked = plan(RunRequest.of(values), default_out=False)
    except InputError as err:
        raise pytest.UsageError(str(err)) from None
    config.stash[SESSION_KEY] = Session(
        checked, config.getoption("attn_run_id"), say=lambda line: _say(config, line),
        trace_dir=config.getoption("attn_trace"), machine_info=lambda: _machine_info(config),
        commit_info=lambda: config.hook.pytest_benchmark_generate_commit_info(config=config))


def _say(config: pytest.Config, line: str) -> None:
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    capture = config.pluginmanager.get_plugin("capturemanager")
    if reporter and capture:
        with capture.global_and_fixture_disabled():  # progress must reach the terminal mid-test
            reporter.write_line(line)


def _machine_info(config: pytest.Config) -> dict:
    machine_info = config.hook.pytest_benchmark_generate_machine_info(config=config)
    config.hook.pytest_benchmark_update_machine_info(config=config, machine_info=machine_info)
    return machine_info


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "case" in metafunc.fixturenames and "attn_session" in metafunc.fixturenames:
        session = metafunc.config.stash.get(SESSION_KEY, None)
        pending = session.pending if session else []
        # the id itself is the parameter: it is what pytest-benchmark stores in `params`, and it is JSON
        metafunc.parametrize("case", [c.id for c in pending], ids=[c.id for c in pending])


@pytest.fixture
def attn_session(request: pytest.FixtureRequest) -> Session:
    if SESSION_KEY not in request.config.stash:
        pytest.skip("no sweep: pass --attn-profile (and other --attn-* options) to run attention benchmarks")
    return request.config.stash[SESSION_KEY]


def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict) -> None:
    session = config.stash.get(SESSION_KEY, None)
    if session:
        from bench.measure.environment import environment

        machine_info["attnbench"] = environment(session.plan.device, session.plan.profile)


def pytest_benchmark_update_json(config: pytest.Config, benchmarks: list, output_json: dict) -> None:
    """pytest-benchmark's own files (--benchmark-json, --benchmark-autosave) become attnbench results files: the
    session's own entries (bench.results.entry), its metadata and its untimed cases."""
    session = config.stash.get(SESSION_KEY, None)
    if session and session.store is not None:
        doc = session.store.doc
        data = doc.to_dict()
        output_json["benchmarks"] = data["benchmarks"]
        output_json["attnbench"] = data["attnbench"]


def pytest_report_teststatus(report: pytest.TestReport, config: pytest.Config):
    # Our own progress line replaces pytest's one-letter progress for benchmark cases.
    if SESSION_KEY in config.stash and report.when == "call":
        return report.outcome, "", report.outcome.upper()
    return None


def pytest_collection_finish(session: pytest.Session) -> None:
    attn = session.config.stash.get(SESSION_KEY, None)
    if attn:
        attn.open({item.callspec.params["case"] for item in session.items
                   if hasattr(item, "callspec") and "case" in item.callspec.params})


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> bool | None:
    """A worker of `bench run --devices` runs the cases it pulls from the shared queue, not its whole list."""
    attn = session.config.stash.get(SESSION_KEY, None)
    if not attn or attn.queue is None or session.config.option.collectonly:
        return None
    items = {item.callspec.params["case"]: item for item in session.items
             if hasattr(item, "callspec") and "case" in item.callspec.params}
    for case in attn.cases():
        if case.id in items:
            session.config.hook.pytest_runtest_protocol(item=items[case.id], nextitem=None)
        if session.shouldfail or session.shouldstop:
            raise session.Interrupted(str(session.shouldfail or session.shouldstop))
    return True


@pytest.hookimpl(hookwrapper=True, tryfirst=True)  # before pytest-benchmark's wrapper writes its JSON
def pytest_sessionfinish(session: pytest.Session, exitstatus: int):
    attn = session.config.stash.get(SESSION_KEY, None)
    if attn:
        attn.close(interrupted=exitstatus == pytest.ExitCode.INTERRUPTED)
    yield


def measure(attn: Session, case_id: str, benchmark: Any) -> None:
    """The test's body: the session measures the case; pytest-benchmark gets the same rounds for its tables and
    --benchmark-compare, and the case's status becomes the test's outcome."""
    from pytest_benchmark.stats import Metadata

    from bench.results.entry import stats_of
    from bench.results.status import EXIT_1

    entry = attn.measure_or_skip(attn.by_id[case_id])
    record = entry.record
    benchmark.group = entry.group
    benchmark.extra_info.update(record.to_dict())
    if entry.timed:
        # pytest-benchmark has no public way to hand it measured rounds: this is the one private call (_add_stats,
        # the fixture's link to its session's list), with the rounds in its own Metadata and Stats
        meta = Metadata(benchmark, iterations=1, options=dict(entry.options))
        meta.stats = stats_of(entry.samples)
        benchmark._add_stats(meta)
        benchmark.stats = meta
    if record.status in EXIT_1:
        pytest.fail(f"{case_id}: {record.status}: {record.reason}", pytrace=False)
    if record.status != "ok":  # unsupported, oom, skipped: not a failure of the code
        pytest.skip(f"{record.status}: {record.reason}")
