"""Schedules built by hand, without the planner, through the same builder as lowered plans.

* :func:`chain_allreduce_schedule` is Blink's simplest spanning tree, a chain, reduced up and
  broadcast down chunk by chunk, and :func:`chain_broadcast_schedule` its broadcast. The GPU
  benchmark and the backend tests use them as a baseline that does not depend on the planner;
  on a chain the pipeline is what makes the bandwidth (Blink §4.2).
* :func:`direct_allgather_schedule` and :func:`direct_reducescatter_schedule`: one hop from
  every device to every other, NCCL's shape on a switch; the runner's tests drive uneven and
  empty shards through them.

All go through :class:`~blinkflow.schedule.builder.ScheduleBuilder`, like the lowered plans, so
their ``deps`` and rounds are derived and every one passes the symbolic checker (tested).

No production module runs them: they live with the benchmarks because ``python -m blinkflow.bench
gpu`` (:mod:`.gpu`) ships in the package and times the chain; the tests import them from here.
"""
from __future__ import annotations

import dataclasses
from typing import Sequence, Tuple

from ..errors import ScheduleError
from ..schedule.builder import ScheduleBuilder
from ..schedule.ir import Schedule


def direct_allgather_schedule(devices: Tuple[int, ...], shards: Tuple[Tuple[int, int, int], ...],
                              nelems: int, chunk_elems: int) -> Schedule:
    """An all-gather in one hop: every device sends its shard, chunk by chunk, straight to every
    other device (one channel per destination offset so the copies overlap). ``shards`` may be
    uneven or empty, as a caller's ``counts`` can be: the runner's tests drive those through it.
    """
    if chunk_elems <= 0:
        raise ScheduleError("chunk_elems must be positive")
    n = len(devices)
    b = ScheduleBuilder("allgather", devices, nelems)
    for owner, offset, count in shards:
        pos = devices.index(owner)
        for hop in range(1, n):
            peer = devices[(pos + hop) % n]
            channel = hop - 1
            for start in range(offset, offset + count, chunk_elems):
                c = min(chunk_elems, offset + count - start)
                b.add(owner, "send", start, c, peer=peer, channel=channel)
                b.add(peer, "recv", start, c, peer=owner, channel=channel)
    return _finish(b, chunk_elems, nchannels=max(1, n - 1), shards=tuple(shards))


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
    b = ScheduleBuilder("reducescatter", devices, nelems)
    for owner, offset, count in shards:
        pos = devices.index(owner)
        for start in range(offset, offset + count, chunk_elems):
            c = min(chunk_elems, offset + count - start)
            for hop in range(1, n):
                peer = devices[(pos + hop) % n]
                b.add(peer, "send", start, c, peer=owner, channel=hop - 1)
                b.add(owner, "recv_reduce", start, c, peer=peer, channel=hop - 1)
    return _finish(b, chunk_elems, nchannels=max(1, n - 1), shards=tuple(shards))


def chain_allreduce_schedule(devices: Sequence[int], nelems: int, chunk: int, nchannels: int = 1) -> Schedule:
    """Reduce up a chain to its last device, then broadcast back down, chunk by chunk.

    With ``nchannels`` > 1 the buffer is split into that many parts; part c rides channel c on
    the chain rotated by c (so roots differ and both directions of the links are used)."""
    if chunk <= 0:
        raise ScheduleError("chunk must be positive")
    devices = list(devices)
    b = ScheduleBuilder("allreduce", devices, nelems)
    parts = [(c * nelems // nchannels, (c + 1) * nelems // nchannels) for c in range(nchannels)]
    for c, (lo, hi) in enumerate(parts):
        order = devices[c:] + devices[:c]
        n = len(order)
        if n == 1:
            break
        for start in range(lo, hi, chunk):
            cnt = min(chunk, hi - start)
            for i, d in enumerate(order):  # reduce towards order[-1]
                if i == 0:
                    b.add(d, "send", start, cnt, peer=order[1], channel=c)
                elif i < n - 1:
                    b.add(d, "recv_reduce_send", start, cnt, peer=order[i - 1], send_to=order[i + 1], channel=c)
                else:
                    b.add(d, "recv_reduce", start, cnt, peer=order[i - 1], channel=c)
            for i in range(n - 1, -1, -1):  # broadcast back down from the root
                d = order[i]
                if i == n - 1:
                    b.add(d, "send", start, cnt, peer=order[i - 1], channel=c)
                elif i > 0:
                    b.add(d, "recv_send", start, cnt, peer=order[i + 1], send_to=order[i - 1], channel=c)
                else:
                    b.add(d, "recv", start, cnt, peer=order[1], channel=c)
    return _finish(b, chunk, nchannels=nchannels)


def chain_broadcast_schedule(devices: Sequence[int], root: int, nelems: int, chunk: int) -> Schedule:
    """Broadcast from ``root`` down the chain ``root, devices after it, ..., devices before it``,
    chunk by chunk: every middle device forwards a chunk while the next one is arriving."""
    if chunk <= 0:
        raise ScheduleError("chunk must be positive")
    devices = list(devices)
    pos = devices.index(root)
    order = devices[pos:] + devices[:pos]
    b = ScheduleBuilder("broadcast", devices, nelems)
    n = len(order)
    for start in range(0, nelems, chunk):
        cnt = min(chunk, nelems - start)
        for i in range(n - 1):
            if i == 0:
                b.add(order[0], "send", start, cnt, peer=order[1])
            else:
                b.add(order[i], "recv_send", start, cnt, peer=order[i - 1], send_to=order[i + 1])
        if n > 1:
            b.add(order[-1], "recv", start, cnt, peer=order[-2])
    return _finish(b, chunk, root=root)


def _finish(b: ScheduleBuilder, chunk_elems: int, nchannels: int = 1, **fields) -> Schedule:
    """Build, keep the documented channel count (the arena is sized by it, even where a shard
    is empty and its channel unused), validate."""
    schedule = b.build(chunk_elems, **fields)
    schedule = dataclasses.replace(schedule, nchannels=max(schedule.nchannels, nchannels))
    schedule.validate()
    return schedule
