"""The device executor's protocol, emulated (one thread per rank and block): bitwise the host
runner's results for every dtype, float16 and bfloat16 included, across calls (counters
continue), and a hung table aborts every block.

The runner here folds an action's inputs the way the cuda runner's fused kernel does
(``kernel_reference.reference``: half and bfloat16 accumulate in float and round once), so a
device table that rounded at other points would differ in the last bits."""
import random

import numpy as np
import pytest

from kernel_reference import reference
from blinkflow.ops import ReduceOp

from blinkflow.errors import BackendError, ScheduleError
from blinkflow.backends.device_emulator import EmulatedLoopback, run_emulated
from blinkflow.planner import make_plan
from blinkflow.topology.presets import get_preset
from blinkflow.schedule.device_tables import BlockTable, DeviceStep, RankTables, build_tables
from blinkflow.schedule.lower import lower

from plan_factory import plan_for, three_phase_plan
from test_runner import run_ranks

OPS = {"sum": np.add, "max": np.maximum}
REDUCE_OPS = {"sum": ReduceOp.SUM, "max": ReduceOp.MAX}


def _bfloat16():
    return pytest.importorskip("ml_dtypes", reason="bfloat16 arrays come from ml_dtypes (TensorFlow's)").bfloat16


def _dtypes():
    """(dtype, op) pairs every emulator test runs: float16 and bfloat16 sums are where rounding
    points show."""
    return ((np.float32, "sum"), (np.float16, "sum"), (_bfloat16(), "sum"), (np.int64, "max"))


def fused_reduction(op):
    """The cuda runner's fused reduction of an action: ``local (op) chunk_1 (op) chunk_2 ...`` by
    the kernels' definition (the thread runner's slots hold float64 copies of the chunks)."""
    def reduce_all(local, chunks):
        dtype = local.dtype
        if dtype.name == "bfloat16":
            bits = reference("bfloat16", REDUCE_OPS[op], [local.view(np.uint16)] +
                             [np.asarray(c).astype(dtype).view(np.uint16) for c in chunks])
            return bits.view(dtype)
        return reference(dtype.name, REDUCE_OPS[op], [local] + [np.asarray(c).astype(dtype) for c in chunks])
    return reduce_all


def _inputs(schedule, ncalls, dtype, seed):
    rng = np.random.default_rng(seed)
    return [[(rng.standard_normal(schedule.nelems) * 100).astype(dtype) for _ in range(ncalls)]
            for _ in schedule.devices]


def _emulate(schedules, inputs, window, fuse, op):
    memory, out = None, {}
    for call, schedule in enumerate(schedules):
        rank_of = {d: r for r, d in enumerate(schedule.devices)}
        tables = build_tables(schedule, rank_of, window, fuse)
        bufs = [inputs[r][call].copy() for r in range(len(schedule.devices))]
        memory = run_emulated([tables[r] for r in range(len(bufs))], bufs, OPS[op], memory)
        out.update({(r, call): b for r, b in enumerate(bufs)})
    return out


@pytest.mark.parametrize("collective", ["allreduce", "broadcast", "reduce", "allgather", "reducescatter"])
@pytest.mark.parametrize("nranks", [1, 2, 4])
@pytest.mark.parametrize("window,fuse", [(1, 1), (4, 64)])
def test_bitwise_the_runners_result(collective, nranks, window, fuse):
    rng = random.Random(nranks)
    plan = plan_for(collective, range(nranks), rng, root=nranks - 1 if collective in ("broadcast", "reduce") else None)
    if nranks == 1 and collective != "allreduce":
        pytest.skip("one rank moves no data; its plan is the all-reduce's")
    schedule = lower(plan, 257, 16)
    for dtype, op in _dtypes():
        inputs = _inputs(schedule, 2, dtype, nranks)
        want = run_ranks([schedule, schedule], inputs, nslots=window, op=op, fuse=fuse, reduce_all=fused_reduction(op))
        got = _emulate([schedule, schedule], inputs, window, fuse, op)
        for key, value in want.items():
            assert got[key].tobytes() == value.tobytes(), (key, dtype, op)


@pytest.mark.parametrize("hosts", [[[0, 1], [2, 3]], [[0, 1, 2], [3, 4, 5]]])
def test_two_hosts_three_phase_bitwise(hosts):
    schedule = lower(three_phase_plan(hosts, random.Random(1)), 301, 13)
    for dtype, op in _dtypes():
        inputs = _inputs(schedule, 1, dtype, 5)
        want = run_ranks([schedule], inputs, nslots=2, op=op, fuse=64, reduce_all=fused_reduction(op))
        got = _emulate([schedule], inputs, 2, 64, op)
        for key, value in want.items():
            assert got[key].tobytes() == value.tobytes(), (key, dtype, op)


def test_a_table_that_waits_forever_aborts_every_block():
    t = RankTables(0, 8, 1, 4, (BlockTable(0, (DeviceStep("copy", 0, 2, src_offset=4, waits=((1, 1),)),)),
                                BlockTable(1, (DeviceStep("copy", 2, 2, src_offset=6, waits=((0, 1),)),))), (), ())
    with pytest.raises(BackendError, match="not done within 0.5 s"):
        run_emulated([t], [np.zeros(8, np.float32)], np.add, timeout=0.5)


@pytest.mark.parametrize("nranks", [2, 4, 8])
def test_loopback_launch_bitwise_the_runners_result(nranks):
    """Every virtual rank's blocks in one launch (rings and counters in one memory block, each
    rank's buffer a row of one array), two calls, on the planner's HGX H100 trees."""
    topology = get_preset("hgx-h100")
    devices = list(topology.compute_ids[:nranks])
    schedule = lower(make_plan(topology, "allreduce", devices=devices), 300, 16)
    tables = build_tables(schedule, {d: r for r, d in enumerate(devices)}, 2, 7)
    for dtype, op in _dtypes():
        inputs = _inputs(schedule, 2, dtype, nranks)
        want = run_ranks([schedule, schedule], inputs, nslots=2, op=op, fuse=7, reduce_all=fused_reduction(op))
        loopback = EmulatedLoopback([tables[r] for r in range(nranks)], dtype)
        for call in range(2):
            bufs = np.stack([inputs[r][call] for r in range(nranks)])
            loopback.run(bufs, OPS[op])
            for r in range(nranks):
                assert bufs[r].tobytes() == want[(r, call)].tobytes(), (r, call, dtype, op)


def test_a_loopback_launch_needs_its_ranks_in_order_and_one_row_each():
    schedule = lower(plan_for("allreduce", range(2), random.Random(0)), 40, 8)
    tables = build_tables(schedule, {d: r for r, d in enumerate(schedule.devices)}, 2)
    with pytest.raises(ScheduleError, match="ranks 0..1 in order"):
        EmulatedLoopback([tables[1], tables[0]], np.float32)
    with pytest.raises(BackendError, match=r"contiguous \[2, 40\] array"):
        EmulatedLoopback([tables[0], tables[1]], np.float32).run(np.zeros((2, 39), np.float32), np.add)
