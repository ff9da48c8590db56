"""The device executor's geometry: threads per block, loads in flight per thread, and how many
blocks (lanes, :mod:`.lanes`) each (peer, tree) connection gets, from Little's law.

A block copies or reduces by issuing 16-byte loads; with ``THREADS`` threads each holding
``UNROLL`` loads in flight (``BF_UNROLL`` in ``kernels/common.cuh``: loads issued before any is
used, NCCL's ``reduceCopy`` unroll), a block has ``bytes_in_flight()`` bytes outstanding and, by
Little's law (throughput = bytes in flight / latency), moves at most that much per
``LATENCY_US``. A connection that must carry ``gbps`` therefore needs
``ceil(gbps * LATENCY_US * 1e3 / bytes_in_flight())`` blocks: :func:`blocks_per_channel`.

The rate a connection must carry: a rank's trees share its GPU's link port, so a tree's share of
a port of ``PORT_GBPS`` is ``PORT_GBPS / trees``; a chunk too small to give every lane a vector
per thread caps the lanes (:func:`lanes_for`). The constants are the
fastest GPU blinkflow targets, so slower links get more blocks than they need, which costs only
idle SM slots (the co-residency check in ``device_executor`` still guards the launch). Sources and
the arithmetic: docs/cuda.md, "Keeping a link busy".

Pure: no CuPy; the schedule layer (``device_tables``) and the cuda backend both read it.
"""
from __future__ import annotations

from .ir import Schedule

THREADS = 512
"""Threads per block (``device_executor.THREADS``): NCCL's Simple protocol runs 512-ish per
channel; 4 such blocks fill an H100 SM's 2048 threads."""
UNROLL = 4
"""16-byte loads of one source each thread has in flight (``BF_UNROLL`` in ``kernels/common.cuh``)."""
VECTOR_BYTES = 16
LATENCY_US = 1.0
"""One round trip of a load the block waits on: device-memory latency on H100 is about 0.5-0.8 us
under load, an NVLink/NVSwitch round trip about 1 us; the larger bounds the block."""
PORT_GBPS = 450.0
"""NVLink bandwidth per direction of one H100 SXM GPU (18 NVLink4 links), GB/s."""
MIN_LANE_ELEMS = THREADS * 4
"""Fewest elements of a chunk one lane takes: one 16-byte vector per thread of a 4-byte dtype. A
lane with less would leave threads of its block idle, adding a block but few bytes in flight,
so small chunks (latency-bound calls) keep one block per connection."""
MAX_LANES = 8
"""Most blocks one (peer, tree) connection gets: beyond this a plan with few trees would take
more SMs than a training step can spare for communication (NCCL caps its channels at 32 per GPU)."""


def bytes_in_flight(threads: int = THREADS, unroll: int = UNROLL) -> int:
    """Bytes one block has outstanding: every thread's ``unroll`` 16-byte loads."""
    return threads * unroll * VECTOR_BYTES


def block_gbps(latency_us: float = LATENCY_US, threads: int = THREADS, unroll: int = UNROLL) -> float:
    """What one block moves at most (Little's law), GB/s: bytes in flight per latency."""
    return bytes_in_flight(threads, unroll) / (latency_us * 1e3)


def blocks_per_channel(gbps: float, latency_us: float = LATENCY_US) -> int:
    """Blocks a connection carrying ``gbps`` GB/s needs so that their loads in flight cover the
    link's bandwidth x latency product; at least 1, at most :data:`MAX_LANES`."""
    if gbps <= 0:
        return 1
    need = -(-gbps * latency_us * 1e3 // bytes_in_flight())
    return int(max(1, min(MAX_LANES, need)))


def lanes_for(schedule: Schedule) -> int:
    """Blocks per (peer, tree) for ``schedule``: what a tree's share of the port needs, no more
    lanes than its chunk fills (:data:`MIN_LANE_ELEMS` each)."""
    need = blocks_per_channel(PORT_GBPS / max(1, schedule.nchannels))
    return max(1, min(need, schedule.chunk_elems // MIN_LANE_ELEMS))
