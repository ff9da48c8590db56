"""Lowering plans to schedules: every collective, every DGX-1 subset, switch boxes, two hosts;
each lowered schedule is proven by the symbolic checker."""
import itertools
import random

import pytest

from blinkflow.errors import PlanError, ScheduleError
from blinkflow.planner import Plan, Tree
from blinkflow.schedule.lower import lower
from blinkflow.schedule.ir import Schedule
from blinkflow.schedule.symbolic import check
from blinkflow.topology.presets import get_preset
from plan_factory import chain, plan_for, three_phase_plan

COLLECTIVES = ("broadcast", "reduce", "allgather", "reducescatter", "allreduce")


def _dgx1_subsets():
    for k in range(2, 9):
        yield from itertools.combinations(range(8), k)


@pytest.mark.parametrize("collective", COLLECTIVES)
def test_every_dgx1_subset_passes_the_checker(collective):
    rng = random.Random(collective)
    for subset in _dgx1_subsets():
        plan = plan_for(collective, subset, rng, root=rng.choice(subset))
        check(lower(plan, rng.randint(len(subset), 40), chunk_elems=rng.randint(1, 7)))


@pytest.mark.parametrize("preset", ["dgx2", "dgx-a100", "hgx-h100", "pcie-8gpu", "cpu-host:4"])
def test_switch_and_pcie_presets(preset):
    devices = get_preset(preset).compute_ids
    rng = random.Random(preset)
    for collective in COLLECTIVES:
        check(lower(plan_for(collective, devices, rng, root=devices[-1]), 3 * len(devices) + 1, chunk_elems=2))


@pytest.mark.parametrize("preset", ["2xdgx1-v100", "2xcpu-host:2", "3xcpu-host:3"])
def test_three_phase_multi_host(preset):
    topo = get_preset(preset)
    hosts = [list(topo.compute_on_host(h)) for h in topo.hosts]
    plan = three_phase_plan(hosts, random.Random(1))
    for nelems, chunk in ((0, 1), (1, 1), (7, 2), (101, 5), (1000, 64)):
        check(lower(plan, nelems, chunk_elems=chunk))


def test_chunks_pipeline_down_a_chain():
    plan = Plan("broadcast", "t", (0, 1, 2, 3), (Tree(0, 1.0, chain((0, 1, 2, 3))),), 1.0, 1.0, root=0)
    s = lower(plan, 100, chunk_elems=10)
    assert s.chunk_elems == 10
    assert [st.op for st in s.program(1)] == ["recv_send"] * 10
    assert [st.offset for st in s.program(3)] == list(range(0, 100, 10))
    # Each hop adds one round: the last device receives every chunk in round 3.
    assert {st.round for st in s.program(3)} == {3}


def test_allreduce_reduces_up_then_broadcasts_down_with_fused_ops():
    plan = Plan("allreduce", "t", (0, 1, 2), (Tree(0, 1.0, ((0, 1), (1, 2))),), 1.0, 1.0)
    s = lower(plan, 4, chunk_elems=4)
    assert [st.op for st in s.program(2)] == ["send", "recv"]
    assert [st.op for st in s.program(1)] == ["recv_reduce_send", "recv_send"]
    assert [st.op for st in s.program(0)] == ["recv_reduce", "send"]
    assert s.program(1)[1].deps == (0,)  # the final value overwrites what was sent up


def test_trees_get_aligned_ranges_and_own_channels():
    trees = (Tree(0, 0.25, ((0, 1),)), Tree(1, 0.75, ((1, 0),)))
    s = lower(Plan("allreduce", "t", (0, 1), trees, 1.0, 1.0), 100, chunk_elems=1000)
    sends = {(st.channel, st.offset, st.count) for st in s.program(1) if st.op == "send"}
    # 6 whole units of 16 elements: 1.5 -> 2 to tree 0 (ties to the first tree), 4 and the 4
    # elements after the last unit to tree 1.
    assert sends == {(0, 0, 32), (1, 32, 68)}


def test_trees_get_split_counts_ranges_without_alignment():
    trees = (Tree(0, 0.25, ((0, 1),)), Tree(1, 0.75, ((1, 0),)))
    s = lower(Plan("allreduce", "t", (0, 1), trees, 1.0, 1.0), 10, chunk_elems=100, align=1)
    sends = {(st.channel, st.offset, st.count) for st in s.program(1) if st.op == "send"}
    # tree 0 carries 2.5 -> 3 elements (largest remainder, ties to the first tree): device 1
    # reduces it up to 0, and broadcasts the 7 elements of tree 1, which it roots.
    assert sends == {(0, 0, 3), (1, 3, 7)}
    assert s.nchannels == 2


def test_lowering_is_deterministic_and_round_trips_json():
    plan = plan_for("allreduce", range(6), random.Random(3))
    a, b = lower(plan, 999, 13), lower(plan, 999, 13)
    assert a == b
    assert Schedule.from_dict(a.to_dict()) == a


def test_programs_are_sorted_by_round():
    s = lower(plan_for("allreduce", range(5), random.Random(2)), 200, 7)
    for _, steps in s.programs:
        assert [st.round for st in steps] == sorted(st.round for st in steps)


def test_allgather_uneven_shards():
    plan = plan_for("allgather", (0, 1, 2), random.Random(4))
    s = lower(plan, 10, chunk_elems=2, shard_counts=[5, 0, 5])
    assert s.shards == ((0, 0, 5), (1, 5, 0), (2, 5, 5))
    check(s)
    with pytest.raises(ScheduleError):
        lower(plan, 10, shard_counts=[5, 5])


@pytest.mark.parametrize("trees, what", [
    ((Tree(0, 1.0, ((0, 1),)),), "does not span"),
    ((Tree(0, 1.0, ((0, 1), (2, 1), (0, 2))),), "two parents"),
    ((Tree(0, 1.0, ((0, 1), (1, 9))),), "leaves the devices"),
    ((Tree(1, 1.0, ((1, 0), (1, 2))),), "rooted at 1"),
])
def test_bad_trees_are_plan_errors(trees, what):
    with pytest.raises(PlanError, match=what):
        lower(Plan("broadcast", "t", (0, 1, 2), trees, 1.0, 1.0, root=0), 10)


@pytest.mark.parametrize("nelems, chunk", [(-1, None), (1.5, None), (10, 0), (10, True)])
def test_bad_sizes_are_schedule_errors(nelems, chunk):
    plan = Plan("broadcast", "t", (0, 1), (Tree(0, 1.0, ((0, 1),)),), 1.0, 1.0, root=0)
    with pytest.raises(ScheduleError):
        lower(plan, nelems, chunk)


def test_three_phase_rejects_a_cross_group_on_the_wrong_device():
    plan = three_phase_plan([[0, 1], [2, 3]])
    bad = plan.cross[0].__class__(plan.cross[0].start, plan.cross[0].stop, (1, 3), plan.cross[1].plan)
    broken = Plan("allreduce", "t", plan.devices, (), 1.0, 1.0, intra=plan.intra, cross=(bad, plan.cross[1]))
    with pytest.raises(PlanError, match="reduced into device 0"):
        lower(broken, 10, align=1)
    with pytest.raises(PlanError, match="reduced into device 0"):
        lower(broken, 100)


# ---- the planner's own plans -----------------------------------------------------------------
@pytest.mark.parametrize("preset, collectives", [
    ("dgx1-v100", COLLECTIVES),
    ("dgx1-p100", COLLECTIVES),
])
def test_planner_plans_for_every_dgx1_subset_pass_the_checker(preset, collectives):
    from blinkflow.planner import make_plan
    topo = get_preset(preset)
    for collective in collectives:
        for k in range(2, 9):
            for subset in itertools.combinations(range(8), k):
                check(lower(make_plan(topo, collective, subset), 3 * k + 5, chunk_elems=2))


@pytest.mark.parametrize("preset", ["dgx2", "dgx-a100", "hgx-h100", "2xdgx1-v100", "2xcpu-host:2"])
def test_planner_plans_on_switches_and_two_hosts_pass_the_checker(preset):
    from blinkflow.planner import make_plan
    topo = get_preset(preset)
    collectives = COLLECTIVES if len(topo.hosts) == 1 else ("allreduce",)
    for collective in collectives:
        plan = make_plan(topo, collective)
        assert plan.is_three_phase == (len(topo.hosts) > 1)
        check(lower(plan, 1000, chunk_elems=37))
