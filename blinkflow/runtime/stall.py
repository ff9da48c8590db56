"""The stall inspector (rank 0): names the ranks that keep everyone else waiting.

A tensor some ranks submitted and others did not stalls the job silently, the classic
data-parallel bug (a rank took another branch, or skipped a step, or ran out of data). After
``BLINKFLOW_STALL_CHECK_TIME_SECONDS`` rank 0 logs which ranks have not submitted which tensors,
repeating every such interval; after ``BLINKFLOW_STALL_SHUTDOWN_TIME_SECONDS`` (300 s; 0 = never)
it asks the job to shut down, and every rank's waiting calls raise ShutdownError with that
message. Both say the likely fix (:func:`likely_fix`).

Rank 0 learns of a tensor when a rank's request reaches it. Cache hits normally never do, so
ranks also report hits that wait longer than half the check time (see ``Negotiator``).
"""
from __future__ import annotations

import time
from typing import Dict, List, Optional, Tuple

from .coordinator import MessageTable
from .log import logger
from .messages import shown

#: Waiting names a stall shutdown's message lists (oldest first).
_FATAL_NAMES = 8


class StallInspector:
    def __init__(self, check_s: float, shutdown_s: float):
        self.check_s = check_s
        self.shutdown_s = shutdown_s
        self._warned: Dict[str, float] = {}

    @property
    def enabled(self) -> bool:
        return self.check_s > 0 or self.shutdown_s > 0

    def report_after_s(self) -> Optional[float]:
        times = [t for t in (self.check_s, self.shutdown_s) if t > 0]
        return min(times) / 2 if times else None

    def inspect(self, table: MessageTable, now: Optional[float] = None) -> Optional[str]:
        """Log stalls; return a shutdown reason once a stall outlasts the shutdown time."""
        if not self.enabled:
            return None
        now = time.monotonic() if now is None else now
        stalled: List[Tuple[str, float, List[int], List[int]]] = []
        waiting = sorted(table.missing(), key=lambda m: m[1])  # the oldest first
        fatal = False
        for name, since, present, absent in waiting:
            waited = now - since
            if self.check_s > 0 and waited >= self.check_s and now - self._warned.get(name, -1e18) >= self.check_s:
                self._warned[name] = now
                stalled.append((name, waited, present, absent))
            fatal = fatal or (self.shutdown_s > 0 and waited >= self.shutdown_s)
        if fatal:
            # Every name still waiting, not only the one that ran out of time first: the cause is
            # often another name (a call one rank made alone, while the others went on).
            said = [f"{shown(name)}{table.label} missing on ranks {absent} (ready on ranks {present}"
                    f"{_refusals(table, name)})" for name, _, present, absent in waiting[:_FATAL_NAMES]]
            more = f"; and {len(waiting) - _FATAL_NAMES} more" if len(waiting) > _FATAL_NAMES else ""
            return (f"stall: tensors not submitted by every rank within {self.shutdown_s:g} s "
                    f"(BLINKFLOW_STALL_SHUTDOWN_TIME_SECONDS): " + "; ".join(said) + more + ". "
                    + _joined(table) + likely_fix([name for name, *_ in waiting]))
        if stalled:
            lines = [f"  {shown(name)}{table.label}: missing on ranks {absent} (ready on ranks {present}, "
                     f"waiting {waited:.0f} s{_refusals(table, name)})"
                     for name, waited, present, absent in stalled]
            logger.warning("stalled collectives: some ranks did not submit these tensors. Every rank must "
                           "run the same collectives under the same names. " + _joined(table)
                           + likely_fix([name for name, *_ in stalled]) + "\n" + "\n".join(lines))
        for name in list(self._warned):
            if name not in table.table:
                del self._warned[name]
        return None


def _joined(table: MessageTable) -> str:
    """Which ranks have joined (they wait for the others and are not the missing ones), or ''."""
    if not table.joined:
        return ""
    joined = sorted(table.ranks[r] for r in table.joined)
    said, they = (f"rank {joined[0]} has", "it takes") if len(joined) == 1 else (f"ranks {joined} have", "they take")
    return f"{said} joined (blinkflow.join()): {they} part in these with zeros once the missing ranks submit them. "


def _refusals(table: MessageTable, name: str) -> str:
    """What the ranks that refused ``name`` said (a name submitted again while in flight)."""
    said = [f"; rank {table.ranks[r]} refused it: {q.rejected}" for r, q in sorted(table.table.get(name, {}).items())
            if q.rejected]
    return "".join(said[:2])


def likely_fix(names) -> str:
    """The usual causes of a stall on ``names``, said once."""
    if any(name.startswith(("add_process_set.", "remove_process_set.")) for name in names):
        return ("add_process_set and remove_process_set are collective over every rank of the job: call them on "
                "every rank, in the same order.")
    return ("Likely fixes: a rank that ran out of data or left its training loop early calls blinkflow.join() "
            "(or give every rank shards of equal length); a rank that took another branch must still run the "
            "same collectives; a step slower than this on purpose needs a larger "
            "BLINKFLOW_STALL_SHUTDOWN_TIME_SECONDS.")
