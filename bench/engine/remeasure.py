"""Each timing of a run that looks stalled (bench.analysis.suspects: flat against its work, or a jump against its
neighbour), then each timed in a slow spell of the host (its probe well under the run's usual speed), is measured once
more in a fresh worker, at the start of the run's deciding (bench.engine.decide; RunMeta.suspects); the report takes
the second measurement where it shows the first was stalled, or ran in the spell, and names the case.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bench.engine.isolate import Isolated
from bench.problem.case import Case

# cases timed in a slow spell re-measured at most, and the share of the deciding time they may take: a spell covers
# about a tenth of a default run's cases on a shared host, and the open conditions need most of the time (a default
# run flagged 32 or more every time and spent a fifth of its deciding time, 20 s, on them: as much as three conditions'
# blocks, where a case behind a condition that gets its blocks is judged on those anyway)
MAX_SPELLS = 32
SPELL_SHARE_OF_DECIDING = 0.1
MAX_SUSPECTS = 8  # stalled-looking timings re-measured at most: more means the machine, not a case, is the problem


def remeasure_suspects(frame: Any, by_id: dict[str, Case], executor: Isolated,
                       seconds_left: Callable[[], float], say: Callable[[str], None],
                       behind: frozenset[str] = frozenset(),
                       first: frozenset[str] = frozenset()) -> list[dict[str, Any]]:
    """Each timing that looks stalled, then each timed in a slow spell of the host (bench.analysis.suspects),
    measured once more, in a fresh worker; the spells take at most SPELL_SHARE_OF_DECIDING of the time left: first
    those whose condition's word the spell may have turned (`first`: bench.analysis.suspects.turning), then the others
    behind a claim's condition (`behind`: their case ids), then the rest, the quickest first among each, so that the
    time re-measures as many as it can of those that move an answer."""
    from bench.analysis.suspects import spells, suspects, usual_probe

    stalled = [s for s in suspects(frame) if s["case_id"] in by_id][:MAX_SUSPECTS]
    seen = {s["case_id"] for s in stalled}
    timed = dict(zip(frame["case_id"], frame["median_s"], strict=True))
    spelled = sorted((s for s in spells(frame) if s["case_id"] in by_id and s["case_id"] not in seen),
                     key=lambda s: (s["case_id"] not in first, s["case_id"] not in behind,
                                    timed[s["case_id"]]))[:MAX_SPELLS]
    if stalled or spelled:
        say(f"re-measuring {len(stalled)} timing(s) that look stalled and {len(spelled)} timed in a slow spell of the "
            "host, in a fresh worker:")
    usual = usual_probe(frame)
    spell_until = seconds_left() * (1 - SPELL_SHARE_OF_DECIDING)
    out = []
    executor.close()  # not the worker they stalled in
    for s in stalled + spelled:
        if seconds_left() <= (spell_until if s.get("kind") == "spell" else 0):
            break
        record = executor.run(by_id[s["case_id"]], None).record
        if record.status != "ok" or not record.median_s:
            continue
        share = record.control_flops / usual if record.control_flops and usual else None
        out.append({"kind": "stalled", **s, "first_s": float(timed[s["case_id"]]), "again_s": record.median_s,
                    "again_low_s": record.ci_low_s, "again_high_s": record.ci_high_s, "again_share": share})
        say(f"  {s['case_id']}: {s['reason']}; again {record.median_s * 1e3:.2f} ms"
            + (f" (probe at {share:.2f})" if share else ""))
    return out
