"""The results file on disk: written atomically, read and validated whole (or through its journal when a run is in
progress, interrupted or crashed: bench.results.journal)."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from bench.problem.shapes import ShapeError
from bench.results.document import ResultsError, RunDocument, json_safe, validate
from bench.results.journal import journal_path, read_journal


def write_atomic(path: str | Path, doc: RunDocument | dict) -> None:
    """Write to a temp file in the same folder, fsync, then rename: readers see the old or the new file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = doc.to_dict() if isinstance(doc, RunDocument) else doc
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(json_safe(data), f, indent=1, allow_nan=False)
            f.flush()
            os.fsync(f.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; a results file is as readable as any other
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_run(path: str | Path) -> RunDocument:
    """Load and validate one results file; raises ResultsError naming the file and the problem.

    A run in progress, interrupted or crashed has a journal beside its file (bench.results.store) holding every
    finished case: that is read instead, so no reader misses a case the file has not caught up with."""
    path = Path(path)
    if journal_path(path).exists():
        return read_journal(journal_path(path))[0]
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ResultsError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise ResultsError(f"{path}: is a folder, not a results file") from None
    except OSError as err:
        raise ResultsError(f"{path}: cannot read ({err.strerror})") from None
    except UnicodeDecodeError:
        raise ResultsError(f"{path}: not a text file; truncated or corrupt?") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as err:
        raise ResultsError(f"{path}: not valid JSON ({err.msg} at line {err.lineno}); truncated or corrupt?") from None
    validate(doc, str(path))
    try:
        return RunDocument.from_dict(doc, owned=True)
    except ShapeError as err:  # a case whose shape breaks a rule: the file cannot be read as this version's
        raise ResultsError(f"{path}: {err}") from None
