"""Per-block step tables: a rank's program as the device executor runs it.

The host runner (:mod:`.runner`) issues actions as events allow; a device executor instead runs
one kernel for the whole call, and every thread block of it walks a fixed table (MSCCL's
interpreter kernel; NCCL's channels). :func:`build_tables` turns the :class:`RankProgram` of every
rank of a schedule into those tables:

* **Blocks are channels.** Block ``b`` runs the actions of one channel in the order a windowed
  runner issues them (:func:`device_order`). A channel is one plan tree, or one lane of it when
  the links need several blocks per tree (:mod:`.lanes`, sized by :mod:`.device_geometry`). Deps inside a channel are earlier
  in the same table, so that order covers them; a dep on another channel's action (a three-phase boundary, a hazard on a shared range)
  becomes a *progress wait*: block ``b'`` posts ``progress[b'] = i + 1`` after its step ``i``,
  and the waiting step spins until ``progress[b'] >= i + 1``.
* **Connections.** Every (peer, channel) the program sends to or receives from is one
  connection with a ring of ``window`` slots of ``slot_elems`` elements in the *receiver's*
  memory, and two monotonic counters, NCCL Simple's: ``tail`` in the receiver's memory (chunks
  the sender has put into slots; written by the sender) and ``head`` in the sender's memory
  (chunks the receiver has consumed; written by the receiver). Transfer ``k`` of a connection
  (counted from ``base``, the transfers of earlier calls, so counters never restart) uses slot
  ``(base + k) % window``.
* **Steps.** One step per action. A fused action (a tree node folding several children in one
  pass) is one step with several receives: ``buffer (op) in_1 (op) in_2 ...`` in the action's
  combination order, accumulated in the kernels' arithmetic type (float for float16 and
  bfloat16) and rounded once, as the runner's fused reduction kernel does; so the bits are the
  runner's for every dtype.

The protocol every executor of these tables follows (the numpy emulator in
``blinkflow/backends/device_emulator.py`` and the CUDA kernel ``kernels/interpreter.cu``), per
step, all waits before any work, so a step is one atomic move of a monotone system:

1. wait ``progress[b] >= v`` for each ``(b, v)`` of ``waits``;
2. receives: wait ``tail[conn] >= base + seq + 1`` for each ``(conn, seq)`` of ``recvs`` (acquire);
3. send: wait ``head[send_conn] >= base + send_seq + 1 - window`` (the slot was consumed);
4. work: ``recv``/``recv_send`` copy the slot into ``[offset, offset + count)``; the reducing
   ops set it to ``buffer (op) slot_1 (op) slot_2 ...``, rounded once; ``copy`` moves
   ``[src_offset, ...)`` there; a sending op then copies the range into the peer's slot;
5. posts (release, after a fence): ``head[conn] = base + seq + 1`` for each receive,
   ``tail[send_conn] = base + send_seq + 1`` for a send, ``progress[block] = i + 1`` if another
   block waits on it (``posts_progress``).

A step holds every input's slot until its last input arrived; the program's fusion only groups
inputs that cannot depend, through other ranks, on such a release (:func:`.program.compile_program`),
and :func:`device_order` and the deadlock check (:mod:`.deadlock`) model the step as one wait.

Pure: no MPI, CuPy or TensorFlow. Tables are plain dataclasses with a JSON round-trip, so a
hang can be replayed offline.
"""
from __future__ import annotations

import heapq
import dataclasses
import json
import weakref
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from ..errors import ScheduleError
from .device_geometry import lanes_for
from .ir import Schedule
from .lanes import split_lanes
from .program import RankProgram, compile_program

TABLES_SCHEMA = 2
DEVICE_OPS = ("send", "recv", "recv_reduce", "recv_reduce_send", "recv_send", "copy")
_RECEIVES = ("recv", "recv_reduce", "recv_reduce_send", "recv_send")
_SENDS = ("send", "recv_reduce_send", "recv_send")


@dataclasses.dataclass(frozen=True)
class Connection:
    """One (peer, channel) ring of ``window`` slots: this rank sends to ``peer`` over it (in
    :attr:`RankTables.sends`) or receives from ``peer`` (in :attr:`RankTables.recvs`)."""

    peer: int
    channel: int
    transfers: int
    """Transfers of one call over this connection (what ``base`` grows by per call)."""


@dataclasses.dataclass(frozen=True)
class DeviceStep:
    """One step of a block's table (see the module docstring for what it waits on and posts)."""

    op: str
    offset: int
    count: int
    src_offset: int = -1
    """Source of ``copy``."""
    recvs: Tuple[Tuple[int, int], ...] = ()
    """(index into :attr:`RankTables.recvs`, which transfer of it from 0 each call) of every chunk
    the step receives, in combination order: one for ``recv``/``recv_send``, one or more for the
    reducing ops."""
    send_conn: int = -1
    """Index into :attr:`RankTables.sends` of a sending step."""
    send_seq: int = -1
    waits: Tuple[Tuple[int, int], ...] = ()
    """(block, progress) pairs: step waits until ``progress[block] >= progress``."""
    posts_progress: bool = False
    """Another block waits on this step: post ``progress[this block]`` after it."""

    def to_list(self) -> list:
        return [self.op, self.offset, self.count, self.src_offset, [list(r) for r in self.recvs],
                self.send_conn, self.send_seq, [list(w) for w in self.waits], int(self.posts_progress)]

    @classmethod
    def from_list(cls, row: list) -> "DeviceStep":
        op, offset, count, src, recvs, sc, ss, waits, posts = row
        return cls(op, int(offset), int(count), int(src), tuple((int(c), int(q)) for c, q in recvs), int(sc),
                   int(ss), tuple((int(b), int(v)) for b, v in waits), bool(posts))


@dataclasses.dataclass(frozen=True)
class BlockTable:
    """The steps one thread block runs, in order: the actions of ``channel``."""

    channel: int
    steps: Tuple[DeviceStep, ...]


@dataclasses.dataclass(frozen=True)
class RankTables:
    """Everything one rank's kernel launch runs for one call shape."""

    rank: int
    nelems: int
    window: int
    """Slots per connection."""
    slot_elems: int
    """Elements per slot (the schedule's largest transfer; the same on every rank)."""
    blocks: Tuple[BlockTable, ...]
    sends: Tuple[Connection, ...]
    recvs: Tuple[Connection, ...]

    @property
    def nsteps(self) -> int:
        return sum(len(b.steps) for b in self.blocks)

    def to_dict(self) -> dict:
        return {"schema": TABLES_SCHEMA, "rank": self.rank, "nelems": self.nelems, "window": self.window,
                "slot_elems": self.slot_elems,
                "blocks": [{"channel": b.channel, "steps": [s.to_list() for s in b.steps]} for b in self.blocks],
                "sends": [dataclasses.astuple(c) for c in self.sends],
                "recvs": [dataclasses.astuple(c) for c in self.recvs]}

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    @classmethod
    def from_dict(cls, d: dict) -> "RankTables":
        try:
            if d.get("schema") != TABLES_SCHEMA:
                raise ScheduleError(f"device tables of schema {d.get('schema')!r}; this blinkflow reads {TABLES_SCHEMA}")
            return cls(rank=int(d["rank"]), nelems=int(d["nelems"]), window=int(d["window"]),
                       slot_elems=int(d["slot_elems"]),
                       blocks=tuple(BlockTable(int(b["channel"]), tuple(DeviceStep.from_list(s) for s in b["steps"]))
                                    for b in d["blocks"]),
                       sends=tuple(Connection(*map(int, c)) for c in d["sends"]),
                       recvs=tuple(Connection(*map(int, c)) for c in d["recvs"]))
        except (KeyError, TypeError, ValueError) as e:
            raise ScheduleError(f"malformed device tables JSON: {e!r}") from None

    @classmethod
    def from_json(cls, text: str) -> "RankTables":
        return cls.from_dict(json.loads(text))


def build_tables(schedule: Schedule, rank_of: Mapping[int, int], window: int,
                 fuse_inputs: int = 1, lanes: int = 1) -> Dict[int, RankTables]:
    """The tables of every rank of ``schedule`` (``rank_of`` maps its devices to ranks), with
    ``window`` slots per connection, reductions fused as :func:`compile_program` does, and every
    channel run by ``lanes`` blocks (:func:`.lanes.split_lanes`: each its slice of every step,
    on its own connections).

    A block's order is the order a runner with the same windows issues its channel's actions
    (:func:`device_order`), not program order: programs list all of a round's sends before its
    receives, and a block that must finish more sends than it has slots before it receives
    would wait for a peer doing the same (one-hop all-gathers do)."""
    if not isinstance(window, int) or isinstance(window, bool) or window < 1:
        raise ScheduleError(f"the device executor needs at least one slot per connection, got window={window!r}")
    schedule = split_lanes(schedule, lanes)
    programs = {rank_of[d]: compile_program(schedule, d, rank_of, fuse_inputs) for d in schedule.devices}
    order = device_order(programs, window)
    return {r: _tables(p, order[r], window) for r, p in programs.items()}


def device_order(programs: Mapping[int, RankProgram], window: int) -> Dict[int, List[int]]:
    """Per rank, its actions in the order a runner issues them when every transfer waits for a
    free slot among ``window`` per connection, receives consume their connection in order and
    runnable actions go lowest index first (what :func:`~.runner.run_program` does with a windowed
    transport). Every rank derives the same orders from the same schedule. Raises
    :class:`ScheduleError` when no such order runs every action.

    Event-driven: an action whose dependencies are done but whose connection is not ready parks
    on the exact counter value it needs (a connection's ``posted`` or ``consumed`` count, each
    rising by one per transfer) and wakes when that value is reached, so the work is linear in
    the actions (a 40 MiB buffer in 4 KiB chunks: about 10^5 of them)."""
    posted: Dict[Tuple[int, int, int], int] = {}    # (src, dst, channel) -> transfers sent
    consumed: Dict[Tuple[int, int, int], int] = {}  # (src, dst, channel) -> transfers received
    waiting = {r: [len(a.deps) for a in p.actions] for r, p in programs.items()}
    ready = {r: [i for i, n in enumerate(w) if n == 0] for r, w in waiting.items()}  # heaps
    parked: Dict[tuple, List[Tuple[int, int]]] = {}
    order: Dict[int, List[int]] = {r: [] for r in programs}
    ranks = list(programs)

    def wake(kind: str, key, value: int) -> None:
        for r, i in parked.pop((kind, key, value), ()):
            heapq.heappush(ready[r], i)

    moved = True
    while moved:
        moved = False
        for r in ranks:
            p, heap = programs[r], ready[r]
            while heap:
                i = heapq.heappop(heap)
                a = p.actions[i]
                need = _unmet(r, a, posted, consumed, window)
                if need is not None:
                    parked.setdefault(need, []).append((r, i))
                    continue
                for (src, seq), (_, ch) in zip(a.inputs, a.in_keys):
                    consumed[(src, r, ch)] = seq + 1
                    wake("consumed", (src, r, ch), seq + 1)
                if a.send_key is not None:
                    key = (r, a.send_to, a.channel)
                    posted[key] = a.send_seq + 1
                    wake("posted", key, a.send_seq + 1)
                order[r].append(i)
                moved = True
                for j in p.dependents[i]:
                    waiting[r][j] -= 1
                    if waiting[r][j] == 0:
                        heapq.heappush(heap, j)
    stuck = [f"rank {r} action {min(set(range(len(p.actions))) - set(order[r]))}"
             for r, p in programs.items() if len(order[r]) < len(p.actions)]
    if stuck:
        raise ScheduleError(f"no order of the device executor with {window} slots per connection runs this "
                            f"schedule; stuck: {', '.join(stuck[:8])}")
    return order


def _unmet(rank: int, a, posted, consumed, window: int) -> Optional[tuple]:
    """The first connection count ``a`` waits for, as (kind, connection, value), or None."""
    for (src, seq), (_, ch) in zip(a.inputs, a.in_keys):
        key = (src, rank, ch)
        if consumed.get(key, 0) < seq:
            return "consumed", key, seq  # not its turn on the connection
        if posted.get(key, 0) <= seq:
            return "posted", key, seq + 1  # not sent yet
    if a.send_key is not None:
        key = (rank, a.send_to, a.channel)
        if posted.get(key, 0) < a.send_seq:
            return "posted", key, a.send_seq
        if consumed.get(key, 0) < a.send_seq + 1 - window:
            return "consumed", key, a.send_seq + 1 - window
    return None


def _tables(program: RankProgram, order: Sequence[int], window: int) -> RankTables:
    sends = sorted(program.sends)   # (peer, channel)
    recvs = sorted(program.recvs)
    send_index = {key: i for i, key in enumerate(sends)}
    recv_index = {key: i for i, key in enumerate(recvs)}
    channels = sorted({a.channel for a in program.actions})
    block_of = {c: b for b, c in enumerate(channels)}
    rows: List[List[dict]] = [[] for _ in channels]
    done_at: Dict[int, Tuple[int, int]] = {}  # action -> (block, progress value once it ran)
    for a in (program.actions[i] for i in order):
        b = block_of[a.channel]
        waits: Dict[int, int] = {}
        for d in a.deps:
            db, value = done_at[d]
            if db != b:
                waits[db] = max(waits.get(db, 0), value)
        row = {"op": a.op, "offset": a.offset, "count": a.count}
        if a.op == "copy":
            row["src_offset"] = a.src_offset
        if a.inputs:
            row["recvs"] = tuple((recv_index[key], seq) for (_, seq), key in zip(a.inputs, a.in_keys))
        if a.send_key is not None:
            row["send_conn"], row["send_seq"] = send_index[a.send_key], a.send_seq
        if waits:
            row["waits"] = tuple(sorted(waits.items()))
        rows[b].append(row)
        done_at[a.index] = (b, len(rows[b]))
    posted = {(db, value - 1) for a in program.actions for d in a.deps
              for db, value in [done_at[d]] if db != block_of[a.channel]}
    blocks = tuple(BlockTable(c, tuple(DeviceStep(**row, posts_progress=(b, i) in posted) for i, row in enumerate(rows[b])))
                   for b, c in enumerate(channels))
    return RankTables(rank=program.rank, nelems=program.nelems, window=window, slot_elems=program.slot_elems,
                      blocks=blocks, sends=tuple(Connection(p, c, program.sends[(p, c)]) for p, c in sends),
                      recvs=tuple(Connection(p, c, program.recvs[(p, c)]) for p, c in recvs))


_TABLES: Dict[int, Tuple[weakref.ref, Dict[tuple, Dict[int, RankTables]]]] = {}
"""id(schedule) -> (a weak reference to it, {(rank_of, window, fuse_inputs, lanes): tables by rank})."""


def tables_for(program: RankProgram, rank_of: Mapping[int, int], window: int, fuse_inputs: int = 1,
               lanes: Optional[int] = None) -> RankTables:
    """This rank's tables of ``program`` (compiled from ``program.schedule`` with ``rank_of`` and
    ``fuse_inputs``), made once per schedule and kept as long as the schedule is (the program
    cache of :mod:`.cache` keeps it with the program)."""
    schedule = program.schedule
    if schedule is None:
        raise ScheduleError("device tables need the program's schedule (compile_program keeps it)")
    return all_tables(schedule, rank_of, window, fuse_inputs, lanes)[program.rank]


def all_tables(schedule: Schedule, rank_of: Mapping[int, int], window: int, fuse_inputs: int = 1,
               lanes: Optional[int] = None) -> Dict[int, RankTables]:
    """Every rank's tables of ``schedule`` (:func:`build_tables`), made once per schedule and
    settings: the deadlock check and the executor share them. ``lanes`` (blocks per channel)
    defaults to what the links need (:func:`.device_geometry.lanes_for`)."""
    if lanes is None:
        lanes = lanes_for(schedule)
    per = _TABLES.get(id(schedule))
    if per is None or per[0]() is not schedule:
        per = (weakref.ref(schedule, lambda _, k=id(schedule): _TABLES.pop(k, None)), {})
        _TABLES[id(schedule)] = per
    key = (tuple(sorted(rank_of.items())), window, fuse_inputs, lanes)
    tables = per[1].get(key)
    if tables is None:
        tables = per[1][key] = build_tables(schedule, rank_of, window, fuse_inputs, lanes)
    return tables
