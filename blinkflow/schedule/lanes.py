"""Lanes: a schedule whose every channel is split into several, so the device executor runs
several thread blocks per (peer, tree) and keeps a fast link busy.

One thread block moves at most its bytes in flight per round trip of memory latency (Little's
law; :mod:`.device_geometry` has the numbers); a link faster than that needs several blocks
pulling on it at once. NCCL gets there with more channels than the topology has rings; MSCCL by
instantiating its algorithm's thread blocks several times (``instances``). This does the same to a
:class:`Schedule`: step ``i`` of channel ``c`` becomes steps ``i * lanes + l`` on channel
``c * lanes + l``, each over lane ``l``'s slice of the step's range, so every lane is a complete
copy of the tree's pipeline on its own connections and counters (its own rings, ``tail`` and
``head``), run by its own block. Nothing else changes: the tables, the kernel, the emulator and
the proxy see more channels.

Slices are cut at multiples of :data:`GRANULE` elements from the start of the range (16 bytes of
any dtype blinkflow reduces), so a lane of a 16-byte-aligned span is 16-byte aligned too; a range
too short for every lane leaves the last lanes empty (a zero-count transfer still posts its
counters, so both ends stay matched).

Dependencies: lane ``l`` of a step depends on lane ``l`` of each dependency over the same range
(the pipeline's chain: receive chunk k, then forward chunk k), and on every lane of a dependency
over a different range. Two lanes of one step never overlap, so every hazard of the original
schedule is still ordered by a chain of ``deps``. Sends and receives keep their FIFO matching per
(pair, channel): both ends split the same range the same way. Rounds are kept.
"""
from __future__ import annotations

import dataclasses
from typing import List, Tuple

from ..errors import ScheduleError
from .ir import Schedule, Step

GRANULE = 16
"""Lane boundaries fall on multiples of this many elements from a step's offset: 16 bytes of a
1-byte dtype, a multiple of 16 bytes for every wider one."""


def lane_bounds(count: int, lanes: int) -> List[Tuple[int, int]]:
    """``(start, count)`` of each lane's slice of a range of ``count`` elements: as equal as
    :data:`GRANULE`-multiples allow, the remainder on the last non-empty lane."""
    granules = -(-count // GRANULE)
    per = -(-granules // lanes) * GRANULE
    out = []
    for l in range(lanes):
        start = min(count, l * per)
        out.append((start, min(count, start + per) - start))
    return out


def split_lanes(schedule: Schedule, lanes: int) -> Schedule:
    """``schedule`` with every channel split into ``lanes`` (see the module); ``lanes == 1``
    returns it unchanged."""
    if not isinstance(lanes, int) or isinstance(lanes, bool) or lanes < 1:
        raise ScheduleError(f"a schedule splits into at least one lane per channel, got lanes={lanes!r}")
    if lanes == 1:
        return schedule
    programs = []
    for device, steps in schedule.programs:
        out: List[Step] = []
        for i, s in enumerate(steps):
            for l, (start, count) in enumerate(lane_bounds(s.count, lanes)):
                deps = []
                for d in s.deps:
                    dep = steps[d]
                    if (dep.offset, dep.count) == (s.offset, s.count):
                        deps.append(d * lanes + l)
                    else:
                        deps.extend(d * lanes + m for m in range(lanes))
                out.append(dataclasses.replace(
                    s, offset=s.offset + start, count=count, channel=s.channel * lanes + l,
                    src_offset=None if s.src_offset is None else s.src_offset + start, deps=tuple(sorted(deps))))
        programs.append((device, tuple(out)))
    nchannels = max(1, schedule.nchannels)
    fabrics = tuple(schedule.fabric(c) for c in range(nchannels) for _ in range(lanes)) if schedule.fabrics else ()
    return dataclasses.replace(schedule, programs=tuple(programs), nchannels=nchannels * lanes, fabrics=fabrics)
