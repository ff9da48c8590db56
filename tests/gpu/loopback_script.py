"""The device executor's loopback mode (every virtual rank's blocks in one launch on one GPU)
against the host-driven runner, bitwise, on the planner's trees of an HGX H100 at the virtual
rank counts given; then a table that waits forever, aborted by the deadline.

Run as a plain process (no MPI), a case script of tests/harness.py: under the CPU suite's fake
CuPy (tests/mpi/test_device_executor_fake_cupy.py), whose interpreter kernel runs blinkflow's numpy
emulator per block, and on a GPU (tests/gpu/run_on_gpu_machine.sh), where the kernel runs. Each
case checks one collective, dtype and op at every virtual rank count given.

argv: [NRANKS ...] [CASE ...]; the environment's WATCHDOG_S (60 by default) is each launch's
deadline, which the prepared GPU run sets inside its step's time limit.

The runner is the schedule's one issue loop over thread ranks (tests/unit/test_runner.py), its
reductions folding an action's inputs as the cuda runner's fused kernel does
(tests/kernel_reference.py), so any difference in rounding order shows in the last bits. Two
calls per shape with different inputs: counters continue across launches.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, os.pardir), os.path.join(HERE, os.pardir, "unit")]

import cupy  # noqa: E402
import numpy as np  # noqa: E402

from blinkflow.bench.loopback_executor import LoopbackExecutor, loopback_tables  # noqa: E402
from blinkflow.errors import BackendError  # noqa: E402
from blinkflow.ops import ReduceOp  # noqa: E402
from blinkflow.planner import make_plan  # noqa: E402
from blinkflow.schedule.device_tables import BlockTable, DeviceStep, RankTables  # noqa: E402
from blinkflow.schedule.lower import lower  # noqa: E402
from blinkflow.topology.presets import get_preset  # noqa: E402
from harness import run_cases, skip  # noqa: E402
from test_device_emulator import fused_reduction  # noqa: E402
from test_runner import run_ranks  # noqa: E402

TOPOLOGY = get_preset("hgx-h100")
OPS = {"sum": ReduceOp.SUM, "max": ReduceOp.MAX, None: None}
try:
    from ml_dtypes import bfloat16
except ImportError:  # bfloat16 arrays come from ml_dtypes (TensorFlow's)
    bfloat16 = None
#: The virtual rank counts every case runs at (the leading numbers of the command line), and the
#: cases to run (the names after them; none: every case).
COUNTS = [int(a) for a in sys.argv[1:] if a.isdigit()] or [2, 4, 8]
ONLY = [a for a in sys.argv[1:] if not a.isdigit()]
WATCHDOG_S = float(os.environ.get("WATCHDOG_S", "60"))


def inputs_of(nranks, calls, nelems, dtype, seed):
    rng = np.random.default_rng(seed)
    return [[(rng.standard_normal(nelems) * 100).astype(dtype) for _ in range(calls)] for _ in range(nranks)]


def on_device(rows):
    """Rows of numpy arrays as one [nranks, nelems] cupy array (bfloat16 as its bits: CuPy has none)."""
    stacked = np.stack(rows)
    return cupy.asarray(stacked.view(np.uint16) if stacked.dtype.name == "bfloat16" else stacked)


def check(nranks, collective, dtype, op, nelems=1000, chunk=64):
    devices = TOPOLOGY.compute_ids[:nranks]
    plan = make_plan(TOPOLOGY, collective, devices=list(devices), root=devices[-1] if collective == "broadcast" else None)
    schedule = lower(plan, nelems + nranks, chunk)
    inputs = inputs_of(nranks, 2, schedule.nelems, dtype, nranks)
    want = run_ranks([schedule, schedule], inputs, nslots=4, op=op or "sum", fuse=7,
                     reduce_all=fused_reduction(op) if op else None)
    name = np.dtype(dtype).name
    executor = LoopbackExecutor(cupy, loopback_tables(schedule), name, OPS[op], timeout=WATCHDOG_S)
    try:
        for call in range(2):
            bufs = on_device([inputs[r][call] for r in range(nranks)])
            executor.run(bufs)
            got = cupy.asnumpy(bufs)
            for r in range(nranks):
                if got[r].tobytes() != want[(r, call)].view(got.dtype).tobytes():
                    bad = np.flatnonzero(got[r] != want[(r, call)].view(got.dtype))[:5]
                    raise AssertionError(f"{nranks} ranks {collective} {name} {op} call {call}: rank {r} differs "
                                         f"from the runner at {bad.tolist()}")
    finally:
        executor.close()
    print(f"{nranks} virtual ranks {collective} {name} {op}: {executor.nblocks} blocks, 2 calls", flush=True)


def at_every_count(collective, dtype, op):
    for nranks in COUNTS:
        check(nranks, collective, dtype, op)


def case_allreduce_float32_sum(rank, size):
    at_every_count("allreduce", np.float32, "sum")


def case_allreduce_float16_sum(rank, size):
    at_every_count("allreduce", np.float16, "sum")


def case_allreduce_float64_max(rank, size):
    at_every_count("allreduce", np.float64, "max")


def case_reducescatter_float16_sum(rank, size):
    at_every_count("reducescatter", np.float16, "sum")


def case_broadcast_float32(rank, size):
    at_every_count("broadcast", np.float32, None)


def case_allreduce_bfloat16_sum(rank, size):
    if bfloat16 is None:
        skip("no bfloat16 arrays: ml_dtypes (installed with TensorFlow) is missing")
    at_every_count("allreduce", bfloat16, "sum")


def case_a_table_that_waits_forever_is_aborted_by_the_deadline(rank, size):
    """Two blocks waiting on each other's progress: the watchdog aborts the launch, the error
    names both blocks and the counter each waited for, and the executor refuses every later call."""
    t = RankTables(0, 8, 1, 4, (BlockTable(0, (DeviceStep("copy", 0, 2, src_offset=4, waits=((1, 1),),
                                                          posts_progress=True),)),
                                BlockTable(1, (DeviceStep("copy", 2, 2, src_offset=6, waits=((0, 1),),
                                                          posts_progress=True),))), (), ())
    executor = LoopbackExecutor(cupy, [t], "float32", ReduceOp.SUM, timeout=1.0)
    named = ("not done within 1 s and was aborted: call 0: 2 block(s) stuck: "
             "block 0 (virtual rank 0) before its step 0: block 1's progress at 0, waiting for 1; "
             "block 1 (virtual rank 0) before its step 0: block 0's progress at 0, waiting for 1")
    try:
        for expected in (named, "stopped after an earlier failure"):
            try:
                executor.run(cupy.zeros((1, 8), dtype=cupy.float32))
            except BackendError as e:
                assert expected in str(e), f"expected {expected!r}, got {e}"
            else:
                raise AssertionError(f"the launch returned; expected a BackendError saying {expected!r}")
    finally:
        executor.close()


if __name__ == "__main__":
    run_cases(globals(), 0, 1, only=ONLY)
