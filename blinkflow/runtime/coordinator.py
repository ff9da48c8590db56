"""Rank 0's message table: who has submitted what, and what is ready on every rank.

The coordinator receives requests from every rank (gathered each cycle they have any), and a name
becomes *ready* when every rank that has not joined has submitted it. Ready names are validated
(Horovod's rules: kind, dtype, shape, op, root and scale factors must agree; all-gather and
all-to-all may differ in the first dimension) and turned into responses, in the order they became
ready, which is the order every rank executes them.
"""
from __future__ import annotations

import time
from typing import Dict, List, Optional, Tuple

from ..ops import ReduceOp
from . import fences
from .messages import JOIN_NAME, Kind, Request, Response, shown


class MessageTable:
    """``ranks[i]``: the global rank of index ``i`` (a process set's members; the identity for
    the job), named in messages; ``label`` says which process set, after a tensor's name."""

    def __init__(self, size: int, ranks=None, label: str = "", report_after_s: Optional[float] = None):
        self.size = size
        self.report_after_s = report_after_s
        """When a rank reports a cache hit that waits (:mod:`.fences` judges by it)."""
        self.fenced_at: Dict[Tuple[str, int], float] = {}
        """(name, rank index) -> when that rank submitted its add/remove_process_set."""
        self.ranks = tuple(ranks) if ranks is not None else tuple(range(size))
        self.label = label
        self.table: Dict[str, Dict[int, Request]] = {}
        self.first_seen: Dict[str, float] = {}
        self.joined: List[int] = []  # in the order the ranks joined
        self._ready: List[str] = []

    # ---- input --------------------------------------------------------------------------------
    def add(self, rank: int, requests: List[Request], now: Optional[float] = None) -> None:
        now = time.monotonic() if now is None else now
        for request in requests:
            if request.kind is Kind.JOIN:
                if rank not in self.joined:
                    self.joined.append(rank)
                    # Names waiting only for this rank may be ready now.
                    for name in list(self.table):
                        self._check_ready(name)
                continue
            entry = self.table.setdefault(request.name, {})
            if rank in entry:
                continue  # a stall report of something already here
            entry[rank] = request
            submitted = now - request.waited
            if request.kind in fences.FENCES:
                self.fenced_at[(request.name, rank)] = submitted
            self.first_seen[request.name] = min(self.first_seen.get(request.name, submitted), submitted)
            self._check_ready(request.name)

    def forget(self, name: str) -> None:
        """The name was executed through the cache: drop what its stall reports left here."""
        self.table.pop(name, None)
        self.first_seen.pop(name, None)
        if name in self._ready:
            self._ready.remove(name)

    def _check_ready(self, name: str) -> None:
        entry = self.table.get(name)
        if entry is None or name in self._ready:
            return
        if all(r in entry or r in self.joined for r in range(self.size)):
            self._ready.append(name)

    # ---- output -------------------------------------------------------------------------------
    def pop_ready(self) -> List[Response]:
        """Responses for every ready name (validated), then a join response if all joined."""
        out = []
        for name in self._ready:
            entry = self.table.pop(name)
            self.first_seen.pop(name, None)
            out.append(self._respond(name, entry))
        self._ready = []
        if self.fenced_at and not self.joined:
            # add/remove_process_set called in another order on some ranks: every rank's call fails now,
            # also the call of a rank that has not made it yet (it is owed the error).
            errors = fences.out_of_order(self.table, self.fenced_at, self.ranks, time.monotonic(),
                                         self.report_after_s)
            owed_to = fences.owed_to([self.table[name] for name in errors], self.fenced_at, self.size)
            for name, error in errors.items():
                entry = self.table.pop(name)
                self.first_seen.pop(name, None)
                out.append(Response(Kind.ERROR, name, tuple(entry.get(r) for r in range(self.size)), error=error,
                                    error_type="ProcessSetError", owed_to=owed_to))
            self.fenced_at = {key: t for key, t in self.fenced_at.items() if key[0] in self.table}
        if len(self.joined) == self.size:
            out.append(Response(Kind.JOIN, JOIN_NAME, last_joined=self.joined[-1]))
            self.joined = []
        return out

    def _respond(self, name: str, entry: Dict[int, Request]) -> Response:
        requests = tuple(entry.get(r) for r in range(self.size))
        refused = refusal(name, requests, self.ranks, self.label)
        if refused:
            kinds = [q.rejected_as for q in requests if q is not None and q.rejected and q.rejected_as]
            return Response(Kind.ERROR, name, requests, error=refused, error_type=kinds[0] if kinds else
                            "InvalidArgumentError")
        error = validate(name, requests, self.joined, self.ranks, self.label)
        if error:
            return Response(Kind.ERROR, name, requests, error=error, error_type="TensorMismatchError")
        return Response(requests[min(entry)].kind, name, requests)

    def missing(self) -> List[Tuple[str, float, List[int], List[int]]]:
        """(name, first seen, ranks that submitted, ranks that did not) for every waiting name."""
        out = []
        for name, entry in self.table.items():
            absent = [self.ranks[r] for r in range(self.size) if r not in entry and r not in self.joined]
            out.append((name, self.first_seen[name], sorted(self.ranks[r] for r in entry), absent))
        return out


def refusal(name: str, requests: Tuple[Optional[Request], ...], ranks=None, label: str = "") -> str:
    """The error every rank raises when some rank refused the call (its arguments were bad),
    naming those ranks (``ranks[i]``: the global rank of index i) and their reasons, else ''."""
    reasons: Dict[str, List[int]] = {}
    kind = None
    for r, q in enumerate(requests):
        if q is not None and q.rejected:
            reasons.setdefault(q.rejected, []).append(ranks[r] if ranks else r)
            kind = kind or q.kind
    if not reasons:
        return ""
    said = "; ".join(f"{_ranks(ranks)}: {why}" for why, ranks in reasons.items())
    return f"{kind.label} {shown(name)}{label} was refused by {said}"


def _ranks(ranks: List[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {ranks}"


def validate(name: str, requests: Tuple[Optional[Request], ...], joined: List[int], ranks=None,
             label: str = "") -> str:
    """An error message if the ranks' requests for ``name`` disagree, else ''. ``ranks[i]`` is
    the global rank of index i (a process set's members), ``label`` the set, for the message."""
    present = [(r, q) for r, q in enumerate(requests) if q is not None]
    signatures = {q.signature() for _, q in present}
    if len(signatures) > 1:
        what = _what_differs([q for _, q in present])
        named = [(ranks[r] if ranks else r, q) for r, q in present]
        sent = "; ".join(f"rank {r}: {q.describe()}" for r, q in named)
        return (f"ranks disagree on the {what} of tensor {shown(name)}{label}: {sent}"
                f"{_first_member_difference(named)}. "
                "Every rank must submit the same collective under one name (give distinct names to different "
                "tensors).")
    first = present[0][1]
    if joined and any(requests[r] is None for r in joined):
        joined = [ranks[r] if ranks else r for r in joined]  # said as global ranks
        if first.kind is Kind.ALLREDUCE and ReduceOp(first.op) not in (ReduceOp.SUM, ReduceOp.AVERAGE):
            return (f"allreduce {shown(name)} with op {ReduceOp(first.op).name.title()} cannot run while ranks "
                    f"{sorted(joined)} have joined (a joined rank contributes zeros): use Sum or Average")
        if first.kind not in (Kind.ALLREDUCE, Kind.ALLGATHER, Kind.BROADCAST, Kind.BARRIER):
            return f"{first.kind.label} {shown(name)} cannot run while ranks {sorted(joined)} have joined"
        if first.kind is Kind.BROADCAST and first.root in joined:
            return f"broadcast {shown(name)}: its root rank {first.root} has already joined"
    return ""


def _what_differs(requests: List[Request]) -> str:
    fields = [("collective", lambda q: q.kind), ("dtype", lambda q: q.dtype),
              ("shape", lambda q: q.signature()[2]), ("reduce op", lambda q: q.op), ("root rank", lambda q: q.root),
              ("scale factors", lambda q: (q.prescale, q.postscale)), ("device", lambda q: q.device),
              ("group members", lambda q: q.member_signature())]
    names = [label for label, get in fields if len({get(q) for q in requests}) > 1]
    return ", ".join(names) or "parameters"


def _first_member_difference(present: List[Tuple[int, Request]]) -> str:
    """For groups: the first member the ranks disagree on, rank by rank."""
    groups = [(r, q.parts) for r, q in present]
    if any(parts is None for _, parts in groups):
        return ""
    agreeing = [q.member_signature() for _, q in present]
    for i in range(max(len(parts) for _, parts in groups)):
        if len({members[i] if i < len(members) else None for members in agreeing}) > 1:
            sent = "; ".join(f"rank {r}: " + (f"{parts[i][0]}{list(parts[i][1])}" if i < len(parts) else "no member")
                             for r, parts in groups)
            return f" (first differing member: #{i}: {sent})"
    return ""
