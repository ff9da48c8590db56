"""Prove that the device tables of a call shape cannot deadlock, by one greedy run.

Every wait of the device protocol (:mod:`.device_tables`) is "a monotonic counter has reached a
value" (a connection's ``tail`` or ``head``, a block's ``progress``), every post only raises a
counter, and a block's next step depends on nothing but counters. So once a step may run it stays
runnable whatever else runs first: the system is monotone, and the set of steps every execution
can reach is the same. One greedy run that moves any block that can move, until none can, thus
decides it: if it runs every step, every fair execution (any interleaving, any speed of the
blocks) completes; if it stops short, *every* execution stops at the same stuck blocks (a
deadlock, not bad luck), and :func:`check_tables` names them and what each waits on.

What the greedy run models, per block in program order: the progress waits, the ``tail`` of
every receive of a step (a fused reduction waits for all its inputs before it frees any slot),
a send's ``head`` (``window`` slots per connection) and the posts. It does not look at
data; the symbolic checker (:mod:`.symbolic`) proves what the steps compute.
"""
from __future__ import annotations

import collections
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from ..errors import ScheduleError
from .device_tables import RankTables, all_tables
from .ir import Schedule

Counter = Tuple  # ("tail"|"head", src, dst, channel) or ("progress", rank, block)


def check_tables(tables: Sequence[RankTables]) -> None:
    """Raise :class:`ScheduleError` unless every rank's tables (one entry per rank of the call)
    run to completion under the device protocol."""
    by_rank = {t.rank: t for t in tables}
    _check_connections(by_rank)
    value: Dict[Counter, int] = collections.defaultdict(int)
    parked: Dict[Counter, List[Tuple[int, int]]] = collections.defaultdict(list)
    at: Dict[Tuple[int, int], int] = {}
    todo = collections.deque()
    for t in tables:
        for b in range(len(t.blocks)):
            at[(t.rank, b)] = 0
            todo.append((t.rank, b))
    while todo:
        rank, b = todo.popleft()
        t = by_rank[rank]
        steps = t.blocks[b].steps
        i = at[(rank, b)]
        while i < len(steps):
            need = _first_unmet(t, b, steps[i], value)
            if need is not None:
                parked[need[0]].append((rank, b))
                break
            for counter, v in _posts(t, b, i, steps[i]):
                value[counter] = v
                todo.extend(parked.pop(counter, ()))
            i += 1
        at[(rank, b)] = i
    stuck = [(r, b) for (r, b), i in sorted(at.items()) if i < len(by_rank[r].blocks[b].steps)]
    if stuck:
        raise ScheduleError("the device tables deadlock: " + "; ".join(
            _describe(by_rank[r], b, at[(r, b)], value) for r, b in stuck[:8])
            + (f"; and {len(stuck) - 8} more blocks" if len(stuck) > 8 else ""))


def check_schedule(schedule: Schedule, window: int, fuse_inputs: int = 1,
                   rank_of: Optional[Mapping[int, int]] = None) -> None:
    """Build the tables of every rank of ``schedule`` (devices are ranks in schedule order
    unless ``rank_of`` says otherwise) with ``window`` slots and :func:`check_tables` them."""
    rank_of = dict(rank_of) if rank_of is not None else {d: r for r, d in enumerate(schedule.devices)}
    check_tables(list(all_tables(schedule, rank_of, window, fuse_inputs).values()))


def _check_connections(by_rank: Dict[int, RankTables]) -> None:
    """Both ends of every connection exist, agree on its transfers and on the window."""
    for t in by_rank.values():
        for c in t.sends:
            peer = by_rank.get(c.peer)
            mine = [x for x in peer.recvs if (x.peer, x.channel) == (t.rank, c.channel)] if peer else []
            if not mine or mine[0].transfers != c.transfers:
                got = mine[0].transfers if mine else 0
                raise ScheduleError(f"rank {t.rank} sends {c.transfers} transfers to rank {c.peer} on channel "
                                    f"{c.channel}, which receives {got}")
            if peer.window != t.window:
                raise ScheduleError(f"ranks {t.rank} and {c.peer} use {t.window} and {peer.window} slots per "
                                    "connection; every rank must use the same window")
        for c in t.recvs:
            peer = by_rank.get(c.peer)
            if peer is None or not any((x.peer, x.channel) == (t.rank, c.channel) for x in peer.sends):
                raise ScheduleError(f"rank {t.rank} receives from rank {c.peer} on channel {c.channel}, "
                                    "which sends nothing there")


def _first_unmet(t: RankTables, b: int, step, value) -> Optional[Tuple[Counter, int]]:
    """The first counter ``step`` waits on that has not reached its value, with that value."""
    for block, v in step.waits:
        key = ("progress", t.rank, block)
        if value[key] < v:
            return key, v
    for conn, seq in step.recvs:
        c = t.recvs[conn]
        key = ("tail", c.peer, t.rank, c.channel)
        if value[key] < seq + 1:
            return key, seq + 1
    if step.send_conn >= 0:
        c = t.sends[step.send_conn]
        key = ("head", t.rank, c.peer, c.channel)
        if value[key] < step.send_seq + 1 - t.window:
            return key, step.send_seq + 1 - t.window
    return None


def _posts(t: RankTables, b: int, i: int, step) -> List[Tuple[Counter, int]]:
    out = []
    for conn, seq in step.recvs:
        c = t.recvs[conn]
        out.append((("head", c.peer, t.rank, c.channel), seq + 1))
    if step.send_conn >= 0:
        c = t.sends[step.send_conn]
        out.append((("tail", t.rank, c.peer, c.channel), step.send_seq + 1))
    if step.posts_progress:
        out.append((("progress", t.rank, b), i + 1))
    return out


def _describe(t: RankTables, b: int, i: int, value) -> str:
    step = t.blocks[b].steps[i]
    need = _first_unmet(t, b, step, value)
    where = f"rank {t.rank} block {b} (channel {t.blocks[b].channel}) step {i} ({step.op} [{step.offset}, " \
            f"{step.offset + step.count}))"
    if need is None:  # cannot happen: a stuck block waits on something
        return where
    key, v = need
    if key[0] == "progress":
        what = f"block {key[2]}'s progress to reach {v} (it is {value[key]})"
    elif key[0] == "tail":
        what = f"rank {key[1]}'s transfer #{v - 1} on channel {key[3]} (tail {value[key]})"
    else:
        what = f"rank {key[2]} to free a slot on channel {key[3]} (head {value[key]}, needs {v})"
    return f"{where} waits for {what}"
