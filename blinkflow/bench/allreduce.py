"""``python -m blinkflow.bench allreduce``: blinkflow's all-reduce against MPI_Allreduce (in place
and out of place), measured in the same processes, rotating call by call so all see the same
machine load.

Run it under ``mpirun`` (or ``blinkrun``). For each size it reports the median over repetitions
of the slowest rank's time, the algorithm bandwidth (bytes / time) and the bus bandwidth
(algbw x 2(n-1)/n, nccl-tests' convention, comparable across rank counts). A second case sends
200 tensors of 16 KiB per step, like a ResNet's gradients: blinkflow's grouped all-reduce (fused by
the runtime into one collective) against one ``MPI_Allreduce`` per tensor.

``--via api`` goes through the public API (``blinkflow.allreduce``, ``grouped_allreduce``), as a
training script does; ``--via backend`` drives the CPU executor directly on its shared buffer.
"""
from __future__ import annotations

import json
import statistics
import time
from typing import Callable, Dict, List

import click
import numpy as np

from ..sizes import SIZE_HELP, ByteSize, format_size

SMALL_TENSORS = 200
SMALL_BYTES = 16 * 1024
#: Timed repetitions of the many-small-tensors case: a step takes a few milliseconds, and on the
#: development VM medians of 15 came out 3.6 and 1.3 ms in back-to-back runs.
SMALL_REPS = 40


def _reps(nbytes: int) -> int:
    """Enough repetitions for a stable median without minutes at 64 MiB: at least 25 (medians
    of 7 came out 2.4 and 3.9 ms at 16 MiB in back-to-back runs on the
    development VM), up to 200 for the sizes that take microseconds."""
    return int(min(200, max(25, 2e9 // max(nbytes, 1) // 8)))


def _timed(comm, fn: Callable[[], None]) -> float:
    """Seconds of one collective call on the slowest rank (all ranks start together)."""
    comm.Barrier()
    t0 = time.perf_counter()
    fn()
    return comm.allreduce(time.perf_counter() - t0, op=_mpi().MAX)


def _mpi():
    from ..config import apply_mpi_defaults

    apply_mpi_defaults()  # before MPI_Init: this benchmark may start MPI before blinkflow.init
    from mpi4py import MPI

    return MPI


def _row(name: str, nbytes: int, seconds: List[float], size: int) -> Dict:
    """Median time and bandwidths of one side; the quartiles show how noisy the machine was."""
    med = statistics.median(seconds)
    q1, _, q3 = statistics.quantiles(seconds, n=4, method="inclusive") if len(seconds) > 1 else (med, med, med)
    algbw = nbytes / med / 1e9
    return {"name": name, "bytes": nbytes, "seconds": med, "q1_seconds": q1, "q3_seconds": q3,
            "reps": len(seconds), "algbw_gbps": algbw,
            "busbw_gbps": algbw * 2 * (size - 1) / size if size > 1 else algbw}


class _Blinkflow:
    """The blinkflow side: the public API, or the CPU executor on its shared buffer."""

    def __init__(self, via: str, comm):
        self.via = via
        if via == "api":
            import blinkflow as bf

            bf.init(comm)
            self.bf = bf
        else:
            from ..backends.cpu import CpuBackend
            from ..runtime.standalone import standalone_context

            self.backend = CpuBackend(standalone_context(comm))

    def array(self, nelems: int) -> np.ndarray:
        """The array the calls run on, written before each. ``--via backend``: one shared buffer
        for every call; written again without asking ``buffer`` again, which is safe here only
        because every timed call ends in a collective over all ranks (``_timed``): no peer still
        reads it when the next call's input is written."""
        if self.via == "api":
            return np.ones(nelems, np.float32)
        return self.backend.buffer(nelems, np.float32)

    def allreduce(self, arr: np.ndarray) -> None:
        if self.via == "api":
            self.bf.allreduce(arr, op=self.bf.Sum, name="bench.allreduce")
        else:
            self.backend.allreduce(arr, _sum())

    def grouped(self, tensors: List[np.ndarray], flat: np.ndarray) -> None:
        if self.via == "api":
            self.bf.grouped_allreduce(tensors, op=self.bf.Sum, name="bench.grouped")
        else:  # what the runtime's fusion does: pack, one all-reduce, unpack
            n = tensors[0].shape[0]
            for i, t in enumerate(tensors):
                flat[i * n:(i + 1) * n] = t
            self.backend.allreduce(flat, _sum())
            for i, t in enumerate(tensors):
                t[...] = flat[i * n:(i + 1) * n]

    def close(self) -> None:
        if self.via == "api":
            self.bf.shutdown()
        else:
            self.backend.close()


def _sum():
    from ..ops import ReduceOp

    return ReduceOp.SUM


def measure(comm, sizes: List[int], via: str, small: bool = True, reps: int = 0) -> Dict:
    """Rotate blinkflow, in-place and out-of-place MPI_Allreduce call by call; return the report.

    MPI is measured both ways, as nccl-tests reports both: out of place (``recvbuf`` apart from
    ``sendbuf``) is what ``blinkflow.allreduce`` does (it returns a new array and never writes
    its input), in place is MPI's fastest mode (at sizes near the last-level cache it keeps the
    working set half as large)."""
    MPI = _mpi()
    n = comm.Get_size()
    ours = _Blinkflow(via, comm)
    results = []
    for nbytes in sizes:
        nelems = max(1, nbytes // 4)
        src = np.random.default_rng(comm.Get_rank()).uniform(-1, 1, nelems).astype(np.float32)
        a = ours.array(nelems)
        m = np.empty(nelems, np.float32)
        recv = np.empty(nelems, np.float32)
        times = {"blinkflow": [], "in_place": [], "out_of_place": []}
        calls = {
            # Each side's input is refreshed just before its own call, so every side starts with
            # it equally warm in cache (at 16 MiB per rank that decides who wins).
            "blinkflow": (lambda: a.__setitem__(Ellipsis, src), lambda: ours.allreduce(a)),
            "in_place": (lambda: m.__setitem__(Ellipsis, src), lambda: comm.Allreduce(MPI.IN_PLACE, m, op=MPI.SUM)),
            "out_of_place": (lambda: m.__setitem__(Ellipsis, src), lambda: comm.Allreduce(m, recv, op=MPI.SUM)),
        }
        order = list(calls)
        for rep in range((reps or _reps(nbytes)) + 1):
            for side in order[rep % 3:] + order[:rep % 3]:  # every side goes first, second and third
                refresh, call = calls[side]
                refresh()
                s = _timed(comm, call)
                if rep:  # the first round warms caches, windows and plans
                    times[side].append(s)
        results.append(_compare(nbytes, n, times, "MPI_Allreduce"))
    report = {"ranks": n, "via": via, "dtype": "float32", "allreduce": results}
    if small:
        report["small_tensors"] = _small_tensors(comm, ours, reps or SMALL_REPS)
    ours.close()
    return report


def _compare(nbytes: int, size: int, times: Dict[str, List[float]], mpi_name: str) -> Dict:
    ours = statistics.median(times["blinkflow"])
    return {"bytes": nbytes, "blinkflow": _row("blinkflow", nbytes, times["blinkflow"], size),
            "mpi": _row(f"{mpi_name} in place", nbytes, times["in_place"], size),
            "mpi_out_of_place": _row(f"{mpi_name} out of place", nbytes, times["out_of_place"], size),
            "speedup": statistics.median(times["in_place"]) / ours,
            "speedup_out_of_place": statistics.median(times["out_of_place"]) / ours}


def _small_tensors(comm, ours: _Blinkflow, reps: int) -> Dict:
    MPI = _mpi()
    n = SMALL_BYTES // 4
    tensors = [np.full(n, i, np.float32) for i in range(SMALL_TENSORS)]
    outputs = [np.empty_like(t) for t in tensors]
    flat = ours.array(n * SMALL_TENSORS) if ours.via == "backend" else None
    times = {"blinkflow": [], "in_place": [], "out_of_place": []}

    def in_place():
        for t in tensors:
            comm.Allreduce(MPI.IN_PLACE, t, op=MPI.SUM)

    def out_of_place():
        for t, o in zip(tensors, outputs):
            comm.Allreduce(t, o, op=MPI.SUM)

    calls = {"blinkflow": lambda: ours.grouped(tensors, flat), "in_place": in_place, "out_of_place": out_of_place}
    order = list(calls)
    for rep in range(reps + 1):
        for side in order[rep % 3:] + order[:rep % 3]:
            s = _timed(comm, calls[side])
            if rep:
                times[side].append(s)
    report = _compare(SMALL_BYTES * SMALL_TENSORS, comm.Get_size(), times, "MPI_Allreduce per tensor")
    report.update(tensors=SMALL_TENSORS, tensor_bytes=SMALL_BYTES)
    report["blinkflow"]["name"] = "blinkflow grouped"
    return report


def _print_table(report: Dict) -> None:
    print(f"all-reduce float32, {report['ranks']} ranks, blinkflow via {report['via']} (median of the slowest rank); "
          "MPI_Allreduce in place and out of place")
    print(f"{'size':>10} {'blinkflow ms':>13} {'busbw':>7} {'MPI in-place ms':>16} {'busbw':>7} {'speedup':>8} "
          f"{'MPI out-of-place ms':>20} {'busbw':>7} {'speedup':>8}")
    for r in report["allreduce"]:
        b, m, o = r["blinkflow"], r["mpi"], r["mpi_out_of_place"]
        print(f"{format_size(r['bytes']):>10} {b['seconds'] * 1e3:13.3f} {b['busbw_gbps']:7.2f} {m['seconds'] * 1e3:16.3f} "
              f"{m['busbw_gbps']:7.2f} {r['speedup']:7.2f}x {o['seconds'] * 1e3:20.3f} {o['busbw_gbps']:7.2f} "
              f"{r['speedup_out_of_place']:7.2f}x")
    s = report.get("small_tensors")
    if s:
        print(f"{s['tensors']} x {format_size(s['tensor_bytes'])}: blinkflow grouped {s['blinkflow']['seconds'] * 1e3:.3f} ms; "
              f"one MPI_Allreduce per tensor in place {s['mpi']['seconds'] * 1e3:.3f} ms ({s['speedup']:.2f}x), "
              f"out of place {s['mpi_out_of_place']['seconds'] * 1e3:.3f} ms ({s['speedup_out_of_place']:.2f}x)")


@click.command(help="blinkflow all-reduce vs MPI_Allreduce in the same processes (run under mpirun).")
@click.option("--sizes", "sizes_b", type=ByteSize(many=True), default="4KiB,1MiB,16MiB,64MiB", show_default=True,
              help=f"comma-separated buffer sizes ({SIZE_HELP})")
@click.option("--via", type=click.Choice(["auto", "api", "backend"]), default="auto", show_default=True,
              help="blinkflow through the public API or the CPU executor directly (auto: the API when the runtime is installed)")
@click.option("--no-small", is_flag=True, help="skip the 200 x 16 KiB many-tensors case")
@click.option("--reps", type=click.IntRange(min=0), default=0, help="timed repetitions per case (0: by size)")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object (rank 0)")
def command(sizes_b: List[int], via: str, no_small: bool, reps: int, as_json: bool) -> None:
    if via == "auto":
        import importlib.util

        via = "api" if importlib.util.find_spec("blinkflow.runtime.api") is not None else "backend"
    comm = _mpi().COMM_WORLD
    report = measure(comm, sizes_b, via, small=not no_small, reps=reps)
    if comm.Get_rank() == 0:
        if as_json:
            print(json.dumps(report, indent=2))
        else:
            _print_table(report)
