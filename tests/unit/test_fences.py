"""The coordinator's rule for add/remove_process_set called at different places on different ranks
(blinkflow/runtime/fences.py): which waiting names can never be ready."""
import dataclasses

from blinkflow.runtime.coordinator import MessageTable
from blinkflow.runtime.fences import out_of_order
from blinkflow.runtime.messages import Kind, Request

REMOVE = Request("remove_process_set.noname.0", Kind.REMOVE_PROCESS_SET, "uint8", (), root=1)
ADD = Request("add_process_set.noname.0", Kind.ADD_PROCESS_SET, "uint8", (0,))
STEP = Request("next.step", Kind.ALLREDUCE, "float64", (2,))


def test_a_fresh_name_the_fenced_rank_lacks_fails_with_the_fence():
    table = {REMOVE.name: {0: REMOVE}, STEP.name: {1: STEP, 2: STEP}}
    errors = out_of_order(table, {(REMOVE.name, 0): 10.0}, (0, 1, 2), now=10.0, report_after_s=0.5)
    assert set(errors) == {REMOVE.name, STEP.name}
    assert "allreduce 'next.step' was submitted by ranks [1, 2] while rank 0 called remove_process_set " \
           "'remove_process_set.noname.0' first" in errors[STEP.name]
    assert errors[REMOVE.name].startswith("rank 0 called remove_process_set 'remove_process_set.noname.0', while "
                                          "ranks [1, 2] submitted allreduce 'next.step' instead")
    assert "collective over every rank" in errors[REMOVE.name]


def test_a_name_the_fenced_rank_has_or_a_fence_every_rank_called_is_no_error():
    assert out_of_order({REMOVE.name: {0: REMOVE}, STEP.name: {0: STEP, 1: STEP}}, {}, (0, 1), 1.0, 0.5) == {}
    assert out_of_order({REMOVE.name: {0: REMOVE, 1: REMOVE}}, {}, (0, 1), 1.0, 0.5) == {}
    assert out_of_order({STEP.name: {1: STEP}}, {}, (0, 1), 1.0, 0.5) == {}  # nobody fenced: the stall's case


def test_a_late_reported_cache_hit_waits_until_the_fence_would_have_reported_it():
    # A hit is reported only after waiting report_after_s: the fenced rank's own report of it
    # may still come, until its fence has waited twice that.
    late = dataclasses.replace(STEP, waited=0.6)
    table = {REMOVE.name: {0: REMOVE}, STEP.name: {1: late}}
    assert out_of_order(table, {(REMOVE.name, 0): 10.0}, (0, 1), now=10.5, report_after_s=0.5) == {}
    assert set(out_of_order(table, {(REMOVE.name, 0): 10.0}, (0, 1), now=11.0, report_after_s=0.5)) == \
        {REMOVE.name, STEP.name}


def test_different_fences_fail_each_other():
    errors = out_of_order({REMOVE.name: {0: REMOVE}, ADD.name: {1: ADD}}, {}, (0, 1), 1.0, 0.5)
    assert set(errors) == {REMOVE.name, ADD.name}
    assert "rank 1 called add_process_set 'add_process_set.noname.0'" in errors[REMOVE.name]


def test_the_message_table_answers_every_rank_of_both_calls_with_a_process_set_error():
    table = MessageTable(3, report_after_s=0.5)
    table.add(0, [REMOVE])
    assert table.pop_ready() == []  # nothing yet says rank 0 is alone
    table.add(1, [STEP])
    table.add(2, [STEP])
    responses = {r.name: r for r in table.pop_ready()}
    assert set(responses) == {REMOVE.name, STEP.name}
    assert all(r.kind is Kind.ERROR and r.error_type == "ProcessSetError" for r in responses.values())
    assert responses[STEP.name].requests == (None, STEP, STEP)
    assert table.table == {} and table.fenced_at == {}


def test_the_errors_are_owed_to_the_ranks_that_made_none_of_the_calls():
    # Rank 1 waits in a barrier, rank 2 adds a set, ranks 0 and 3 have not called either yet:
    # both errors are owed to ranks 0 and 3 (whichever call they make next), to nobody else.
    barrier = Request("barrier.noname.0", Kind.BARRIER, "uint8", ())
    table = MessageTable(4, report_after_s=0.5)
    table.add(1, [barrier])
    table.add(2, [ADD])
    responses = {r.name: r for r in table.pop_ready()}
    assert set(responses) == {barrier.name, ADD.name}
    assert {r.owed_to for r in responses.values()} == {(0, 3)}
    table.add(0, [STEP])  # a name on the table from every rank but a fenced one: no one is owed it
    table.add(1, [STEP])
    table.add(2, [REMOVE])
    table.add(3, [STEP])
    assert [(r.name, r.owed_to) for r in table.pop_ready()] == [(STEP.name, ()), (REMOVE.name, ())]
