"""Phase 2 of Blink's three-phase protocol (MLSys 2020, §5): the all-reduce of one shard among
the ranks that own it on every host, over MPI point-to-point on ``cross_comm``.

Data moves as raw bytes (so float16 and bool need no MPI datatype) and is combined with the
same numpy ufuncs as on the host, in a fixed order. Every element is combined by one rank and
then copied to the others, so the result is bitwise identical everywhere.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Optional, Sequence, Tuple

import numpy as np

from ...planner.plan import Plan, split_counts
from ...schedule.ir import RECEIVING_OPS, REDUCING_OPS, SENDING_OPS


class Scratch:
    """A private receive buffer that grows geometrically and is never freed per call."""

    def __init__(self):
        self._buf = np.empty(0, dtype=np.uint8)

    def get(self, count: int, dtype) -> np.ndarray:
        nbytes = count * np.dtype(dtype).itemsize
        if self._buf.nbytes < nbytes:
            self._buf = np.empty(max(nbytes, 2 * self._buf.nbytes), dtype=np.uint8)
        return self._buf[:nbytes].view(dtype)


def _bytes(arr: np.ndarray):
    from mpi4py import MPI

    return [arr.view(np.uint8), MPI.BYTE]


def ring_allreduce(comm, data: np.ndarray, ufunc: np.ufunc, scratch: Scratch, tag: int = 7) -> None:
    """Ring all-reduce of ``data`` in place: reduce-scatter then all-gather, p-1 steps each.

    Bandwidth-optimal (2(p-1)/p of the data crosses each rank's link), the baseline the paper's
    cross-host phase is compared with, and correct for any number of hosts.
    """
    p, r = comm.Get_size(), comm.Get_rank()
    n = data.shape[0]
    if p == 1 or n == 0:
        return
    counts = split_counts([1.0] * p, n)
    offs = [sum(counts[:i]) for i in range(p)]
    right, left = (r + 1) % p, (r - 1) % p
    tmp = scratch.get(max(counts), data.dtype)
    for s in range(p - 1):
        send_b, recv_b = (r - s) % p, (r - s - 1) % p
        incoming = tmp[:counts[recv_b]]
        comm.Sendrecv(_bytes(data[offs[send_b]:offs[send_b] + counts[send_b]]), right, tag,
                      _bytes(incoming), left, tag)
        block = data[offs[recv_b]:offs[recv_b] + counts[recv_b]]
        ufunc(incoming, block, out=block)  # upstream partial first: a fixed order
    for s in range(p - 1):
        send_b, recv_b = (r + 1 - s) % p, (r - s) % p
        comm.Sendrecv(_bytes(data[offs[send_b]:offs[send_b] + counts[send_b]]), right, tag,
                      _bytes(data[offs[recv_b]:offs[recv_b] + counts[recv_b]]), left, tag)


def run_schedule(comm, schedule, device: int, rank_of: dict, data: np.ndarray, ufunc: np.ufunc,
                 scratch: Scratch) -> None:
    """Run ``device``'s program of a lowered :class:`Schedule` over MPI point-to-point.

    The IR's rules make a plain walk in program order deadlock-free: programs are sorted by
    round, a receive's round is later than its send's, and sends never block (``Isend``).
    Every receive is posted up front, in program order, into its own slice of ``scratch``: MPI's
    non-overtaking rule per (source, tag) then gives the IR's FIFO matching per (peer, channel)
    with tag = channel, and data arrives while earlier steps still compute. A step waits for
    the sends it depends on (``deps`` name every write-after-send hazard) before it writes.
    """
    from mpi4py import MPI

    steps = schedule.program(device)
    total = sum(s.count for s in steps if s.op in RECEIVING_OPS)
    inbox = scratch.get(total, data.dtype)
    recv_reqs, where, at = {}, {}, 0
    for i, s in enumerate(steps):
        if s.op in RECEIVING_OPS:
            where[i] = inbox[at:at + s.count]
            recv_reqs[i] = comm.Irecv(where[i].view(np.uint8), source=rank_of[s.peer], tag=s.channel)
            at += s.count
    send_reqs = {}
    for i, s in enumerate(steps):
        for d in s.deps:
            req = send_reqs.pop(d, None)
            if req is not None:
                req.Wait()
        rng = data[s.offset:s.offset + s.count]
        if s.op in RECEIVING_OPS:
            recv_reqs.pop(i).Wait()
            if s.op in REDUCING_OPS:
                ufunc(rng, where[i], out=rng)  # own value first, then the child's (tree order)
            else:
                np.copyto(rng, where[i])
        elif s.op == "copy":
            np.copyto(rng, data[s.src_offset:s.src_offset + s.count])
        if s.op in SENDING_OPS:
            send_reqs[i] = comm.Isend(rng.view(np.uint8), dest=rank_of[s.destination], tag=s.channel)
    MPI.Request.Waitall(list(send_reqs.values()))


class CrossAllreduce:
    """Phase 2 for the shards this rank owns: the plan's cross groups lowered to schedules
    (memoised per shard size), or a ring over ``cross_comm`` when there is no such plan."""

    _CACHE = 32

    def __init__(self, cross_comm, plan: Optional[Plan], my_device: int, devices: Sequence[int],
                 places: Sequence[Tuple[int, int, int]], chunk_bytes: int):
        self.comm = cross_comm
        self.device = my_device
        self.chunk_bytes = chunk_bytes
        self.groups = []
        rank_of_device = {d: g for g, d in enumerate(devices)}
        my_local = places[rank_of_device[my_device]][0]
        for group in (plan.cross if plan is not None and plan.is_three_phase else ()):
            if my_device not in group.devices:
                continue
            ranks = [rank_of_device.get(d) for d in group.devices]
            if any(g is None or places[g][0] != my_local for g in ranks) or len(ranks) != cross_comm.Get_size():
                continue  # not the ranks of our cross_comm: the ring below is always right
            self.groups.append((group, {d: places[g][2] for d, g in zip(group.devices, ranks)}))
        self._schedules: "OrderedDict" = OrderedDict()

    def run(self, data: np.ndarray, start: float, ufunc: np.ufunc, scratch: Scratch) -> None:
        """All-reduce ``data``, the shard starting at fraction ``start`` of the buffer."""
        if self.comm.Get_size() == 1 or data.shape[0] == 0:
            return
        if not self.groups:
            ring_allreduce(self.comm, data, ufunc, scratch)
            return
        index = min(range(len(self.groups)), key=lambda i: abs(self.groups[i][0].start - start))
        group, rank_of = self.groups[index]
        key = (index, data.shape[0], data.dtype.itemsize)
        schedule = self._schedules.get(key)
        if schedule is None:
            from ...schedule.lower import lower

            chunk = max(1, (self.chunk_bytes or (1 << 20)) // data.dtype.itemsize)
            schedule = self._schedules[key] = lower(group.plan, data.shape[0], chunk_elems=chunk)
            if len(self._schedules) > self._CACHE:
                self._schedules.popitem(last=False)
        run_schedule(self.comm, schedule, self.device, rank_of, data, ufunc, scratch)
