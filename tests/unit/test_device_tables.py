"""Device tables: built from a rank's program as the kernel runs it, with a JSON round-trip."""
import dataclasses
import random

import pytest

from blinkflow.errors import ScheduleError
from blinkflow.schedule.deadlock import check_tables
from blinkflow.schedule.device_tables import RankTables, build_tables, tables_for
from blinkflow.schedule.device_tables import _tables as tables_in_order
from blinkflow.schedule.lower import lower
from blinkflow.schedule.program import compile_program
from blinkflow.bench.hand_schedules import chain_allreduce_schedule, direct_allgather_schedule

from plan_factory import plan_for, three_phase_plan


def _rank_of(schedule):
    return {d: r for r, d in enumerate(schedule.devices)}


def _programs(schedule, fuse_inputs=1):
    return [compile_program(schedule, d, _rank_of(schedule), fuse_inputs) for d in schedule.devices]


def _program_order_tables(program, window):
    return tables_in_order(program, range(len(program.actions)), window)


def _tables(schedule, window, fuse_inputs=1):
    tables = build_tables(schedule, _rank_of(schedule), window, fuse_inputs)
    return [(p, tables[p.rank]) for p in _programs(schedule, fuse_inputs)]


@pytest.mark.parametrize("fuse", [1, 64])
def test_save_load_round_trip(fuse):
    schedule = lower(three_phase_plan([[0, 1, 2], [3, 4, 5]], random.Random(3)), 997, 17)
    for program, tables in _tables(schedule, 4, fuse):
        again = RankTables.from_json(tables.to_json())
        assert again == tables
        assert again.nsteps >= len(program.actions)


def test_blocks_are_channels_and_every_transfer_has_its_connection_and_sequence():
    schedule = lower(plan_for("allreduce", range(5), random.Random(1)), 300, 7)
    for program, tables in _tables(schedule, 2):
        assert [b.channel for b in tables.blocks] == sorted({a.channel for a in program.actions})
        sent = {(c.peer, c.channel): [] for c in tables.sends}
        got = {(c.peer, c.channel): [] for c in tables.recvs}
        for block in tables.blocks:
            for s in block.steps:
                if s.send_conn >= 0:
                    c = tables.sends[s.send_conn]
                    assert c.channel == block.channel
                    sent[(c.peer, c.channel)].append(s.send_seq)
                for conn, seq in s.recvs:
                    c = tables.recvs[conn]
                    assert c.channel == block.channel
                    got[(c.peer, c.channel)].append(seq)
        # each connection's transfers appear once each, in order, in one block
        for c in tables.sends:
            assert sent[(c.peer, c.channel)] == list(range(c.transfers))
        for c in tables.recvs:
            assert got[(c.peer, c.channel)] == list(range(c.transfers))


def test_a_fused_reduction_is_one_step_receiving_every_input_in_combination_order():
    """One step, so its inputs are combined in one pass and rounded once, like the runner's."""
    schedule = lower(plan_for("reducescatter", range(4), random.Random(0)), 64, 64)
    fused = [(p, t) for p, t in _tables(schedule, 4, 64) if any(len(a.inputs) > 1 for a in p.actions)]
    assert fused, "a reduce-scatter root folds several children in one action"
    program, tables = fused[0]
    action = next(a for a in program.actions if len(a.inputs) > 1)
    block = next(b for b in tables.blocks if b.channel == action.channel)
    rows = [s for s in block.steps if (s.offset, s.count) == (action.offset, action.count) and s.recvs]
    assert len(rows) == 1 and rows[0].op == action.op
    assert [(tables.recvs[conn].peer, seq) for conn, seq in rows[0].recvs] == list(action.inputs)
    assert sum(len(b.steps) for b in tables.blocks) == len(program.actions)


def test_cross_channel_deps_are_progress_waits_on_posting_steps():
    schedule = lower(three_phase_plan([[0, 1], [2, 3]], random.Random(0)), 40, 5)
    waits = 0
    for program, tables in _tables(schedule, 1):
        for block in tables.blocks:
            for s in block.steps:
                for other, value in s.waits:
                    waits += 1
                    assert other != tables.blocks.index(block)
                    assert tables.blocks[other].steps[value - 1].posts_progress
    assert waits, "three-phase boundaries cross channels"


def test_tables_are_cached_with_the_schedule():
    schedule = chain_allreduce_schedule((0, 1, 2), 30, 4)
    program = _programs(schedule)[1]
    assert tables_for(program, _rank_of(schedule), 2) is tables_for(program, _rank_of(schedule), 2)
    assert tables_for(program, _rank_of(schedule), 3).window == 3
    assert tables_for(program, _rank_of(schedule), 3).rank == 1


def test_blocks_run_in_an_order_that_completes_where_program_order_deadlocks():
    """Programs list a one-hop all-gather's sends before its receives; blocks in that order, with
    one slot per connection, each wait for a peer that is still sending."""
    schedule = direct_allgather_schedule((0, 1, 2), ((0, 0, 8), (1, 8, 8), (2, 16, 8)), 24, 2)
    check_tables([t for _, t in _tables(schedule, 1)])
    in_program_order = [_program_order_tables(p, 1) for p in _programs(schedule)]
    with pytest.raises(ScheduleError, match="deadlock"):
        check_tables(in_program_order)


@pytest.mark.parametrize("window", [0, -1, 1.5, True])
def test_a_window_below_one_slot_is_refused(window):
    schedule = chain_allreduce_schedule((0, 1), 8, 4)
    with pytest.raises(ScheduleError, match="at least one slot"):
        build_tables(schedule, _rank_of(schedule), window)


def test_malformed_json_is_a_schedule_error():
    schedule = chain_allreduce_schedule((0, 1), 8, 4)
    d = build_tables(schedule, _rank_of(schedule), 2)[0].to_dict()
    with pytest.raises(ScheduleError, match="schema"):
        RankTables.from_dict(dict(d, schema=99))
    del d["blocks"]
    with pytest.raises(ScheduleError, match="malformed"):
        RankTables.from_dict(d)
