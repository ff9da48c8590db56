"""Build a :class:`Schedule` step by step, deriving ``deps``, transfer matching and ``round``.

Lowering code only says *what* each device does, in an order where every send is added before
the receive that matches it. The builder works out the rest, so no lowering has to keep
dependency indexes by hand (the usual source of schedule bugs, which is why MSCCL derives them
too):

* ``deps`` — every read-after-write, write-after-read and write-after-write hazard on a device's
  buffer, found by tracking the last writer and the readers since of every element range. Two
  steps that touch the same elements, one of them writing, are therefore always ordered by deps,
  so an executor that runs independent steps concurrently (one stream per channel) is safe.
* matching — sends are paired FIFO per ``(src, dst, channel)`` with receives in add order.
* ``round`` — the least round satisfying the rules documented in :mod:`.ir`: after its
  deps, after the round of the matching send, not before the earlier transfers of its queue, and
  a range a device has sent is not overwritten before the receiving round has passed.

Programs are ordered by ``(round, add order)``: every dep stays earlier, FIFO order is kept on
both ends of every queue, and an executor that walks a program in order walks it round by round.
"""
from __future__ import annotations

import collections
from typing import Deque, Dict, List, Optional, Sequence, Tuple

from ..errors import ScheduleError
from .intervals import IntervalMap
from .ir import RECEIVING_OPS, STEP_OPS, Schedule, Step

_READS = ("send", "recv_reduce", "recv_reduce_send")
_WRITES = ("recv", "recv_reduce", "recv_reduce_send", "recv_send", "copy")


class _Pending:
    """One step while the schedule is being built (fields a :class:`Step` gets at the end)."""

    __slots__ = ("device", "op", "offset", "count", "peer", "send_to", "channel", "src_offset",
                 "deps", "match", "overwrites", "queue_prev", "round")

    def __init__(self, device, op, offset, count, peer, send_to, channel, src_offset):
        self.device = device
        self.op = op
        self.offset = offset
        self.count = count
        self.peer = peer
        self.send_to = send_to
        self.channel = channel
        self.src_offset = src_offset
        self.deps: set = set()
        self.match: Optional[int] = None      # for receives: the matching send step
        self.overwrites: set = set()          # send steps whose range this step overwrites
        self.queue_prev: List[int] = []       # previous transfer on each queue it is part of
        self.round = 0

    @property
    def destination(self):
        if self.op == "send":
            return self.peer
        if self.op in ("recv_reduce_send", "recv_send"):
            return self.send_to
        return None


class ScheduleBuilder:
    """Collects steps for ``devices`` working on buffers of ``nelems`` elements."""

    def __init__(self, collective: str, devices: Sequence[int], nelems: int):
        self.collective = collective
        self.devices = tuple(devices)
        self.nelems = nelems
        self._steps: List[_Pending] = []
        # per device: element range -> (last writer, readers since that write)
        self._hazards: Dict[int, IntervalMap] = {d: IntervalMap(max(nelems, 1), (None, ())) for d in self.devices}
        self._unmatched: Dict[Tuple[int, int, int], Deque[int]] = collections.defaultdict(collections.deque)
        self._last_on_queue: Dict[Tuple[str, int, int, int], int] = {}
        self._recv_of: Dict[int, int] = {}
        self.channels = 0

    # ---- adding steps ---------------------------------------------------------------------
    def add(self, device: int, op: str, offset: int, count: int, peer: Optional[int] = None,
            send_to: Optional[int] = None, channel: int = 0, src_offset: Optional[int] = None) -> int:
        """Append one step to ``device``'s program and return its id. Zero-length steps are kept
        out of schedules by the callers; the builder rejects them to catch lowering bugs."""
        if op not in STEP_OPS:
            raise ScheduleError(f"unknown op {op!r}")
        if count <= 0:
            raise ScheduleError(f"device {device}: {op} of {count} elements (empty steps are not emitted)")
        if device not in self._hazards:
            raise ScheduleError(f"device {device} is not part of this schedule")
        sid = len(self._steps)
        step = _Pending(device, op, offset, count, peer, send_to, channel, src_offset)
        self._steps.append(step)
        self.channels = max(self.channels, channel + 1)
        if op in RECEIVING_OPS:
            queue = self._unmatched[(peer, device, channel)]
            if not queue:
                raise ScheduleError(f"device {device}: {op} from {peer} on channel {channel} was added "
                                    "before the matching send")
            step.match = queue.popleft()
            self._recv_of[step.match] = sid
            self._chain(("recv", peer, device, channel), sid)
        if step.destination is not None:
            self._unmatched[(device, step.destination, channel)].append(sid)
            self._chain(("send", device, step.destination, channel), sid)
        self._track_hazards(step, sid)
        return sid

    def _chain(self, key, sid: int) -> None:
        prev = self._last_on_queue.get(key)
        if prev is not None:
            self._steps[sid].queue_prev.append(prev)
        self._last_on_queue[key] = sid

    def _track_hazards(self, step: _Pending, sid: int) -> None:
        hazards = self._hazards[step.device]
        lo, hi = step.offset, step.offset + step.count
        if step.op == "copy":
            for _, _, (writer, _) in hazards.items(step.src_offset, step.src_offset + step.count):
                if writer is not None:
                    step.deps.add(writer)
            hazards.update(step.src_offset, step.src_offset + step.count,
                           lambda state: (state[0], state[1] + (sid,)))
        reads, writes = step.op in _READS, step.op in _WRITES
        for _, _, (writer, readers) in hazards.items(lo, hi):
            if writer is not None:
                step.deps.add(writer)
            if writes:
                step.deps.update(readers)
                step.overwrites.update(r for r in readers if self._steps[r].destination is not None)
        step.deps.discard(sid)
        if writes:
            # A step that writes and then sends (fused ops) is also the reader of what it wrote.
            hazards.assign(lo, hi, (sid, (sid,) if step.destination is not None else ()))
        elif reads:
            hazards.update(lo, hi, lambda state: (state[0], state[1] + (sid,)))

    # ---- finishing ------------------------------------------------------------------------
    def _assign_rounds(self) -> None:
        """Least rounds meeting every rule; repeats while a constraint points at a later step
        (a write added before the receive of a send it overwrites)."""
        steps = self._steps
        for _ in range(len(steps) + 1):
            changed = False
            for sid, s in enumerate(steps):
                r = 0
                for d in s.deps:
                    r = max(r, steps[d].round + 1)
                if s.match is not None:
                    r = max(r, steps[s.match].round + 1)
                for p in s.queue_prev:
                    r = max(r, steps[p].round)
                for sent in s.overwrites:
                    recv = self._recv_of.get(sent)
                    if recv is not None:
                        r = max(r, steps[recv].round + 1)
                if r != s.round:
                    s.round = r
                    changed = True
            if not changed:
                return
        raise ScheduleError("the steps' ordering constraints form a cycle")

    def build(self, chunk_elems: int, root: Optional[int] = None,
              shards: Tuple[Tuple[int, int, int], ...] = (), fabrics: Tuple[str, ...] = ()) -> Schedule:
        leftover = [(k, len(q)) for k, q in self._unmatched.items() if q]
        if leftover:
            (src, dst, ch), n = leftover[0]
            raise ScheduleError(f"{n} sends {src}->{dst} on channel {ch} have no receive")
        self._assign_rounds()
        order: Dict[int, List[int]] = {d: [] for d in self.devices}
        for sid, s in enumerate(self._steps):
            order[s.device].append(sid)
        programs = []
        for device in self.devices:
            ids = sorted(order[device], key=lambda sid: (self._steps[sid].round, sid))
            index = {sid: i for i, sid in enumerate(ids)}
            steps = []
            for sid in ids:
                s = self._steps[sid]
                steps.append(Step(op=s.op, offset=s.offset, count=s.count, peer=s.peer, send_to=s.send_to,
                                  channel=s.channel, src_offset=s.src_offset,
                                  deps=tuple(sorted(index[d] for d in s.deps)), round=s.round))
            programs.append((device, tuple(steps)))
        return Schedule(collective=self.collective, devices=self.devices, nelems=self.nelems,
                        chunk_elems=chunk_elems, programs=tuple(programs), root=root,
                        nchannels=max(1, self.channels), shards=shards,
                        fabrics=tuple(fabrics))

