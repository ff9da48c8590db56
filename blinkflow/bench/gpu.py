"""``python -m blinkflow.bench gpu``: the cuda backend against its peers, on this machine.

Run it under MPI (``mpirun -np 2 python -m blinkflow.bench gpu``); ranks may share one GPU.

1. Kernels (rank 0): the fused reduction (out = a + b, and Blink's reduce-and-forward that also
   writes a second output) against a device-to-device copy of the same size on the same GPU,
   as effective memory bandwidth (bytes read + written per second). A reduction that reaches
   the copy's bandwidth is memory-bound, which is what Blink's fused kernels aim for.
2. All-reduce over all ranks: ``CudaBackend`` (IPC slots, pipelined tree schedule) against
   cupy's NCCL all-reduce where NCCL can run (distinct GPUs; NCCL refuses ranks that share
   one) and against host staging (device -> host, ``MPI_Allreduce``, -> device), which always can.

3. With ``--loopback 2,4,8`` (rank 0, no MPI peers needed): the device executor's loopback mode,
   every virtual rank's blocks in one launch, against the schedule's HBM roofline
   (:mod:`.gpu_loopback`); the multi-process all-reduce is then left out.

Every figure is the median of ``--iters`` timed runs after warm-up, timed with CUDA events
(all-reduce: the slowest rank's median). Sizes are per-rank buffer bytes.
"""
from __future__ import annotations

import json
import statistics
from typing import Callable, Dict, List

import click

from ..sizes import SIZE_HELP, ByteSize

SIZES = "256KiB,4MiB,64MiB"


def _time(fn: Callable[[], None], iters: int, warmup: int = 3) -> float:
    """Median seconds of ``fn`` on the current stream, by CUDA events."""
    import cupy

    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, end) / 1e3)
    return statistics.median(times)


def kernel_rows(sizes: List[int], iters: int) -> List[Dict]:
    import cupy

    from ..backends.cuda.ipc import _MEMCPY_DEFAULT
    from ..backends.cuda.launch import reduce_ptrs
    from ..ops import ReduceOp

    rows = []
    for dtype in ("float32", "float16"):
        for size in sizes:
            n = size // cupy.dtype(dtype).itemsize
            a, b, out, out2 = (cupy.ones(n, dtype=dtype) for _ in range(4))
            stream = cupy.cuda.get_current_stream().ptr
            copy = _time(lambda: cupy.cuda.runtime.memcpyAsync(out.data.ptr, a.data.ptr, a.nbytes, _MEMCPY_DEFAULT,
                                                              stream), iters)
            red = _time(lambda: reduce_ptrs(dtype, ReduceOp.SUM, out.data.ptr, (a.data.ptr, b.data.ptr), n,
                                            a.itemsize), iters)
            fwd = _time(lambda: reduce_ptrs(dtype, ReduceOp.SUM, out.data.ptr, (a.data.ptr, b.data.ptr), n,
                                            a.itemsize, out2.data.ptr), iters)
            rows.append({"dtype": dtype, "bytes": size,
                         "copy_gbps": 2 * size / copy / 1e9,
                         "reduce_gbps": 3 * size / red / 1e9,
                         "reduce_forward_gbps": 4 * size / fwd / 1e9,
                         "reduce_vs_copy": (3 * size / red) / (2 * size / copy)})
    return rows


def _context(comm, schedule: str):
    """The runtime's own job set-up on ``comm``: the planner's trees on the first GPUs of an HGX
    H100 ("plan"), or a topology whose plans the chain schedules replace ("chain"); ranks may
    share a GPU either way (device ids are virtual)."""
    import dataclasses

    from ..config import get_config
    from ..runtime.standalone import standalone_context

    topology = "hgx-h100" if schedule == "plan" else f"cpu-host:{comm.size}"
    return standalone_context(comm, dataclasses.replace(get_config(), topology=topology))


def _chain_schedule_for(collective, root_device, nelems, chunk_elems, shard_counts=None, devices=()):
    from .hand_schedules import chain_allreduce_schedule

    if collective != "allreduce":
        from ..errors import PlanError

        raise PlanError(f"the benchmark's chain schedule serves all-reduce only, not {collective}")
    return chain_allreduce_schedule(devices, nelems, chunk_elems, nchannels=min(2, len(devices)))


def allreduce_rows(comm, sizes: List[int], iters: int, schedule: str) -> List[Dict]:
    import cupy
    from mpi4py import MPI

    from ..backends.cuda import CudaBackend
    from ..ops import ReduceOp

    ctx = _context(comm, schedule)
    kwargs = {}
    if schedule == "chain":
        kwargs["schedule_for"] = lambda *a, **kw: _chain_schedule_for(*a, devices=ctx.devices, **kw)
    backend = CudaBackend(ctx, **kwargs)
    nccl = _nccl_comm(comm, backend.device)
    rows = []
    try:
        with cupy.cuda.Device(backend.device):
            for size in sizes:
                n = size // 4
                buf = cupy.ones(n, dtype=cupy.float32)
                row = {"ranks": comm.size, "bytes": size}
                comm.Barrier()
                row["blinkflow_s"] = _slowest(comm, _time(lambda: backend.allreduce(buf, ReduceOp.SUM), iters))

                def staged():
                    host = cupy.asnumpy(buf)
                    comm.Allreduce(MPI.IN_PLACE, host, op=MPI.SUM)
                    buf.set(host)

                comm.Barrier()
                row["staged_mpi_s"] = _slowest(comm, _time(staged, iters))
                if nccl is not None:
                    from cupy.cuda import nccl as nccl_mod

                    comm.Barrier()
                    row["nccl_s"] = _slowest(comm, _time(lambda: nccl.allReduce(
                        buf.data.ptr, buf.data.ptr, n, nccl_mod.NCCL_FLOAT32, nccl_mod.NCCL_SUM,
                        cupy.cuda.get_current_stream().ptr), iters))
                for key in [k for k in row if k.endswith("_s")]:
                    row[key.replace("_s", "_busbw_gbps")] = 2 * (comm.size - 1) / comm.size * size / row[key] / 1e9
                rows.append(row)
    finally:
        backend.close()
    return rows


def _slowest(comm, seconds: float) -> float:
    from mpi4py import MPI

    return comm.allreduce(seconds, op=MPI.MAX)


def _nccl_comm(comm, device: int):
    """A cupy NCCL communicator, or None where NCCL is missing or ranks share a GPU."""
    from ..backends.cuda.device import gpus_distinct, nccl_available

    usable = nccl_available() and gpus_distinct(comm, device)
    if not all(comm.allgather(usable)):
        return None
    from cupy.cuda import nccl

    uid = comm.bcast(nccl.get_unique_id() if comm.rank == 0 else None, root=0)
    return nccl.NcclCommunicator(comm.size, uid, comm.rank)


@click.command(help=__doc__.split("\n\n")[0])
@click.option("--sizes", "size_list", type=ByteSize(many=True), default=SIZES, show_default=True,
              help=f"comma-separated buffer sizes ({SIZE_HELP})")
@click.option("--iters", default=20, show_default=True, type=click.IntRange(1))
@click.option("--schedule", type=click.Choice(["chain", "plan"]), default="chain", show_default=True,
              help="chain: two pipelined chains (no planner needed); plan: the planner's trees on an HGX H100 subset")
@click.option("--loopback", "loopback", default="", metavar="N,N,...",
              help="virtual rank counts of the device executor's loopback mode (one process, one launch)")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
def command(size_list: List[int], iters: int, schedule: str, loopback: str, as_json: bool):
    from ..backends.cuda.device import is_available

    if not is_available():
        raise click.ClickException("no CUDA device (or CuPy missing): pip install cupy-cuda12x on a GPU machine")
    from mpi4py import MPI

    try:
        counts = [int(c) for c in loopback.split(",") if c.strip()]
    except ValueError:
        raise click.BadParameter(f"--loopback takes virtual rank counts like 2,4,8, got {loopback!r}") from None
    if any(c < 1 or c > 8 for c in counts):
        raise click.BadParameter(f"--loopback: an HGX H100 has 1 to 8 GPUs, got {loopback!r}")
    comm = MPI.COMM_WORLD
    result = {"ranks": comm.size, "kernels": [], "allreduce": []}
    if comm.rank == 0:
        result["kernels"] = kernel_rows(size_list, iters)
    if counts:
        if comm.rank == 0:
            from .gpu_loopback import loopback_rows

            result["loopback"] = loopback_rows(counts, size_list, iters, _time)
    elif comm.size > 1:
        result["allreduce"] = allreduce_rows(comm, size_list, iters, schedule)
    if comm.rank != 0:
        return
    if as_json:
        click.echo(json.dumps(result, indent=2))
        return
    click.echo(f"{'dtype':8} {'bytes':>10} {'copy GB/s':>10} {'reduce GB/s':>12} {'reduce+fwd GB/s':>16} {'reduce/copy':>12}")
    for r in result["kernels"]:
        click.echo(f"{r['dtype']:8} {r['bytes']:>10} {r['copy_gbps']:>10.1f} {r['reduce_gbps']:>12.1f} "
                   f"{r['reduce_forward_gbps']:>16.1f} {r['reduce_vs_copy']:>12.2f}")
    if result.get("loopback"):
        from .gpu_loopback import print_rows

        print_rows(click.echo, result["loopback"])
    if result["allreduce"]:
        click.echo(f"\nall-reduce, {comm.size} ranks (busbw GB/s; ranks sharing a GPU share its bandwidth)")
        for r in result["allreduce"]:
            nccl = f"{r['nccl_busbw_gbps']:.1f}" if "nccl_busbw_gbps" in r else "n/a"
            click.echo(f"{r['bytes']:>10}  blinkflow {r['blinkflow_busbw_gbps']:.1f}  nccl {nccl}  "
                       f"staged-mpi {r['staged_mpi_busbw_gbps']:.1f}")
