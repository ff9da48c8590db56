"""Every tree range, chunk and ring slot is 16-byte aligned, for every preset, odd sizes and every
itemsize: a GPU kernel moves aligned spans with 16-byte vector loads (a misaligned span falls back
to scalar loads). The symbolic checker still proves every aligned schedule."""
import pytest

from blinkflow.backends.device_abi import aligned_slot_elems, encode
from blinkflow.config import Config
from blinkflow.planner import make_plan
from blinkflow.schedule.device_tables import tables_for
from blinkflow.schedule.lower import ALIGN_BYTES, SPAN_ALIGN_ELEMS, aligned_split, lower
from blinkflow.schedule.policy import Capabilities, Choice, choose
from blinkflow.schedule.program import compile_program
from blinkflow.schedule.symbolic import check
from blinkflow.topology.presets import get_preset, preset_names

ITEMSIZES = (1, 2, 4, 8)
ODD_SIZES = (1, 17, 4099, 100003)
PRESETS = [p for p in preset_names() if p != "cpu-host"] + ["cpu-host:3", "2xdgx1-v100", "2xcpu-host:3"]


def _misaligned(schedule, itemsize):
    """Steps whose buffer offset is not on a 16-byte boundary."""
    return [(d, st.op, st.offset) for d, prog in schedule.programs for st in prog
            if st.count and (st.offset * itemsize) % ALIGN_BYTES]


@pytest.mark.parametrize("preset", PRESETS)
def test_every_span_and_chunk_is_16_byte_aligned_on_every_preset(preset):
    topo = get_preset(preset)
    collectives = ("allreduce", "broadcast", "allgather", "reducescatter") if len(topo.hosts) == 1 else ("allreduce",)
    caps = Capabilities("cuda", device_executor=True)
    for collective in collectives:
        plan = make_plan(topo, collective)
        for nbytes_elems in ODD_SIZES:
            for itemsize in ITEMSIZES:
                # The chunk a job really lowers with: the policy's, and an odd configured one.
                for config in (Config(), Config(chunk_bytes=10000), Config(algorithm="device")):
                    choice = choose(collective, nbytes_elems * itemsize, itemsize, None, config, caps,
                                    ntrees=len(plan.trees) or 1)
                    chunk = choice.chunk_elems(itemsize)
                    assert chunk % SPAN_ALIGN_ELEMS == 0
                    shards = None
                    if collective in ("allgather", "reducescatter"):
                        # Shards are the caller's (rows per rank); aligned ones, the last odd.
                        shards = aligned_split([1.0] * len(plan.devices), 0, nbytes_elems)
                    schedule = lower(plan, nbytes_elems, chunk, shard_counts=shards)
                    assert not _misaligned(schedule, itemsize), (collective, nbytes_elems, itemsize)
                    if itemsize == 4 and config.chunk_bytes:
                        check(schedule)  # the aligned split still computes the collective


@pytest.mark.parametrize("preset", ["dgx1-v100", "hgx-h100", "2xdgx1-v100"])
def test_device_ring_slots_are_16_byte_aligned(preset):
    topo = get_preset(preset)
    plan = make_plan(topo, "allreduce")
    schedule = lower(plan, 1000003, 4099)  # an odd chunk: odd transfers
    rank_of = {d: r for r, d in enumerate(plan.devices)}
    for device in plan.devices[:3]:
        program = compile_program(schedule, device, rank_of)
        enc = encode(tables_for(program, rank_of, 4))
        # A slot holds every transfer of its connection (with lanes, a lane's share of a chunk).
        assert enc.slot_elems >= max(max(row) for row in enc.transfer_elems() if row)
        for itemsize in ITEMSIZES:
            assert (enc.slot_elems * itemsize) % ALIGN_BYTES == 0


def test_aligned_split_gives_the_remainder_to_the_last_range():
    resnet = aligned_split([1] * 8, 0, 25557032)
    assert sum(resnet) == 25557032 and all(c % 16 == 0 for c in resnet[:-1]) and resnet[-1] % 16 == 8
    assert max(resnet) - min(resnet) <= 16 + 8
    assert aligned_split([0.25, 0.75], 0, 10) == [0, 10]
    assert aligned_split([1, 1], 5, 3) == [3, 0]
    assert sum(aligned_split([0.3, 0.3, 0.4], 7, 12345, 4)) == 12345
    assert aligned_split([1, 1], 0, 10, align=1) == [5, 5]
    assert aligned_slot_elems(0) == SPAN_ALIGN_ELEMS and aligned_slot_elems(17) == 2 * SPAN_ALIGN_ELEMS


def test_resnet50_float32_over_eight_trees_starts_every_tree_aligned():
    """The case element-granular splitting got wrong: 25,557,032 float32 over 8 equal trees."""
    topo = get_preset("hgx-h100")
    plan = make_plan(topo, "allreduce")
    choice = Choice("device", 1 << 20)
    schedule = lower(plan, 25557032, choice.chunk_elems(4))
    assert not _misaligned(schedule, 2)
