"""Something costly made once per test run, even when pytest-xdist's workers all ask for it (`nox -s tests` runs
the suite on every core): the first worker makes it under a file lock, the others wait and read it back.

For what tests only read (a real sweep's results file): a test that changes it works on a copy."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from filelock import FileLock  # a dependency of torch's


def shared_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This test run's temporary folder, the same in every pytest-xdist worker."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the controller's temporary folder: this run's, shared by its workers
    return root


def once(tmp_path_factory: pytest.TempPathFactory, name: str, make: Callable[[Path], Any]) -> tuple[Path, Any]:
    """(the folder `make` filled, what it returned, as JSON gives it back): made by the first caller of this run."""
    root = shared_root(tmp_path_factory)
    folder, made = root / f"shared-{name}", root / f"shared-{name}.json"
    with FileLock(str(root / f"shared-{name}.lock")):
        if not made.exists():
            folder.mkdir(exist_ok=True)
            made.write_text(json.dumps(make(folder)))
    return folder, json.loads(made.read_text())
