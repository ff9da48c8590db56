"""The symbolic checker accepts lowered schedules and rejects every kind of broken one."""
import dataclasses
import random

import pytest
from hypothesis import given, settings, strategies as st

from blinkflow.errors import ScheduleError
from blinkflow.planner import Plan, Tree
from blinkflow.schedule.lower import lower
from blinkflow.schedule.ir import Schedule, Step
from blinkflow.schedule.symbolic import check
from plan_factory import plan_for

COLLECTIVES = ("broadcast", "reduce", "allgather", "reducescatter", "allreduce")


def _replace(s: Schedule, device: int, index: int, **changes) -> Schedule:
    programs = []
    for d, steps in s.programs:
        if d == device:
            steps = tuple(dataclasses.replace(x, **changes) if i == index else x for i, x in enumerate(steps))
        programs.append((d, steps))
    return dataclasses.replace(s, programs=tuple(programs))


def _chain_allreduce(nelems=4, chunk=4):
    return lower(Plan("allreduce", "t", (0, 1, 2), (Tree(0, 1.0, ((0, 1), (1, 2))),), 1.0, 1.0), nelems, chunk)


def test_a_lowered_schedule_passes():
    check(_chain_allreduce())


def test_a_plain_receive_instead_of_a_reduction_loses_a_contribution():
    s = _chain_allreduce()
    broken = _replace(s, 1, 0, op="recv_send")  # device 1 forwards 2's data without adding its own
    with pytest.raises(ScheduleError, match="postcondition fails: device 0 .* 1x device 0, 1x device 2"):
        check(broken)


def test_a_contribution_counted_twice_is_rejected():
    # Device 2 sends its value up twice; device 1 adds both copies. Rounds and deps are legal,
    # so only the postcondition can catch it.
    steps = {
        2: (Step("send", 0, 4, peer=1), Step("send", 0, 4, peer=1),
            Step("recv", 0, 4, peer=1, deps=(0, 1), round=6)),
        1: (Step("recv_reduce", 0, 4, peer=2, round=1),
            Step("recv_reduce_send", 0, 4, peer=2, send_to=0, deps=(0,), round=2),
            Step("recv_send", 0, 4, peer=0, send_to=2, deps=(1,), round=5)),
        0: (Step("recv_reduce", 0, 4, peer=1, round=3), Step("send", 0, 4, peer=1, deps=(0,), round=4)),
    }
    s = Schedule("allreduce", (0, 1, 2), 4, 4, tuple((d, steps[d]) for d in (0, 1, 2)))
    with pytest.raises(ScheduleError, match="2x device 2"):
        check(s)


def test_a_missing_step_is_rejected():
    s = _chain_allreduce()
    programs = tuple((d, steps[:-1] if d == 2 else steps) for d, steps in s.programs)
    with pytest.raises(ScheduleError, match="receives 0|has no receive|receives"):
        check(dataclasses.replace(s, programs=programs))


def test_a_receive_in_the_same_round_as_its_send_is_rejected():
    s = _chain_allreduce()
    with pytest.raises(ScheduleError, match="round of its send"):
        check(_replace(s, 1, 0, round=0))


def test_a_missing_dep_is_a_hazard():
    s = _chain_allreduce()
    with pytest.raises(ScheduleError, match="no deps order them"):
        check(_replace(s, 1, 1, deps=()))


def test_overwriting_a_range_before_it_is_received_is_rejected():
    # Device 2 sends [0,4) up in round 0 and device 1 receives it in round 1; moving 2's final
    # receive to round 1 would let a pulling executor read the new value.
    s = _chain_allreduce()
    with pytest.raises(ScheduleError):
        check(_replace(s, 2, 1, round=1))


def test_broadcast_of_undefined_data_is_rejected():
    s = lower(Plan("broadcast", "t", (0, 1), (Tree(0, 1.0, ((0, 1),)),), 1.0, 1.0, root=0), 4, 4)
    with pytest.raises(ScheduleError, match="before any data arrived"):
        check(dataclasses.replace(s, root=1))


def test_allgather_shards_must_tile():
    s = lower(plan_for("allgather", (0, 1), random.Random(0)), 4, 4)
    with pytest.raises(ScheduleError, match="tile"):
        check(dataclasses.replace(s, shards=((0, 0, 2), (1, 3, 1))))


# ---- property tests: random strongly connected graphs, trees that follow their arcs ----------
@st.composite
def strongly_connected(draw):
    n = draw(st.integers(1, 7))
    ids = draw(st.permutations(list(range(12))))[:n]
    arcs = {(ids[i], ids[(i + 1) % n]) for i in range(n) if n > 1}  # a Hamiltonian cycle
    extra = draw(st.lists(st.tuples(st.sampled_from(ids), st.sampled_from(ids)), max_size=3 * n))
    arcs |= {(a, b) for a, b in extra if a != b}
    return ids, sorted(arcs)


def _arborescence(ids, arcs, root, rng):
    """A random spanning out-tree along the graph's arcs (exists: the graph is strongly connected)."""
    inside, edges = {root}, []
    while len(inside) < len(ids):
        frontier = [(a, b) for a, b in arcs if a in inside and b not in inside]
        a, b = rng.choice(frontier)
        edges.append((a, b))
        inside.add(b)
    return tuple(edges)


@settings(max_examples=60, deadline=None)
@given(graph=strongly_connected(), collective=st.sampled_from(COLLECTIVES), seed=st.integers(0, 10**6),
       nelems=st.integers(0, 60), chunk=st.integers(1, 9))
def test_random_graphs_and_trees(graph, collective, seed, nelems, chunk):
    ids, arcs = graph
    rng = random.Random(seed)
    root = rng.choice(ids)
    if collective in ("broadcast", "reduce"):
        roots = [root] * rng.randint(1, 3)
    elif collective in ("allgather", "reducescatter"):
        roots = ids
    else:
        roots = rng.sample(ids, rng.randint(1, len(ids)))
    trees = tuple(Tree(r, rng.uniform(0.1, 1.0), _arborescence(ids, arcs, r, rng)) for r in roots)
    plan = Plan(collective, "random", tuple(ids), trees, 1.0, 1.0, root=root)
    check(lower(plan, nelems, chunk))


def _two_device_schedule(*steps1, nchannels=1):
    """Device 1 runs ``steps1``; device 0 receives [0, 4) from it in round 1."""
    return Schedule("broadcast", (0, 1), 8, 4, ((0, (Step("recv", 0, 4, peer=1, round=1),)), (1, tuple(steps1))),
                    root=1, nchannels=nchannels)


def test_overwriting_a_sent_range_before_its_receive_round_is_rejected():
    # The test above trips an earlier rule; this one reaches the overwrite rule itself.
    s = _two_device_schedule(Step("send", 0, 4, peer=0, round=0),
                             Step("copy", 0, 4, src_offset=4, deps=(0,), round=1))
    with pytest.raises(ScheduleError, match="overwrites elements its step 0 sent"):
        check(s)
    with pytest.raises(ScheduleError, match="postcondition"):  # after the receive round: only [4, 8) is missing
        check(_replace(s, 1, 1, round=2))


@pytest.mark.parametrize("channel", [-1, 1])
def test_a_channel_outside_the_schedule_is_rejected(channel):
    # The GPU executor indexes receive slots by channel: -1 would address another sender's slot.
    s = _two_device_schedule(Step("send", 0, 4, peer=0, channel=channel, round=0))
    s = dataclasses.replace(s, programs=((0, (Step("recv", 0, 4, peer=1, channel=channel, round=1),)), s.programs[1]))
    with pytest.raises(ScheduleError, match=f"channel {channel} outside"):
        check(s)


@pytest.mark.parametrize("offset, src_offset, what", [(0, -2, "inside the buffer"), (2, 4, "overlaps")])
def test_a_copy_must_read_inside_the_buffer_and_not_overlap_its_target(offset, src_offset, what):
    s = _two_device_schedule(Step("send", 0, 4, peer=0, round=0),
                             Step("copy", offset, 4, src_offset=src_offset, deps=(0,), round=2))
    with pytest.raises(ScheduleError, match=what):
        check(s)


def test_a_program_out_of_round_order_is_rejected():
    # Device 1 sends [4, 8) in round 0 and [0, 4) in round 1, but lists them the other way round.
    s = _two_device_schedule(Step("send", 0, 4, peer=0, round=1), Step("send", 4, 4, peer=0, round=0))
    s = dataclasses.replace(s, programs=((0, (Step("recv", 0, 4, peer=1, round=2), Step("recv", 4, 4, peer=1, round=2))),
                                         s.programs[1]))
    with pytest.raises(ScheduleError, match="sorted by round"):
        check(s)
