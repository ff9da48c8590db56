"""What a step costs each algorithm besides its bytes on the links: the figures the simulator
charges, so that ``blinkrun simulate`` predicts what the chosen algorithm runs. Every figure is a
projection from a measurement or a stated source (docs/cuda.md, "The cost model"):

* the host runner (cuda backend): every action of a rank's program is Python on the host (CUDA
  calls, a launch, control messages), one after the other. Its cost per action was measured
  under the fake CuPy on the development CPU (:data:`RUNNER_US_PER_ACTION`, ``python -m
  blinkflow.bench runner-actions``); on one H100 the same actions took 30-50 us (docs/benchmarks.md).
  A rank's actions are serial, so a call takes at least ``actions x cost``, whatever the links do;
* the device executor: one launch per call (:data:`DEVICE_LAUNCH_US`, the H100's smallest
  device-to-device copy in docs/benchmarks.md: 512 KiB moved in 10.1 us, launch and event
  included), a flag handshake per chunk (:data:`DEVICE_HANDSHAKE_US`, NCCL's Simple protocol's
  per-step cost of a few microseconds), and a per-connection rate from Little's law over the
  kernel's own geometry (:mod:`.device_geometry`, which also decides how many blocks each
  connection gets): ``lanes x block_gbps()`` (the link's own bandwidth caps it further);
* NCCL: its rings at the plan's ring rate, with NCCL's own per-step cost.

Pure: no MPI, CuPy or TensorFlow.
"""
from __future__ import annotations

from . import device_geometry

DEVICE_HANDSHAKE_US = 2.0
"""Per chunk and connection: the writer's system-scope release of the tail counter and the
reader's acquire poll (NCCL Simple's per-step cost, a few microseconds)."""
DEVICE_LAUNCH_US = 10.1
"""One launch per call: the H100's 256 KiB device-to-device copy (512 KiB read and written at
51.7 GB/s, docs/benchmarks.md "GPU: one H100"), launch and events included."""

RUNNER_US_PER_ACTION = 590.0
"""Host microseconds per runner action (cuda backend), measured under the fake CuPy on the
development CPU (2 cores shared by several test runs; 562-619 us over three runs of 128-512
actions): ``PYTHONPATH=tests/fake_cupy FAKE_CUPY_DEVICES=2 mpirun -np 2 python -m blinkflow.bench
runner-actions`` (docs/benchmarks.md, "Runner: host cost per action"). With 16 KiB chunks the
bytes cost little, so the figure is the host's Python, CUDA calls and control messages -- and
the fake's own emulation of each CUDA call, which makes it an upper bound: one H100 host measured
30-50 us per action."""
RUNNER_CPU_US_PER_ACTION = 40.0
"""The cpu backend's runner: a few shared-memory messages and numpy calls per action, tens of
microseconds of Python (the ring round trip alone is 3.8 us, docs/benchmarks.md)."""

NCCL_STEP_US = 2.0
"""NCCL's per-step cost on the device (Simple protocol), as the ring baseline charges it."""


def device_connection_gbps(lanes: int, latency_us: float = device_geometry.LATENCY_US) -> float:
    """Little's law: the most one (peer, channel) connection served by ``lanes`` blocks moves,
    GB/s (1e9 B/s), each block keeping :func:`.device_geometry.bytes_in_flight` bytes in flight
    per ``latency_us``.

    >>> round(device_connection_gbps(2), 1)     # 2 x 32 KiB per 1 us
    65.5
    """
    return lanes * device_geometry.block_gbps(latency_us)
