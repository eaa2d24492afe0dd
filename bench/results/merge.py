"""The one merge of run documents, with its checks, for the three ways one run is made of several:

  shards   `bench run --shard K/N` files (or a Slurm job array): one sweep split apart; a case is in one shard only
  workers  the files of `bench run --devices` workers, folded into the run's own file as they come: a case already
           there is kept, the first worker's machine section fills a header that has none
  passes   several runs of one sweep on one machine pooled into a baseline: each case's rounds pooled, so the
           between-run noise a single run never shows is visible to `bench compare`

Every document must be of the same sweep on the same kind of machine; what differs is named with its file.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import statistics
from datetime import datetime, timezone

from bench.measure.environment import fingerprint_diff
from bench.results.document import ResultsError, RunDocument, as_run
from bench.results.entry import Entry, median_of, pooled_entry


def _check_alike(docs: list[RunDocument], labels: list[str], keys: tuple[str, ...], what: str) -> None:
    first = docs[0].meta
    for doc, label in zip(docs, labels, strict=True):
        for key in keys:
            if getattr(doc.meta, key) != getattr(first, key):
                raise ResultsError(f"{label}: its {key} differs from {labels[0]}'s; {what}")


def merge_shards(docs: list[RunDocument | dict], labels: list[str]) -> RunDocument:
    """One run from shards of one profile on one kind of machine; a case in two shards is an error."""
    docs = [as_run(d) for d in docs]
    _check_alike(docs, labels, ("profile", "fingerprint", "axes"), "not shards of one sweep")
    merged = copy.deepcopy(docs[0])
    merged.replace_entries([])
    seen: dict[str, str] = {}
    for doc, label in zip(docs, labels, strict=True):
        for entry in doc.entries():
            if entry.case_id in seen:
                raise ResultsError(f"{label}: case {entry.case_id} is also in {seen[entry.case_id]}")
            seen[entry.case_id] = label
            merged.add(entry)  # frozen: shared, not copied
    first = docs[0].meta
    merged.meta.complete = all(d.meta.complete for d in docs)
    merged.meta.run_id = f"{first.run_id}-merged{len(docs)}"
    merged.meta.shards = [d.meta.run_id for d in docs]
    merged.meta.sweep_id = None  # the merged case list is no single shard's: --resume works on the shards
    return merged


# What a worker's file says of the machine, copied into a run header that was written before any worker started.
MACHINE_KEYS = ("calibration", "calibration_end", "fingerprint", "models", "kv_measured")


def fold_workers(doc: RunDocument, workers: list[RunDocument], labels: list[str], case_ids: list[str]) -> RunDocument:
    """The workers' cases added to `doc` (in place) where it lacks them; complete once it holds every case_id."""
    if workers and not doc.meta.calibration:
        first = workers[0]
        doc.machine_info, doc.commit_info = first.machine_info, first.commit_info
        doc.datetime, doc.version = first.datetime, first.version
        for key in MACHINE_KEYS:
            setattr(doc.meta, key, getattr(first.meta, key))
    have = set(doc.case_ids())
    for worker, label in zip(workers, labels, strict=True):
        if worker.fingerprint != doc.fingerprint:
            raise ResultsError(f"{label}: its machine fingerprint differs from the run's ({worker.fingerprint} vs "
                               f"{doc.fingerprint}); the devices are not alike")
        for entry in worker.entries():
            if entry.case_id not in have:
                have.add(entry.case_id)
                doc.add(entry)
    doc.meta.complete = set(case_ids) <= have
    return doc


def _pool(entries: list[Entry], gemms: list[float | None]) -> Entry:
    """One entry from the same case in several passes: rounds pooled, pass boundaries kept."""
    ok_pairs = [(e, g) for e, g in zip(entries, gemms, strict=True) if e.status == "ok" and e.samples]
    statuses = [str(e.status) for e in entries]
    if len(ok_pairs) != len(entries):
        # flaky across passes: keep a non-ok pass so that the same failure later is not read as ok -> oom
        out = next(e for e in entries if e.status != "ok")
        if len(set(statuses)) > 1:
            why = f"status differs across baseline passes: {', '.join(statuses)}"
            out = dataclasses.replace(out, record=dataclasses.replace(out.record, reason=why))
        return out
    ok = [e for e, _ in ok_pairs]
    mems = [e.record.peak_mem_bytes for e in ok]
    peak = max(mems) if all(isinstance(m, (int, float)) for m in mems) else None  # memory noise must not fail later
    return pooled_entry(ok[0], [s for e in ok for s in e.samples], peak,
                        pass_rounds=tuple(len(e.samples) for e in ok),
                        pass_gemm=tuple(g for _, g in ok_pairs),  # each pass's own in-run controls (bench compare)
                        pass_control=tuple(e.record.control_flops for e in ok),
                        pass_read=tuple(e.record.control_read for e in ok),
                        control_flops=median_of([e.record.control_flops for e in ok]),
                        control_read=median_of([e.record.control_read for e in ok]))


def merge_passes(docs: list[RunDocument | dict], labels: list[str] | None = None) -> RunDocument:
    """One baseline document from one or more complete runs of the same machine and sweep."""
    docs = [as_run(d) for d in docs]
    labels = labels or [f"run #{i + 1}" for i in range(len(docs))]
    if docs[0].fingerprint is None:
        raise ResultsError(f"{labels[0]}: no machine fingerprint recorded; cannot file it under a machine")
    for doc, label in zip(docs, labels, strict=True):
        if doc.meta.complete is False:
            raise ResultsError(f"{label}: the run is incomplete; a baseline must cover its whole sweep")
        diffs = fingerprint_diff(docs[0].fingerprint, doc.fingerprint)
        if diffs:
            raise ResultsError(f"{label}: another machine than {labels[0]}: " + "; ".join(diffs).replace(
                "(baseline)", "(first)").replace("(current)", "(this)"))
    merged = copy.deepcopy(docs[0])
    by_case: dict[str, list[Entry]] = {}
    gemm_of: dict[str, list[float | None]] = {}
    for doc in docs:
        for entry in doc.entries():
            by_case.setdefault(entry.case_id, []).append(entry)
            gemm_of.setdefault(entry.case_id, []).append(doc.control_gemm())
    merged.replace_entries([_pool(entries, gemm_of[cid]) if len(docs) > 1 else entries[0]
                            for cid, entries in by_case.items()])
    gemms = [d.meta.calibration.gemm_flops_per_s for d in docs]
    if len(docs) > 1 and all(g is not None and math.isfinite(g) for g in gemms):
        median = statistics.median(gemms)
        merged.meta.calibration = dataclasses.replace(merged.meta.calibration, gemm_flops_per_s=median)
    merged.meta.baseline = {"passes": len(docs), "run_ids": [d.meta.run_id for d in docs],
                            "saved": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    return merged
