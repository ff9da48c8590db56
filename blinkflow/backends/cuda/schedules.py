"""Schedules the cuda executor builds itself, without the planner.

* :func:`direct_allgather_schedule` and :func:`direct_reducescatter_schedule` serve calls no
  tree plan fits (the runtime's uneven shards, the first and last phases of the three-phase
  all-reduce when the plan has no intra-host trees).
* :func:`chain_allreduce_schedule` is Blink's simplest spanning tree, a chain, reduced up and
  broadcast down chunk by chunk. Benchmarks and GPU tests use it as a baseline that does not
  depend on the planner; on a chain the pipeline is what makes the bandwidth (Blink §4.2).
"""
from __future__ import annotations

from typing import Dict, List, Sequence, Tuple

from ...errors import ScheduleError
from ...planner.schedule import Schedule, Step


def direct_allgather_schedule(devices: Tuple[int, ...], shards: Tuple[Tuple[int, int, int], ...],
                              nelems: int, chunk_elems: int) -> Schedule:
    """An all-gather in one hop: every device sends its shard, chunk by chunk, straight to every
    other device (one channel per destination offset so the copies overlap).

    Used where no tree plan fits the call: shards of uneven size chosen by the caller (the
    runtime's ``counts``) and the last phase of the three-phase all-reduce, where the shards
    are the cross-host pieces. On NVSwitch machines one hop is also what the trees would do.
    """
    if chunk_elems <= 0:
        raise ScheduleError("chunk_elems must be positive")
    n = len(devices)
    programs = {d: [] for d in devices}
    for owner, offset, count in shards:
        pos = devices.index(owner)
        for hop in range(1, n):
            peer = devices[(pos + hop) % n]
            channel = hop - 1
            for start in range(offset, offset + count, chunk_elems):
                c = min(chunk_elems, offset + count - start)
                programs[owner].append(Step("send", start, c, peer=peer, channel=channel))
                programs[peer].append(Step("recv", start, c, peer=owner, channel=channel))
    schedule = Schedule(collective="allgather", devices=tuple(devices), nelems=nelems, chunk_elems=chunk_elems,
                        programs=tuple((d, tuple(programs[d])) for d in devices), nchannels=max(1, n - 1),
                        shards=tuple(shards))
    schedule.validate()
    return schedule


def direct_reducescatter_schedule(devices: Tuple[int, ...], shards: Tuple[Tuple[int, int, int], ...],
                                  nelems: int, chunk_elems: int) -> Schedule:
    """A reduce-scatter in one hop: every device sends its copy of each foreign shard, chunk by
    chunk, straight to the shard's owner, which folds them in with ``recv_reduce``.

    The owner's program lists, per chunk, the senders in a fixed order (its successors in
    ``devices``); the hazards on the shared range chain those steps, so every chunk is combined
    in that order and only by its owner: the result does not depend on arrival order. One
    channel per hop distance, as in :func:`direct_allgather_schedule`.
    """
    if chunk_elems <= 0:
        raise ScheduleError("chunk_elems must be positive")
    n = len(devices)
    programs = {d: [] for d in devices}
    for owner, offset, count in shards:
        pos = devices.index(owner)
        for start in range(offset, offset + count, chunk_elems):
            c = min(chunk_elems, offset + count - start)
            for hop in range(1, n):
                peer = devices[(pos + hop) % n]
                programs[peer].append(Step("send", start, c, peer=owner, channel=hop - 1))
                programs[owner].append(Step("recv_reduce", start, c, peer=peer, channel=hop - 1))
    schedule = Schedule(collective="reducescatter", devices=tuple(devices), nelems=nelems, chunk_elems=chunk_elems,
                        programs=tuple((d, tuple(programs[d])) for d in devices), nchannels=max(1, n - 1),
                        shards=tuple(shards))
    schedule.validate()
    return schedule


def chain_allreduce_schedule(devices: Sequence[int], nelems: int, chunk: int, nchannels: int = 1) -> Schedule:
    """Reduce up a chain to its last device, then broadcast back down, chunk by chunk.

    With ``nchannels`` > 1 the buffer is split into that many parts; part c rides channel c on
    the chain rotated by c (so roots differ and both directions of the links are used)."""
    if chunk <= 0:
        raise ScheduleError("chunk must be positive")
    devices = list(devices)
    programs: Dict[int, List[Step]] = {d: [] for d in devices}
    parts = [(c * nelems // nchannels, (c + 1) * nelems // nchannels) for c in range(nchannels)]
    for c, (lo, hi) in enumerate(parts):
        order = devices[c:] + devices[:c]
        n = len(order)
        for start in range(lo, hi, chunk):
            cnt = min(chunk, hi - start)
            for i, d in enumerate(order):  # reduce towards order[-1]
                if n == 1:
                    break
                if i == 0:
                    programs[d].append(Step("send", start, cnt, peer=order[1], channel=c))
                elif i < n - 1:
                    programs[d].append(Step("recv_reduce_send", start, cnt, peer=order[i - 1], send_to=order[i + 1], channel=c))
                else:
                    programs[d].append(Step("recv_reduce", start, cnt, peer=order[i - 1], channel=c))
            for i in range(n - 1, -1, -1):  # broadcast back down from the root
                d = order[i]
                if n == 1:
                    break
                if i == n - 1:
                    programs[d].append(Step("send", start, cnt, peer=order[i - 1], channel=c))
                elif i > 0:
                    programs[d].append(Step("recv_send", start, cnt, peer=order[i + 1], send_to=order[i - 1], channel=c))
                else:
                    programs[d].append(Step("recv", start, cnt, peer=order[1], channel=c))
    schedule = Schedule(collective="allreduce", devices=tuple(devices), nelems=nelems, chunk_elems=chunk,
                        programs=tuple((d, tuple(programs[d])) for d in devices), nchannels=nchannels)
    schedule.validate()
    return schedule


def chain_broadcast_schedule(devices: Sequence[int], root: int, nelems: int, chunk: int) -> Schedule:
    """Broadcast from ``root`` down the chain ``root, devices after it, ..., devices before it``,
    chunk by chunk: every middle device forwards a chunk while the next one is arriving."""
    if chunk <= 0:
        raise ScheduleError("chunk must be positive")
    devices = list(devices)
    pos = devices.index(root)
    order = devices[pos:] + devices[:pos]
    programs: Dict[int, List[Step]] = {d: [] for d in devices}
    n = len(order)
    for start in range(0, nelems, chunk):
        cnt = min(chunk, nelems - start)
        for i in range(n - 1):
            if i == 0:
                programs[order[0]].append(Step("send", start, cnt, peer=order[1]))
            else:
                programs[order[i]].append(Step("recv_send", start, cnt, peer=order[i - 1], send_to=order[i + 1]))
        if n > 1:
            programs[order[-1]].append(Step("recv", start, cnt, peer=order[-2]))
    schedule = Schedule(collective="broadcast", devices=tuple(devices), nelems=nelems, chunk_elems=chunk,
                        programs=tuple((d, tuple(programs[d])) for d in devices), root=root)
    schedule.validate()
    return schedule
