"""What one rank alone does must end in a typed error (or the right result) on every rank of
the call, within the stall bound: a name submitted again while in flight, join() while a peer
waits in a process set's collective, remove_process_set or add_process_set on one rank (also with
a rank that comes to its call only after the others' calls were decided), a rank that leaves its
loop early, a rank whose script ends while the others go on in a process set. Run by
``test_one_rank_errors.py`` under mpirun at 2 and 3 ranks, with a stall shutdown of a few
seconds; each launch runs the case named on the command line (a stall shutdown ends the runtime,
so every case has a launch of its own) and reports through tests/harness.py.
"""
import sys
import time

import numpy as np

import blinkflow as bf
from blinkflow.runtime import api as rt
from harness import run_cases, skip

#: The stall shutdown the test sets, plus the cycles it takes the stop to reach every rank on a
#: machine shared with other jobs (never is the failure this bounds).
BOUND_S = 4.0 + 20.0
#: How late the late rank of the ``*_late`` cases comes to its call: the others' calls met on
#: the coordinator and were decided within a few cycles (milliseconds) of their submission.
LATE_S = 2.0
#: Set on the rank whose script is to end without ``shutdown()``: its exit hook stops the runtime.
LEAVES_BY_ITS_EXIT_HOOK = False


def _raises(error_type, fn, *needles):
    started = time.monotonic()
    try:
        fn()
    except error_type as e:
        for needle in needles:
            assert needle in str(e), f"{needle!r} not in: {e}"
        assert time.monotonic() - started < BOUND_S, f"took {time.monotonic() - started:.1f} s: {e}"
        return e
    raise AssertionError(f"no {error_type.__name__}")


def case_a_name_submitted_twice_on_one_rank(r, n):
    # Rank 0 submits 'dup' again while its first call is in flight; the others submit it once,
    # synchronize, and submit it again: every rank's second call fails naming rank 0.
    first = rt.allreduce_async(np.full(2, r + 1.0), op=bf.Sum, name="dup")
    if r == 0:
        second = rt.allreduce_async(np.ones(2), op=bf.Sum, name="dup")
    assert np.array_equal(rt.synchronize(first), np.full(2, n * (n + 1) / 2))
    if r != 0:
        second = rt.allreduce_async(np.ones(2), op=bf.Sum, name="dup")
    _raises(bf.DuplicateNameError, lambda: rt.synchronize(second), "'dup'", "rank 0",
            "while its first call was in flight")
    # Nothing is left behind: the name and the next collectives pair as they should.
    assert np.array_equal(bf.allreduce(np.ones(2), op=bf.Sum, name="dup"), np.full(2, float(n)))
    assert np.array_equal(bf.allreduce(np.ones(1), op=bf.Sum), np.full(1, float(n)))


def case_join_while_a_peer_waits_in_a_process_set(r, n):
    # Set {0, 1} (3 ranks or more: with 2 it would be the global set); rank 1 runs out of data
    # and joins while rank 0 still reduces in the set: rank 1 takes part with zeros, as join does
    # in the global set, and an op join cannot take part in fails on every member naming rank 1.
    if n < 3:
        skip("a two-rank process set other than the global set needs 3 ranks")
    pair = bf.add_process_set([0, 1])
    if r == 1:
        last = bf.join()
    elif r == 0:
        got = bf.allreduce(np.full(3, 5.0), op=bf.Sum, name="in.pair", process_set=pair)
        assert np.array_equal(got, np.full(3, 5.0)), got
        def max_in_pair():
            return bf.allreduce(np.ones(2), op=bf.Max, name="max.in.pair", process_set=pair)
        _raises(bf.TensorMismatchError, max_in_pair, "ranks [1] have joined")
        last = bf.join()
    else:
        last = bf.join()
    assert last == bf.allgather_object(last)[0]
    assert np.array_equal(bf.allreduce(np.ones(2), op=bf.Sum, name="after.join", process_set=pair) if r < 2
                          else np.full(2, 2.0), np.full(2, 2.0))
    assert bf.remove_process_set(pair)


def case_remove_process_set_on_one_rank(r, n):
    # Only rank 0 removes the set; the others go on to their next collective. Both calls fail at
    # once (a ProcessSetError: the stall would end them with ShutdownError) naming rank 0 and the
    # others; the runtime goes on: the set is still registered everywhere, the next collective pairs.
    alone = bf.add_process_set([0])
    others = "rank 1" if n == 2 else f"ranks {list(range(1, n))}"
    if r == 0:
        call = lambda: bf.remove_process_set(alone)  # noqa: E731
    else:
        call = lambda: bf.allreduce(np.ones(2), name="next.step")  # noqa: E731
    _raises(bf.ProcessSetError, call, "rank 0 called remove_process_set 'remove_process_set.noname.0'", others,
            "submitted", "'next.step'", "collective over every rank")
    assert alone.process_set_id is not None and bf.get_process_set_ids_and_ranks()[alone.process_set_id] == [0]
    assert np.array_equal(bf.allreduce(np.ones(2), op=bf.Sum, name="after.remove"), np.full(2, float(n)))


def case_add_process_set_on_one_rank(r, n):
    # The last rank adds a set alone while the others wait in a barrier: every rank's call fails at once.
    if r == n - 1:
        call = lambda: bf.add_process_set([0])  # noqa: E731
    else:
        call = lambda: bf.barrier()  # noqa: E731
    _raises(bf.ProcessSetError, call, f"rank {n - 1} called add_process_set", "barrier", "collective over every rank")
    assert bf.get_process_set_ids_and_ranks() == {0: list(range(n))}
    assert np.array_equal(bf.allreduce(np.ones(2), op=bf.Sum, name="after.add"), np.full(2, float(n)))


def case_add_process_set_on_one_rank_with_the_coordinator_late(r, n):
    # As above, but rank 0 (the coordinator) comes to its barrier only once every other rank has
    # had the error and moved on to its next collective: the error decided for the barrier's
    # name while rank 0 had not submitted it still reaches rank 0's barrier, at once.
    if n < 3:
        skip("needs a rank besides the late one that calls barrier() on time: 3 ranks")
    if r == n - 1:
        call = lambda: bf.add_process_set([0])  # noqa: E731
    else:
        call = lambda: bf.barrier()  # noqa: E731
    if r == 0:
        _wait_until_submitted_by_every_other_rank("after.add")
    _raises(bf.ProcessSetError, call, f"rank {n - 1} called add_process_set", "barrier", "collective over every rank")
    assert bf.get_process_set_ids_and_ranks() == {0: list(range(n))}
    assert np.array_equal(bf.allreduce(np.ones(2), op=bf.Sum, name="after.add"), np.full(2, float(n)))


def case_add_process_set_on_two_ranks_with_one_late(r, n):
    # Ranks 1 and 2 add a set, rank 0 calls barrier(); rank 1 (not the coordinator) comes to its
    # add_process_set LATE_S after the others: the error decided for that name when rank 2's call
    # met rank 0's barrier reaches rank 1's call too, at once.
    if n != 3:
        skip("needs a late rank, an on-time rank on each side: exactly 3 ranks")
    if r == 0:
        call = lambda: bf.barrier()  # noqa: E731
    else:
        call = lambda: bf.add_process_set([0])  # noqa: E731
    if r == 1:
        time.sleep(LATE_S)
    _raises(bf.ProcessSetError, call, "rank 2 called add_process_set", "barrier",
            "collective over every rank")
    assert bf.get_process_set_ids_and_ranks() == {0: list(range(n))}
    assert np.array_equal(bf.allreduce(np.ones(2), op=bf.Sum, name="after.add"), np.full(2, float(n)))


def _wait_until_submitted_by_every_other_rank(name):
    """On rank 0: wait until the coordinator holds ``name`` from every other rank (they reached
    their next call; this rank has not submitted it)."""
    table = rt.RUNTIME.engine.loop.negotiator.table
    deadline = time.monotonic() + BOUND_S
    while len(table.table.get(name, ())) < table.size - 1:
        assert time.monotonic() < deadline, f"the other ranks never submitted {name!r}: {table.missing()}"
        time.sleep(0.01)


def case_a_rank_whose_script_ends_while_the_others_use_a_set(r, n):
    # The last rank's script ends (its exit hook stops the runtime: the job's stop is one event
    # for every set, Horovod's rule) while the others go on in a set without it: their set's
    # calls raise ShutdownError naming it, like their global calls (not "rank 0 is not in the set").
    global LEAVES_BY_ITS_EXIT_HOOK
    rest = bf.add_process_set(list(range(n - 1)))
    if r == n - 1:
        LEAVES_BY_ITS_EXIT_HOOK = True
    else:
        said = f"rank {n - 1}: its process is exiting"
        error = _raises(bf.ShutdownError, lambda: bf.allreduce(np.ones(2), name="waits.for.the.last"), said)
        assert error.rank == n - 1, error.rank
        while rt.RUNTIME.engine.alive:  # the stopped runtime's thread ends (it stops every set)
            time.sleep(0.05)
        for call in (lambda: bf.allreduce(np.ones(2), name="in.the.set", process_set=rest),
                     lambda: rt.allreduce_async(np.ones(2), process_set=rest),
                     lambda: bf.barrier(process_set=rest),
                     lambda: bf.broadcast_object("x", root_rank=0, process_set=rest)):
            error = _raises(bf.ShutdownError, call, said)
            assert error.rank == n - 1, error.rank


def case_a_rank_that_leaves_its_loop_early(r, n):
    # The last rank has one batch fewer: every rank ends in a ShutdownError naming the ranks missing and saying
    # that join() (or equal shards) is the fix.
    steps = 3 if r == n - 1 else 4
    def loop():  # noqa: E306
        for step in range(steps):
            bf.allreduce(np.ones(2), name=f"grad.{step}")
        bf.allreduce(np.ones(1), name="epoch.end")
    _raises(bf.ShutdownError, loop, "stall", "missing on ranks", "blinkflow.join()", "equal length")


def main():
    bf.init()
    run_cases(globals(), bf.rank(), bf.size(), sys.argv[1:])
    if LEAVES_BY_ITS_EXIT_HOOK:
        return
    try:
        bf.shutdown()
    except bf.BlinkflowError:
        pass


if __name__ == "__main__":
    main()
