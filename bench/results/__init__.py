"""Results: the run document (document), the file on disk (file), the journal of a run in progress (journal), the
store a run records into (store), the one merge of documents (merge) and the one builder of a case's entry (entry).

Nothing here imports the engine, the launchers or the commands: results are read and written without torch.
"""

from bench.results.document import (
    SCHEMA,
    ResultsError,
    RunDocument,
    RunMeta,
    as_run,
    entries,
    json_safe,
    validate,
    validate_entry,
)
from bench.results.entry import Entry
from bench.results.file import read_run, write_atomic
from bench.results.journal import journal_path, read_journal
from bench.results.store import ResultsStore

__all__ = ["SCHEMA", "Entry", "ResultsError", "ResultsStore", "RunDocument", "RunMeta", "as_run", "entries",
           "journal_path", "json_safe", "read_journal", "read_run", "validate", "validate_entry", "write_atomic"]
