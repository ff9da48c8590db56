"""``add_process_set`` or ``remove_process_set`` called by some ranks only: an error on every rank
of the calls at once, instead of a stall.

Both are collective over every rank of the job and synchronous: a rank that calls one (it
*fences*) submits nothing more to the global set until every rank has called it. So once a rank
has fenced, a global-set name that other ranks submitted and it lacks can only come from it after
its fence completes, and its fence can complete only when those ranks call it too: if they
wait for that name, the ranks wait for each other for good. The rule that makes this an error
rather than a guess is MPI's for collectives on one communicator: every rank calls
``add_process_set`` and ``remove_process_set`` at the same place among its global collectives.

The coordinator knows a fenced rank lacks a name when the name's request would have reached it:
a request is sent at once unless it hit the response cache, which is the same on every rank, and
a waiting hit is reported once it waited ``report_after_s``. So a name some rank sent fresh (it
waited less than that) would be on the table from the fenced rank too, had that rank submitted it
before its fence; a name only reported late is judged once the fence itself waited twice that.

Such an error is decided before every rank made its call: a rank that had neither submitted the
name nor fenced (it was slower: computing, or asleep) makes its call later, when the others have
had the error and gone on, so nobody would ever pair with it. The error is therefore *owed* to
those ranks (:func:`owed_to`): each keeps it, and its call under the name gets it the moment it is
submitted, without negotiating (:class:`~.negotiation.Negotiator`).
"""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

from .messages import Kind, Request, shown

FENCES = (Kind.ADD_PROCESS_SET, Kind.REMOVE_PROCESS_SET)
_RULE = ("add_process_set and remove_process_set are collective over every rank of the job: call them on "
         "every rank, at the same place among its collectives")


def out_of_order(table: Dict[str, Dict[int, Request]], fenced_at: Dict[Tuple[str, int], float], ranks,
                 now: float, report_after_s: Optional[float]) -> Dict[str, str]:
    """{name: error} for every waiting name that can never be ready because ranks fenced in
    another order: the names fenced ranks lack, and those ranks' fences. ``table``: name ->
    {index: request}; ``fenced_at``: (fence name, index) -> when that rank submitted it;
    ``ranks[i]``: the global rank of index i."""
    fences = {r: name for name, entry in table.items() for r, q in entry.items() if q.kind in FENCES}
    if not fences:
        return {}
    errors: Dict[str, str] = {}
    for name, entry in table.items():
        fresh = report_after_s is None or any(q.waited < report_after_s for q in entry.values())
        lacking = [r for r, fence in fences.items() if r not in entry and fence != name
                   and (fresh or now - fenced_at.get((fence, r), now) >= 2 * report_after_s)]
        if not lacking:
            continue
        submitted = sorted(entry)
        called = _calls(table, fences, lacking, ranks)
        request = entry[submitted[0]]
        errors[name] = (f"{request.kind.label} {shown(name)} was submitted by {_ranks(submitted, ranks)} while "
                        f"{called} first: {_RULE}")
        for r in lacking:
            fence = fences[r]
            errors.setdefault(fence, f"{called}, while {_ranks(submitted, ranks)} submitted {request.kind.label} "
                                     f"{shown(name)} instead: {_RULE}")
    return errors


def owed_to(entries: List[Dict[int, Request]], fenced_at: Dict[Tuple[str, int], float], size: int
            ) -> Tuple[int, ...]:
    """The ranks (indices) the errors of one :func:`out_of_order` verdict are owed to: those that
    made none of its calls (``entries``: each name's {index: request}) and are in no fence
    (``fenced_at``), so that their next call may be any of them. A rank that made one of the calls
    has its error; its later calls under the other names are new calls."""
    involved = {r for _, r in fenced_at}
    for entry in entries:
        involved.update(entry)
    return tuple(r for r in range(size) if r not in involved)


def _calls(table, fences: Dict[int, str], lacking: List[int], ranks) -> str:
    """'rank 0 called remove_process_set 'remove_process_set.noname.0'' for the lacking ranks."""
    by_fence: Dict[str, List[int]] = {}
    for r in lacking:
        by_fence.setdefault(fences[r], []).append(r)
    return "; ".join(f"{_ranks(indices, ranks)} called {table[fence][indices[0]].kind.label} {shown(fence)}"
                     for fence, indices in by_fence.items())


def _ranks(indices: List[int], ranks) -> str:
    named = sorted(ranks[i] for i in indices)
    return f"rank {named[0]}" if len(named) == 1 else f"ranks {named}"
