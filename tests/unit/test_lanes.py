"""Several blocks per (peer, tree): ``schedule.lanes.split_lanes`` and the geometry that sizes it
(``schedule.device_geometry``).

A split schedule is still a schedule of its collective (structure, symbolic postcondition,
deadlock-free tables) on every preset at odd sizes; its lanes' slices tile each step's range and
start on 16-byte boundaries of every dtype; the emulated device protocol on its tables is bitwise
the runner on the unsplit schedule (three-phase plans included); the geometry's numbers follow
from Little's law, and the kernel's unroll is the geometry's."""
import random
import re

import numpy as np
import pytest

from blinkflow.backends.cuda import device_executor
from blinkflow.errors import ScheduleError
from blinkflow.kernels import source_path
from blinkflow.planner import make_plan
from blinkflow.schedule import device_geometry as geo
from blinkflow.schedule.deadlock import check_tables
from blinkflow.schedule.device_tables import all_tables, build_tables
from blinkflow.schedule.lanes import GRANULE, lane_bounds, split_lanes
from blinkflow.schedule.lower import lower
from blinkflow.schedule.symbolic import check
from blinkflow.topology.presets import get_preset

from plan_factory import three_phase_plan
from test_device_emulator import OPS, _emulate, _inputs, fused_reduction
from test_runner import run_ranks

PRESET_DEVICES = [("hgx-h100", 2), ("hgx-h100", 8), ("dgx1-v100", 3), ("dgx1-v100", 4), ("dgx1-p100", 4),
                  ("dgx-a100", 4), ("pcie-8gpu", 4)]
COLLECTIVES = ["allreduce", "broadcast", "allgather", "reducescatter"]


def _schedule(preset, n, collective, nelems, chunk):
    topology = get_preset(preset)
    devices = list(topology.compute_ids[:n])
    return lower(make_plan(topology, collective, devices=devices), nelems, chunk)


@pytest.mark.parametrize("preset,n", PRESET_DEVICES, ids=[f"{p}-{n}" for p, n in PRESET_DEVICES])
@pytest.mark.parametrize("collective", COLLECTIVES)
def test_a_split_schedule_is_its_collective_and_cannot_deadlock(preset, n, collective):
    schedule = _schedule(preset, n, collective, 1003, 61)
    for lanes in (2, 3):
        split = split_lanes(schedule, lanes)
        split.validate()
        check(split)
        assert split.nchannels == schedule.nchannels * lanes
        rank_of = {d: r for r, d in enumerate(schedule.devices)}
        check_tables(list(build_tables(schedule, rank_of, 2, 7, lanes).values()))


def test_lanes_tile_each_step_on_16_byte_boundaries():
    schedule = split_lanes(_schedule("hgx-h100", 4, "allreduce", 4099, 777), 3)
    original = dict(_schedule("hgx-h100", 4, "allreduce", 4099, 777).programs)
    for device, steps in schedule.programs:
        for i, s in enumerate(original[device]):
            parts = steps[3 * i:3 * i + 3]
            assert [p.channel for p in parts] == [s.channel * 3 + lane for lane in range(3)]
            assert sum(p.count for p in parts) == s.count
            starts = [p.offset - s.offset for p in parts]
            assert starts[0] == 0 and all(x % GRANULE == 0 for x in starts)
            assert all(p.offset + p.count == q.offset for p, q in zip(parts, parts[1:]) if q.count)
    for itemsize in (1, 2, 4, 8):
        assert (GRANULE * itemsize) % 16 == 0
    assert lane_bounds(5, 4) == [(0, 5), (5, 0), (5, 0), (5, 0)]
    with pytest.raises(ScheduleError, match="at least one lane"):
        split_lanes(schedule, 0)


@pytest.mark.parametrize("nranks,lanes", [(2, 3), (4, 2)])
def test_lanes_emulated_bitwise_the_runner(nranks, lanes):
    schedule = _schedule("hgx-h100", nranks, "allreduce", 517, 64)
    split = split_lanes(schedule, lanes)
    for dtype, op in ((np.float32, "sum"), (np.float16, "sum")):
        inputs = _inputs(schedule, 2, dtype, nranks)
        want = run_ranks([schedule, schedule], inputs, nslots=2, op=op, fuse=7, reduce_all=fused_reduction(op))
        got = _emulate([split, split], inputs, 2, 7, op)
        for key, value in want.items():
            assert got[key].tobytes() == value.tobytes(), (key, dtype, op)


def test_three_phase_lanes_emulated_bitwise_the_runner():
    schedule = lower(three_phase_plan([[0, 1], [2, 3]], random.Random(1)), 301, 29)
    split = split_lanes(schedule, 2)
    check(split)
    inputs = _inputs(schedule, 1, np.float32, 5)
    want = run_ranks([schedule], inputs, nslots=2, op="sum", fuse=64, reduce_all=fused_reduction("sum"))
    got = _emulate([split], inputs, 2, 64, "sum")
    for key, value in want.items():
        assert got[key].tobytes() == value.tobytes(), key


def test_littles_law_sizes_the_blocks():
    assert device_executor.THREADS == geo.THREADS >= 512
    assert geo.bytes_in_flight() == geo.THREADS * geo.UNROLL * 16 == 32768
    assert geo.block_gbps() == pytest.approx(32.768)
    # an H100 port shared by 8 trees: 56 GB/s per tree x 1 us needs 56 KB in flight, 2 blocks
    assert geo.blocks_per_channel(450 / 8) == 2
    assert geo.blocks_per_channel(450 / 2) == 7
    assert geo.blocks_per_channel(10.0) == 1
    assert geo.blocks_per_channel(1e6) == geo.MAX_LANES
    big = _schedule("hgx-h100", 8, "allreduce", 1 << 22, 1 << 18)
    assert geo.lanes_for(big) == 2
    small = _schedule("hgx-h100", 8, "allreduce", 4096, 512)
    assert geo.lanes_for(small) == 1  # chunk too small to give a second lane a vector per thread
    rank_of = {d: r for r, d in enumerate(big.devices)}
    tables = all_tables(big, rank_of, 2, 7)
    assert all(len(t.blocks) == 2 * big.nchannels for t in tables.values())


def test_the_kernels_unroll_is_the_geometrys():
    text = source_path("common.cuh").read_text()
    assert int(re.search(r"#define BF_UNROLL (\d+)", text).group(1)) == geo.UNROLL
