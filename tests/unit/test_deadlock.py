"""The deadlock-freedom check of device tables: hand-made tables that deadlock are refused with
the stuck blocks named; every shape the unit tests lower passes.

One slot per connection is the tightest window: more slots only let senders run further ahead
(a send waits for ``head >= seq + 1 - window``), so tables that complete with one slot complete
with any number, and the lowered shapes are checked at window 1."""
import itertools
import random

import pytest

from blinkflow.errors import ScheduleError
from blinkflow.planner import make_plan
from blinkflow.schedule.deadlock import check_schedule, check_tables
from blinkflow.schedule.device_tables import BlockTable, Connection, DeviceStep, RankTables
from blinkflow.schedule.lower import lower
from blinkflow.bench.hand_schedules import (chain_allreduce_schedule, chain_broadcast_schedule,
                                       direct_allgather_schedule, direct_reducescatter_schedule)
from blinkflow.topology.presets import get_preset

from plan_factory import plan_for, three_phase_plan


def _rank(rank, window, blocks, sends=(), recvs=()):
    return RankTables(rank=rank, nelems=8, window=window, slot_elems=4,
                      blocks=tuple(BlockTable(c, tuple(steps)) for c, steps in enumerate(blocks)),
                      sends=tuple(sends), recvs=tuple(recvs))


def _exchange(window):
    """Ranks 0 and 1 each send two chunks to the other before receiving any."""
    def program(me, peer):
        return _rank(me, window, [[DeviceStep("send", 0, 4, send_conn=0, send_seq=0),
                                   DeviceStep("send", 4, 4, send_conn=0, send_seq=1),
                                   DeviceStep("recv", 0, 4, recvs=((0, 0),)),
                                   DeviceStep("recv", 4, 4, recvs=((0, 1),))]],
                     sends=[Connection(peer, 0, 2)], recvs=[Connection(peer, 0, 2)])
    return [program(0, 1), program(1, 0)]


def test_sends_ordered_before_receives_deadlock_with_one_slot():
    with pytest.raises(ScheduleError, match=r"deadlock: rank 0 block 0 \(channel 0\) step 1 \(send \[4, 8\)\) "
                                            r"waits for rank 1 to free a slot"):
        check_tables(_exchange(window=1))


def test_the_same_tables_complete_with_two_slots():
    check_tables(_exchange(window=2))


def test_two_blocks_waiting_on_each_others_progress_deadlock():
    tables = _rank(0, 1, [[DeviceStep("copy", 0, 2, src_offset=4, waits=((1, 1),), posts_progress=True)],
                          [DeviceStep("copy", 2, 2, src_offset=6, waits=((0, 1),), posts_progress=True)]])
    with pytest.raises(ScheduleError, match=r"rank 0 block 0 .* waits for block 1's progress to reach 1 "
                                            r"\(it is 0\); rank 0 block 1 .* waits for block 0's progress"):
        check_tables([tables])


def _fused_root(fused):
    """Rank 0 reduces a chunk from rank 1 and one from rank 2, then a second chunk from rank 1;
    rank 1 sends both chunks to rank 0 before it feeds rank 2, which forwards to rank 0. With
    one slot, rank 1's second chunk needs rank 0 to free the first; a step that holds it until
    rank 2's chunk arrives never does (rank 2 waits on rank 1), one step per input does."""
    first = ([DeviceStep("recv_reduce", 0, 4, recvs=((0, 0), (1, 0)))] if fused else
             [DeviceStep("recv_reduce", 0, 4, recvs=((0, 0),)), DeviceStep("recv_reduce", 0, 4, recvs=((1, 0),))])
    root = _rank(0, 1, [first + [DeviceStep("recv_reduce", 4, 4, recvs=((0, 1),))]],
                 recvs=[Connection(1, 0, 2), Connection(2, 0, 1)])
    middle = _rank(1, 1, [[DeviceStep("send", 0, 4, send_conn=0, send_seq=0),
                           DeviceStep("send", 4, 4, send_conn=0, send_seq=1),
                           DeviceStep("send", 0, 4, send_conn=1, send_seq=0)]],
                   sends=[Connection(0, 0, 2), Connection(2, 0, 1)])
    leaf = _rank(2, 1, [[DeviceStep("recv_send", 0, 4, recvs=((0, 0),), send_conn=0, send_seq=0)]],
                 sends=[Connection(0, 0, 1)], recvs=[Connection(1, 0, 1)])
    return [root, middle, leaf]


def test_a_step_of_several_inputs_holds_every_slot_until_its_last_input():
    check_tables(_fused_root(fused=False))
    with pytest.raises(ScheduleError, match=r"rank 0 block 0 \(channel 0\) step 0 \(recv_reduce \[0, 4\)\) waits for "
                                            r"rank 2's transfer #0"):
        check_tables(_fused_root(fused=True))


def test_connection_ends_must_agree():
    a, b = _exchange(window=2)
    with pytest.raises(ScheduleError, match="same window"):
        check_tables([a, _rank(1, 3, [list(b.blocks[0].steps)], b.sends, b.recvs)])
    with pytest.raises(ScheduleError, match="receives 0"):
        check_tables([a, _rank(1, 2, [[]])])


# ---- every shape the unit tests lower --------------------------------------------------------
COLLECTIVES = ("broadcast", "reduce", "allreduce", "allgather", "reducescatter")


@pytest.mark.parametrize("fuse", [1, 64])
@pytest.mark.parametrize("collective", COLLECTIVES)
def test_hand_made_plans_of_every_collective(collective, fuse):
    rng = random.Random(7)
    for n in (2, 3, 5):
        for _ in range(3):
            plan = plan_for(collective, range(n), rng, root=n - 1 if collective in ("broadcast", "reduce") else None)
            check_schedule(lower(plan, rng.randint(n, 60), rng.randint(1, 7)), 1, fuse)


@pytest.mark.parametrize("hosts", [[[0, 1], [2, 3]], [[0, 1, 2], [3, 4, 5]], [[0, 1], [2, 3], [4, 5]]])
def test_three_phase(hosts):
    for chunk in (1, 3, 8):
        check_schedule(lower(three_phase_plan(hosts, random.Random(chunk)), 97, chunk), 1, 64)


@pytest.mark.parametrize("preset", ["dgx1-v100", "dgx1-p100", "dgx-a100", "hgx-h100", "pcie-8gpu", "cpu-host:4",
                                    "2xdgx1-v100", "2xcpu-host:2"])
def test_planner_plans_on_presets(preset):
    topo = get_preset(preset)
    devices = topo.compute_ids
    for collective in COLLECTIVES:
        root = devices[-1] if collective in ("broadcast", "reduce") else None
        try:
            plan = make_plan(topo, collective, root=root)
        except Exception as e:  # a collective the planner has no plan of on several hosts
            if "host" in str(e):
                continue
            raise
        check_schedule(lower(plan, 1000, 37), 1, 64)


def test_dgx1_subsets():
    topo = get_preset("dgx1-v100")
    for subset in list(itertools.combinations(range(8), 3))[:12] + list(itertools.combinations(range(8), 5))[:6]:
        for collective in ("allreduce", "allgather", "broadcast"):
            root = subset[0] if collective == "broadcast" else None
            check_schedule(lower(make_plan(topo, collective, list(subset), root=root), 200, 9), 1, 64)


def test_hand_made_shapes():
    devices = (0, 1, 2, 3)
    shards = ((0, 0, 5), (1, 5, 0), (2, 5, 7), (3, 12, 3))
    for s in (chain_allreduce_schedule(devices, 50, 4, nchannels=2), chain_broadcast_schedule(devices, 2, 50, 4),
              direct_allgather_schedule(devices, shards, 15, 2), direct_reducescatter_schedule(devices, shards, 15, 2)):
        check_schedule(s, 1, 64)
