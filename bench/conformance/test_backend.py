"""The conformance groups (bench.conformance) as pytest tests, for a kernel author's own test run:

    python -m pytest --pyargs bench.conformance --attn-backend mypkg.attn:fn [--attn-device cuda] [--attn-dtype fp32]

The backend comes from the attnbench plugin's --attn-backend (one or more, comma-separated); without it every test
is skipped, so collecting the installed package is harmless.
"""

from __future__ import annotations

import pytest

from bench.conformance import groups, run_group


def _option(config: pytest.Config, name: str) -> str | None:
    try:
        return config.getoption(name)
    except ValueError:  # the attnbench plugin is not loaded
        return None


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "conformance_case" not in metafunc.fixturenames:
        return
    names = [n for n in (_option(metafunc.config, "attn_backends") or "").split(",") if n]
    dtypes = tuple(d for d in (_option(metafunc.config, "attn_dtypes") or "").split(",") if d) or None
    params = [(name, g) for name in names for g in groups(name, dtypes)]
    metafunc.parametrize("conformance_case", params or [None],
                         ids=[f"{n}:{g.pass_}-{g.dtype}-{g.variant}-{g.mask}" for n, g in params] or ["none"])


def test_conformance(conformance_case, request: pytest.FixtureRequest) -> None:
    if conformance_case is None:
        pytest.skip("no backend: pass --attn-backend MODULE:FUNCTION")
    backend, group = conformance_case
    device = _option(request.config, "attn_device") or "cpu"
    row = run_group(backend, group, device)
    if row.status == "unsupported":
        pytest.skip(f"unsupported: {row.detail}")
    assert not row.failed, f"{backend} {group.label}: {row.status}: {row.detail}"
