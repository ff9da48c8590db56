"""``python -m blinkflow.bench gpu --loopback 2,4,8``: the device executor's loopback mode on one GPU.

Per virtual rank count and size (bytes of one rank's buffer): the planner's all-reduce trees on
the first GPUs of an HGX H100, lowered with the policy's device chunk, every virtual rank's
blocks in one launch (:mod:`blinkflow.bench.loopback_executor`). Reported:

* ``gpu_s``: median launch time by CUDA events; ``busbw_gbps``: 2 (n - 1) / n × size / gpu_s;
* ``host_us``: median host time to issue one collective (the launch call, no wait);
* ``hbm_bytes``: what the schedule reads and writes in device memory (every virtual rank lives on
  this GPU), ``roofline_s`` = hbm_bytes over the measured device-to-device copy bandwidth (bytes
  read + written per second), and ``roofline_fraction`` = roofline_s / gpu_s, the share of the
  memory roofline the launch reaches;
* ``bitwise``: at the first size, the GPU's result against the numpy emulator of the same launch
  (:class:`blinkflow.backends.device_emulator.EmulatedLoopback`) on the same random inputs.
"""
from __future__ import annotations

import statistics
import time
from typing import Dict, List

import numpy as np

TOPOLOGY = "hgx-h100"


def loopback_schedule(nranks: int, nbytes: int, itemsize: int = 4):
    """The all-reduce schedule of ``nranks`` virtual ranks on an HGX H100's first GPUs, cut
    into the call-shape policy's device chunks."""
    from ..planner import make_plan
    from ..schedule import policy
    from ..schedule.lower import lower
    from ..topology.presets import get_preset

    topology = get_preset(TOPOLOGY)
    plan = make_plan(topology, "allreduce", devices=list(topology.compute_ids[:nranks]))
    chunk = policy.device_chunk_bytes(nbytes, len(plan.trees))
    return lower(plan, max(1, nbytes // itemsize), max(1, chunk // itemsize)), chunk


def _bitwise(cupy, tables, executor, nranks: int, nelems: int) -> bool:
    from ..backends.device_emulator import EmulatedLoopback

    rng = np.random.default_rng(nranks)
    host = (rng.standard_normal((nranks, nelems)) * 100).astype(np.float32)
    bufs = cupy.asarray(host)
    executor.run(bufs)
    EmulatedLoopback(tables, np.float32).run(host, np.add)
    return cupy.asnumpy(bufs).tobytes() == host.tobytes()


def loopback_rows(counts: List[int], sizes: List[int], iters: int, time_fn) -> List[Dict]:
    """One row per (virtual ranks, size); ``time_fn(fn, iters)`` times ``fn`` by CUDA events."""
    import cupy

    from ..backends.cuda.ipc import _MEMCPY_DEFAULT
    from .loopback_executor import LoopbackExecutor, loopback_tables, schedule_bytes
    from ..ops import ReduceOp

    rows = []
    for n in counts:
        for k, size in enumerate(sizes):
            schedule, chunk = loopback_schedule(n, size)
            tables = loopback_tables(schedule)
            executor = LoopbackExecutor(cupy, tables, "float32", ReduceOp.SUM)
            try:
                row = {"virtual_ranks": n, "bytes": size, "chunk_bytes": chunk, "blocks": executor.nblocks}
                if k == 0:
                    row["bitwise"] = _bitwise(cupy, tables, executor, n, schedule.nelems)
                bufs = cupy.zeros((n, schedule.nelems), dtype=cupy.float32)
                row["gpu_s"] = time_fn(lambda: executor.launch(bufs), iters)
                executor.wait()
                host = []
                for _ in range(iters):
                    t0 = time.perf_counter()
                    executor.launch(bufs)
                    host.append(time.perf_counter() - t0)
                    executor.wait()
                row["host_us"] = statistics.median(host) * 1e6
                moved = schedule_bytes(tables, 4)
                row["hbm_bytes"] = moved["read"] + moved["written"]
                src, dst = cupy.empty(bufs.nbytes, cupy.uint8), cupy.empty(bufs.nbytes, cupy.uint8)
                stream = cupy.cuda.get_current_stream().ptr
                copy_s = time_fn(lambda: cupy.cuda.runtime.memcpyAsync(dst.data.ptr, src.data.ptr, src.nbytes,
                                                                       _MEMCPY_DEFAULT, stream), iters)
                row["copy_gbps"] = 2 * src.nbytes / copy_s / 1e9
                row["roofline_s"] = row["hbm_bytes"] / (row["copy_gbps"] * 1e9)
                row["roofline_fraction"] = row["roofline_s"] / row["gpu_s"]
                row["busbw_gbps"] = 2 * (n - 1) / n * size / row["gpu_s"] / 1e9
                rows.append(row)
            finally:
                executor.close()
    return rows


def print_rows(echo, rows: List[Dict]) -> None:
    echo(f"\nloopback all-reduce on one GPU ({TOPOLOGY} trees, every virtual rank's blocks in one launch)")
    echo(f"{'ranks':>5} {'bytes':>10} {'chunk':>8} {'blocks':>6} {'GPU us':>9} {'busbw GB/s':>10} {'host us':>8} "
         f"{'roofline us':>11} {'of roofline':>11} {'bitwise':>7}")
    for r in rows:
        echo(f"{r['virtual_ranks']:>5} {r['bytes']:>10} {r['chunk_bytes']:>8} {r['blocks']:>6} {r['gpu_s'] * 1e6:>9.1f} "
             f"{r['busbw_gbps']:>10.1f} {r['host_us']:>8.1f} {r['roofline_s'] * 1e6:>11.1f} "
             f"{r['roofline_fraction']:>11.2f} {str(r.get('bitwise', '')):>7}")
