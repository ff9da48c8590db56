"""The negotiation protocol on simulated ranks (threads sharing a fake communicator): the
corner cases of the response cache, and of errors decided before a rank made its call, that are
hard to hit through timing under mpirun."""
import threading
import time

from blinkflow.runtime import negotiation
from blinkflow.runtime.messages import Kind, Request, Response
from blinkflow.runtime.negotiation import Negotiator, Waiting
from blinkflow.runtime.response_cache import ResponseCache
from fake_comm import FakeComm, ThreadWorld


def entry(name, shape=(4,)):
    """A request as the state's queue drains it: with its submission time."""
    return submitted(Request(name, Kind.ALLREDUCE, "float32", shape))


def submitted(request):
    return request, time.monotonic()


def run_ranks(size, script, report_after=(None, None, None)):
    """Run ``script(rank, step)`` on ``size`` threads; ``step(new_entries)`` runs one cycle and
    applies it as the executor would, returning the responses."""
    world = ThreadWorld(size)
    results, errors = {}, []

    def main(rank):
        cache = ResponseCache(4, rank)
        negotiator = Negotiator(FakeComm(world, rank), rank, size, cache, report_after[rank], band="BAND")
        original = cache.evict

        def evict(bit):
            original(bit)
            negotiator.on_evict(bit)

        cache.evict = evict

        def step(new=()):
            responses, _ = negotiator.cycle(list(new), None)
            for response in responses:
                negotiator.pending.pop(response.name, None)
                cache.put(response)
            return responses

        try:
            results[rank] = script(rank, step, negotiator)
        except BaseException as e:  # noqa: BLE001 - surfaced by the test
            errors.append(e)
            world.barrier.abort()

    threads = [threading.Thread(target=main, args=(r,)) for r in range(size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results


def names(responses):
    return [(r.kind.name, r.name) for r in responses]


def test_steady_state_is_the_bit_vector_alone():
    def script(rank, step, negotiator):
        assert names(step([entry("x")])) == [("ALLREDUCE", "x")]
        slow = negotiator.stats["slow_paths"]
        out = [names(step([entry("x")])) for _ in range(3)]
        assert negotiator.stats["slow_paths"] == slow
        return out

    assert run_ranks(2, script) == {r: [[("ALLREDUCE", "x")]] * 3 for r in range(2)}


def test_a_reported_hit_executed_through_the_bits_leaves_no_trace_on_the_coordinator():
    """Rank 0 reports its hit (as after half the stall time); rank 1's copy arrives a cycle later
    unreported; the name runs through the bits and must vanish from rank 0's table."""
    def script(rank, step, negotiator):
        step([entry("x")])
        first = step([entry("x")] if rank == 0 else [])  # rank 0 reports, rank 1 has nothing
        second = step([entry("x")] if rank == 1 else [])
        if negotiator.table is not None:
            assert negotiator.table.table == {}
        return names(first), names(second)

    assert run_ranks(2, script, report_after=(-1.0, None)) == {r: ([], [("ALLREDUCE", "x")]) for r in range(2)}


def test_a_changed_shape_under_a_cached_name_is_a_mismatch_on_every_rank():
    def script(rank, step, negotiator):
        step([entry("x")])
        out = names(step([entry("x", (5,) if rank == 1 else (4,))]))  # rank 1: invalid bit
        out += names(step())  # rank 0 re-sends in full: the coordinator sees both
        out += names(step([entry("x")]))  # the name works again afterwards
        return out

    want = [("ERROR", "x"), ("ALLREDUCE", "x")]
    assert run_ranks(2, script) == {0: want, 1: want}


def test_lru_eviction_resets_waiting_hits_so_a_reused_bit_never_means_two_names():
    """Capacity 4: rank 0 waits on cached 'a' while five new names evict it; rank 1 submits 'a'
    only afterwards. 'a' must still run exactly once, as 'a'."""
    def script(rank, step, negotiator):
        step([entry("a")])
        ran = []
        ran += names(step([entry("a")] if rank == 0 else []))
        for i in range(5):
            ran += names(step([entry(f"n{i}")]))
        ran += names(step([entry("a")] if rank == 1 else []))
        ran += names(step())
        return [n for n in ran if n[1] == "a"]

    assert run_ranks(2, script) == {0: [("ALLREDUCE", "a")], 1: [("ALLREDUCE", "a")]}


def test_the_coordinators_settings_reach_every_rank_in_the_same_cycle():
    """The autotuner's settings ride on the slow path even when every tensor is a cache hit, and
    every rank sees them after the same responses."""
    def script(rank, step, negotiator):
        step([entry("x")])
        step([entry("x")])  # now a cache hit
        if rank == 0:
            negotiator.proposed_settings = ("fusion", 123)
        slow = negotiator.stats["slow_paths"]
        out = names(step([entry("x")]))
        seen = negotiator.agreed_settings
        assert negotiator.stats["slow_paths"] == slow + 1
        step([entry("x")])
        assert negotiator.agreed_settings is None and negotiator.proposed_settings is None
        return out, seen

    assert run_ranks(3, script, report_after=(None,) * 3) == {r: ([("ALLREDUCE", "x")], ("fusion", 123)) for r in range(3)}


def test_an_error_decided_before_a_rank_made_its_call_answers_that_call_when_it_comes():
    """Rank 1 waits in a barrier and rank 2 adds a set (out of order: both fail at once); rank 0
    comes to its barrier only afterwards. Its call gets the error at once, without negotiating
    (the others have gone on), and it keeps nothing else of that verdict."""
    barrier = Request("barrier.noname.0", Kind.BARRIER, "uint8", ())
    add = Request("add_process_set.noname.0", Kind.ADD_PROCESS_SET, "uint8", (0,))

    def script(rank, step, negotiator):
        first = sorted(names(step({1: [submitted(barrier)], 2: [submitted(add)]}.get(rank, []))))
        owed = sorted(negotiator.owed)
        slow = negotiator.stats["slow_paths"]
        late = names(step([submitted(barrier)] if rank == 0 else []))
        assert negotiator.stats["slow_paths"] == slow
        assert negotiator.pending == {}
        return first, owed, late, dict(negotiator.owed)

    both = sorted([("ERROR", barrier.name), ("ERROR", add.name)])
    assert run_ranks(3, script) == {0: (both, sorted([barrier.name, add.name]), [("ERROR", barrier.name)], {}),
                                    1: (both, [], [], {}), 2: (both, [], [], {})}


def test_a_rank_that_made_one_of_the_verdicts_calls_is_owed_none_and_what_it_keeps_is_bounded():
    def error(name):
        return Response(Kind.ERROR, name, error="out of order", error_type="ProcessSetError", owed_to=(0, 1))

    negotiator = Negotiator(None, 1, 3, ResponseCache(4, 1), None, band="BAND")
    negotiator.pending["a"] = Waiting(*entry("a"))  # a cache hit it had not reported: its call of the verdict
    negotiator._keep_owed([error("a"), error("b")])
    assert dict(negotiator.owed) == {}
    negotiator.pending.clear()
    negotiator._keep_owed([error(f"n{i}") for i in range(negotiation.OWED_KEPT + 10)])
    assert list(negotiator.owed) == [f"n{i}" for i in range(10, negotiation.OWED_KEPT + 10)]
