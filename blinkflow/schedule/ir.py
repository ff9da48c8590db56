"""The schedule IR: per rank, an ordered program of chunk transfers and reductions.

A :class:`Plan` says which trees carry which fraction of the data; a :class:`Schedule` says, for
every device, which element range to send, receive, reduce and forward, in what order, on which
channel. One schedule drives the simulator, the CPU executor and the GPU executor, so what we
predict is what we run (MSCCL's design: plain dataclass IR, checked by symbolic execution).

Model
-----
* Every device works on one buffer of ``nelems`` elements (the collective's full buffer:
  the all-reduce buffer, the broadcast buffer, all-gather's output with the device's own input
  already at its offset, reduce-scatter's input whose reduced shard ends at the device's slice).
  Ranges are in elements, so one schedule serves every dtype.
* Steps of one device run in program order subject to ``deps`` (indexes of earlier steps of the
  same program). Transfers between a pair of devices on one channel are matched FIFO: the k-th
  ``send``-type step u->v on channel c pairs with the k-th ``recv``-type step at v from u on c, and
  the two carry the same ``offset`` and ``count``.
* ``round`` is the step's synchronous round (ASAP level over all devices): an executor may run
  round by round with a barrier between rounds (the shared-memory CPU executor) or follow
  ``deps`` and transfer matching (the GPU executor, the simulator). Both orders are valid.
  Precisely (what :mod:`.builder` produces and :mod:`.symbolic` checks):

  - a step's round is greater than the rounds of its ``deps``;
  - a receive's round is greater than its matching send's round: data sent in round ``r`` can
    be consumed from round ``r + 1`` on, so steps of one round never wait for each other and
    may run in any order or in parallel;
  - a range a device has sent is not overwritten on that device before the round of the
    matching receive has passed, so a receiver may read the sender's buffer directly (pull)
    during its receive round instead of going through a mailbox;
  - rounds never decrease along one ``(src, dst, channel)`` queue, and programs are sorted by
    round, so walking a program in order is walking it round by round.
* ``deps`` name every hazard: two steps of a device that touch overlapping elements, one of
  them writing, are connected by a chain of ``deps``. Sends must not block (buffered or
  asynchronous), a send is complete once its data has left the range.
* ``channel`` is the tree index, so each tree can run on its own stream and link.
  ``fabrics[channel]`` says which fabric that tree rides ("main", or "pcie" for Blink's hybrid
  PCIe trees); empty means all "main".

Step ops
--------
``send``               send [offset, offset+count) to ``peer``
``recv``               receive into [offset, offset+count) from ``peer`` (overwrites)
``recv_reduce``        receive from ``peer`` and combine into [offset, offset+count)
``recv_reduce_send``   ``recv_reduce`` then send the combined range to ``send_to`` (one fused step)
``recv_send``          ``recv`` then forward the same range to ``send_to`` (broadcast forwarding)
``copy``               copy [src_offset, src_offset+count) to [offset, offset+count) locally
"""
from __future__ import annotations

import dataclasses
import json
from typing import Dict, List, Optional, Tuple

from ..errors import ScheduleError

STEP_OPS = ("send", "recv", "recv_reduce", "recv_reduce_send", "recv_send", "copy")
SENDING_OPS = ("send", "recv_reduce_send", "recv_send")
RECEIVING_OPS = ("recv", "recv_reduce", "recv_reduce_send", "recv_send")
REDUCING_OPS = ("recv_reduce", "recv_reduce_send")
SCHEDULE_SCHEMA = 1


@dataclasses.dataclass(frozen=True)
class Step:
    op: str
    offset: int
    count: int
    peer: Optional[int] = None
    """Source of a receive, destination of a plain send."""
    send_to: Optional[int] = None
    """Forward target of ``recv_reduce_send`` / ``recv_send``."""
    channel: int = 0
    src_offset: Optional[int] = None
    """Source offset of ``copy``."""
    deps: Tuple[int, ...] = ()
    round: int = 0

    @property
    def destination(self) -> Optional[int]:
        """The device this step sends to, if it sends."""
        if self.op == "send":
            return self.peer
        if self.op in ("recv_reduce_send", "recv_send"):
            return self.send_to
        return None

    def to_dict(self) -> dict:
        d = {"op": self.op, "offset": self.offset, "count": self.count}
        for key in ("peer", "send_to", "src_offset"):
            value = getattr(self, key)
            if value is not None:
                d[key] = value
        if self.channel:
            d["channel"] = self.channel
        if self.deps:
            d["deps"] = list(self.deps)
        d["round"] = self.round
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Step":
        return cls(op=d["op"], offset=int(d["offset"]), count=int(d["count"]), peer=d.get("peer"),
                   send_to=d.get("send_to"), channel=int(d.get("channel", 0)), src_offset=d.get("src_offset"),
                   deps=tuple(d.get("deps", ())), round=int(d.get("round", 0)))


@dataclasses.dataclass(frozen=True)
class Schedule:
    """Programs for every participating device of one collective call shape."""

    collective: str
    devices: Tuple[int, ...]
    nelems: int
    chunk_elems: int
    programs: Tuple[Tuple[int, Tuple[Step, ...]], ...]
    """(device, steps) in ``devices`` order."""
    root: Optional[int] = None
    nchannels: int = 1
    shards: Tuple[Tuple[int, int, int], ...] = ()
    """(device, offset, count): the slice each device owns (all-gather input, reduce-scatter
    output); empty for broadcast, reduce and all-reduce."""
    fabrics: Tuple[str, ...] = ()
    """Per channel, the plan tree's fabric ("main" or "pcie"); empty = all "main"."""

    def fabric(self, channel: int) -> str:
        return self.fabrics[channel] if channel < len(self.fabrics) else "main"

    def program(self, device: int) -> Tuple[Step, ...]:
        for d, steps in self.programs:
            if d == device:
                return steps
        raise KeyError(device)

    def as_dict_programs(self) -> Dict[int, Tuple[Step, ...]]:
        return dict(self.programs)

    def validate(self) -> None:
        """Structural checks: known ops, ranges inside the buffer, channels below ``nchannels``,
        non-overlapping copies, deps backwards, transfers
        matched pairwise (same range, FIFO per device pair and channel). The collective's
        postcondition is proven separately by the symbolic checker."""
        devices = set(self.devices)
        queues: Dict[Tuple[int, int, int], List[Tuple[int, int]]] = {}
        for device, steps in self.programs:
            if device not in devices:
                raise ScheduleError(f"program for device {device}, which is not in the schedule")
            for i, s in enumerate(steps):
                where = f"device {device} step {i} ({s.op})"
                if s.op not in STEP_OPS:
                    raise ScheduleError(f"{where}: unknown op")
                if s.count < 0 or s.offset < 0 or s.offset + s.count > self.nelems:
                    raise ScheduleError(f"{where}: range [{s.offset}, {s.offset + s.count}) outside 0..{self.nelems}")
                if any(d < 0 or d >= i for d in s.deps):
                    raise ScheduleError(f"{where}: deps {s.deps} must name earlier steps")
                if s.op in RECEIVING_OPS and s.peer not in devices:
                    raise ScheduleError(f"{where}: receives from unknown device {s.peer}")
                if not 0 <= s.channel < max(1, self.nchannels):
                    # Executors index per-channel streams and receive slots by it.
                    raise ScheduleError(f"{where}: channel {s.channel} outside 0..{max(1, self.nchannels) - 1}")
                if s.op == "copy" and (s.src_offset is None or s.src_offset < 0 or s.src_offset + s.count > self.nelems):
                    raise ScheduleError(f"{where}: copy needs a src_offset inside the buffer")
                if s.op == "copy" and s.count and abs(s.src_offset - s.offset) < s.count:
                    # cudaMemcpyAsync is undefined when source and target overlap.
                    raise ScheduleError(f"{where}: copy from [{s.src_offset}, {s.src_offset + s.count}) "
                                        f"overlaps its target [{s.offset}, {s.offset + s.count})")
                dst = s.destination
                if s.op in SENDING_OPS and (dst not in devices or dst == device):
                    raise ScheduleError(f"{where}: sends to invalid device {dst}")
                if dst is not None:
                    queues.setdefault((device, dst, s.channel), []).append((s.offset, s.count))
        for device, steps in self.programs:
            seen: Dict[Tuple[int, int], int] = {}
            for i, s in enumerate(steps):
                if s.op not in RECEIVING_OPS:
                    continue
                key = (s.peer, s.channel)
                k = seen.get(key, 0)
                seen[key] = k + 1
                sent = queues.get((s.peer, device, s.channel), [])
                if k >= len(sent):
                    raise ScheduleError(f"device {device} step {i}: receive #{k} from {s.peer} on channel "
                                        f"{s.channel} has no matching send")
                if sent[k] != (s.offset, s.count):
                    raise ScheduleError(f"device {device} step {i}: receives {(s.offset, s.count)} from {s.peer} "
                                        f"but the matching send carries {sent[k]}")
            for (src, ch), k in seen.items():
                if len(queues.get((src, device, ch), [])) != k:
                    raise ScheduleError(f"device {src} sends {len(queues[(src, device, ch)])} transfers to "
                                        f"{device} on channel {ch}, which receives {k}")
        for (src, dst, ch), sent in queues.items():
            received = sum(1 for s in self.program(dst) if s.op in RECEIVING_OPS and s.peer == src and s.channel == ch)
            if received != len(sent):
                raise ScheduleError(f"device {src} sends {len(sent)} transfers to {dst} on channel {ch}; "
                                    f"{dst} receives {received}")

    # ---- serialisation ----------------------------------------------------------------------
    def to_dict(self) -> dict:
        return {
            "schema": SCHEDULE_SCHEMA, "collective": self.collective, "devices": list(self.devices),
            "nelems": self.nelems, "chunk_elems": self.chunk_elems, "root": self.root,
            "nchannels": self.nchannels, "shards": [list(s) for s in self.shards], "fabrics": list(self.fabrics),
            "programs": [{"device": d, "steps": [s.to_dict() for s in steps]} for d, steps in self.programs],
        }

    def to_json(self, indent: Optional[int] = None) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_dict(cls, d: dict) -> "Schedule":
        try:
            return cls(
                collective=d["collective"], devices=tuple(d["devices"]), nelems=int(d["nelems"]),
                chunk_elems=int(d["chunk_elems"]), root=d.get("root"), nchannels=int(d.get("nchannels", 1)),
                shards=tuple(tuple(s) for s in d.get("shards", ())), fabrics=tuple(d.get("fabrics", ())),
                programs=tuple((p["device"], tuple(Step.from_dict(s) for s in p["steps"])) for p in d["programs"]),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise ScheduleError(f"malformed schedule JSON: {e!r}") from None
