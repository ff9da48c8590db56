"""Process sets (issue 17): every collective on a set, static and dynamic sets, sets of one rank,
two disjoint sets and overlapping sets reducing at once in random interleavings, a set removed
mid-run (with a call in flight), errors that name the set, and a set's plan on its own devices.

Run by ``test_process_sets.py`` under mpirun at 2 and 3 ranks (and at 4 on a DGX-1 topology for
the plan case). ``init(process_sets=[evens, odds])`` registers two sets at start; each rank can
compute every rank's input, so results are checked against numpy. Each case reports through the
test harness (tests/harness.py).
"""
import os
import random
import sys
import time

import numpy as np

import blinkflow as bf
from blinkflow.runtime import api as rt
from harness import run_cases, skip

EVEN, ODD = None, None


def mine(r, n):
    """(this rank's static set, its ranks)."""
    return (EVEN, list(range(0, n, 2))) if r % 2 == 0 else (ODD, list(range(1, n, 2)))


def value(q, shape=(5,), dtype="float64", salt=0):
    return (np.arange(int(np.prod(shape))).reshape(shape) % 7 + 3 * q + salt).astype(dtype)


def expect_error(kind, call, *hints):
    try:
        call()
    except kind as e:
        for hint in hints:
            assert hint in str(e), (hint, str(e))
        return e
    raise AssertionError(f"no {kind.__name__} (wanted one saying {hints})")


def case_static_sets_registered(r, n):
    assert (EVEN.process_set_id, ODD.process_set_id) == (1, 2), (EVEN, ODD)
    ids = rt.get_process_set_ids_and_ranks()
    assert ids == {0: list(range(n)), 1: list(range(0, n, 2)), 2: list(range(1, n, 2))}, ids
    assert bf.global_process_set.ranks == list(range(n)) and bf.global_process_set.size() == n
    this, ranks = mine(r, n)
    assert this.included() and this.size() == len(ranks) and this.rank() == ranks.index(r)
    other = ODD if this is EVEN else EVEN
    assert not other.included()
    expect_error(bf.ProcessSetError, other.rank, f"rank {r} is not part of")
    assert isinstance(bf.ProcessSetError("x"), ValueError)


def case_every_collective_on_a_set(r, n):
    this, ranks = mine(r, n)
    k, me = len(ranks), ranks.index(r)
    for dtype in ("float64", "float32", "int32", "float16"):
        got = bf.allreduce(value(r, (3, 4), dtype), op=bf.Sum, process_set=this)
        assert np.array_equal(got, sum(value(q, (3, 4), dtype) for q in ranks).astype(dtype)), (dtype, got)
    got = bf.allreduce(value(r), process_set=this)  # Average over the set, not the job
    assert np.allclose(got, sum(value(q) for q in ranks) / k), got
    group = bf.grouped_allreduce([value(r), value(r, (2,), "int64")], op=bf.Max, process_set=this)
    assert np.array_equal(group[0], value(max(ranks))) and np.array_equal(group[1], value(max(ranks), (2,), "int64"))
    gathered = bf.allgather(value(r, (r % 3 + 1, 2)), process_set=this)  # set-rank order
    assert np.array_equal(gathered, np.concatenate([value(q, (q % 3 + 1, 2)) for q in ranks])), gathered
    parts = bf.grouped_allgather([value(r, (1,)), value(r, (2, 2))], process_set=this)
    assert np.array_equal(parts[1], np.concatenate([value(q, (2, 2)) for q in ranks]))
    for root in ranks:  # roots are global ranks (Horovod's rule)
        got = bf.broadcast(value(r), root, process_set=this)
        assert np.array_equal(got, value(root)), (root, got)
    got = rt.grouped_broadcast([value(r), value(r, (3,), "int8")], ranks[-1], process_set=this)
    assert np.array_equal(got[1], value(ranks[-1], (3,), "int8"))
    rows = 2 * k + 1
    scattered = bf.reducescatter(value(r, (rows, 3)), op=bf.Sum, process_set=this)
    counts = [rows // k + (1 if i < rows % k else 0) for i in range(k)]
    start = sum(counts[:me])
    total = sum(value(q, (rows, 3)) for q in ranks)
    assert np.array_equal(scattered, total[start:start + counts[me]]), scattered
    out, received = bf.alltoall(np.repeat(np.arange(k, dtype=np.int64) + 10 * r, 2), splits=[2] * k,
                                process_set=this)
    assert np.array_equal(out, np.repeat([10 * q + me for q in ranks], 2)) and list(received) == [2] * k, out
    assert bf.allgather_object({"rank": r}, process_set=this) == [{"rank": q} for q in ranks]
    assert bf.broadcast_object(f"from {ranks[0]}" if r == ranks[0] else None, ranks[0], process_set=this) \
        == f"from {ranks[0]}"
    bf.barrier(process_set=this)
    # The same name in two sets (and in the global set) is three different collectives.
    got = bf.allreduce(np.ones(2) * r, op=bf.Sum, name="same.name", process_set=this)
    everyone = bf.allreduce(np.ones(2) * r, op=bf.Sum, name="same.name")
    assert np.array_equal(got, np.ones(2) * sum(ranks)) and np.array_equal(everyone, np.ones(2) * n * (n - 1) / 2)


def case_a_set_of_one_rank(r, n):
    known = [s for s in (EVEN, ODD) if s.ranks == [n - 1]]  # at 2 ranks: the odd set
    alone = known[0] if known else bf.add_process_set([n - 1])
    assert alone.size() == 1 and alone.included() == (r == n - 1)
    if r == n - 1:
        assert np.array_equal(bf.allreduce(value(r), op=bf.Sum, process_set=alone), value(r))
        assert np.array_equal(bf.allgather(value(r, (2, 2)), process_set=alone), value(r, (2, 2)))
        assert np.array_equal(bf.broadcast(value(r), r, process_set=alone), value(r))
        assert np.array_equal(bf.reducescatter(value(r, (3,)), process_set=alone), value(r, (3,)))
    else:  # not a member: an error on this rank alone, nobody else waits for it
        expect_error(bf.InvalidArgumentError, lambda: bf.allreduce(value(r), process_set=alone),
                     f"rank {r} is not in process set {alone.process_set_id}")
    if not known:
        assert bf.remove_process_set(alone)


def case_scale_factors_on_a_set(r, n):
    this, ranks = mine(r, n)
    got = bf.allreduce(value(r), op=bf.Sum, prescale_factor=0.5, postscale_factor=3.0, process_set=this)
    assert np.allclose(got, sum(value(q) * 0.5 for q in ranks) * 3.0), got
    got = bf.reducescatter(value(r, (2 * len(ranks),)), op=bf.Average, postscale_factor=2.0, process_set=this)
    me = ranks.index(r)
    assert np.allclose(got, (sum(value(q, (2 * len(ranks),)) for q in ranks) / len(ranks) * 2.0)[2 * me:2 * me + 2])


def case_two_disjoint_sets_reduce_at_once(r, n):
    """Evens and odds each run a stream of asynchronous all-reduces while the global set runs
    its own; none waits for the other set."""
    this, ranks = mine(r, n)
    handles = []
    for i in range(40):
        handles.append(("set", i, rt.allreduce_async(np.full(1000, float(r + i)), op=bf.Sum, name=f"stream.{i}",
                                                     process_set=this)))
        if i % 4 == 0:
            handles.append(("all", i, rt.allreduce_async(np.full(10, float(r * i)), op=bf.Sum, name=f"all.{i}")))
    for kind, i, h in handles:
        got = rt.synchronize(h)
        want = sum(q + i for q in ranks) if kind == "set" else sum(q * i for q in range(n))
        assert np.all(got == want), (kind, i, got[:3], want)


def case_overlapping_sets_in_random_orders(r, n):
    """Every pair of ranks shares two or more sets (the global one and the pair's own, at 3 ranks
    three overlapping pairs): each rank submits its sets' collectives in its own random order
    and waits for them in another; the old hazard (one thread running sets' collectives in the
    order their negotiations complete) deadlocks here within a few rounds."""
    pairs = [bf.add_process_set([a, b]) for a in range(n) for b in range(a + 1, n)
             if n > 2 and [a, b] not in (EVEN.ranks, ODD.ranks)]
    sets = [bf.global_process_set, EVEN, ODD] + pairs
    mine_sets = [s for s in sets if r in (s.ranks or [])]
    rng = random.Random(1000 + r)
    for round_ in range(25):
        order = [(s, j) for s in mine_sets for j in range(3)]
        rng.shuffle(order)
        pending = []
        for s, j in order:
            name = f"overlap.{round_}.{j}"
            pending.append((s, j, rt.allreduce_async(np.full(64, float(r + j)), op=bf.Sum, name=name, process_set=s)))
        rng.shuffle(pending)
        for s, j, h in pending:
            got = rt.synchronize(h)
            assert np.all(got == sum(q + j for q in s.ranks)), (s, j, got[:2])
    for s in pairs:
        assert bf.remove_process_set(s)


def case_added_used_and_removed_mid_run(r, n):
    ranks = [0, 1]
    if n == 2:  # [0, 1] is the global set, [0] and [1] the static ones: make room for one
        expect_error(bf.ProcessSetError, lambda: bf.add_process_set(ranks), "exists already")
        assert bf.remove_process_set(ODD)
        ranks = [1]
    before = rt.get_process_set_ids_and_ranks()
    added = bf.add_process_set(bf.ProcessSet(ranks))
    assert added.process_set_id == min(set(range(1, len(before) + 2)) - set(before)), (added, before)
    assert rt.get_process_set_ids_and_ranks() == {**before, added.process_set_id: ranks}
    if r in ranks:
        assert np.array_equal(bf.allreduce(np.ones(3) * r, op=bf.Sum, process_set=added), np.ones(3) * sum(ranks))
    expect_error(bf.ProcessSetError, lambda: bf.add_process_set(list(reversed(ranks))), "exists already")
    expect_error(bf.ProcessSetError, lambda: bf.add_process_set(range(n)), "exists already")
    old_id = added.process_set_id
    assert bf.remove_process_set(added) and added.process_set_id is None
    assert rt.get_process_set_ids_and_ranks() == before
    assert not bf.remove_process_set(added)  # not registered any more: False, no collective
    assert not bf.remove_process_set(bf.global_process_set)
    expect_error(bf.ProcessSetError, lambda: bf.allreduce(np.ones(1), process_set=added), "not registered")
    again = bf.add_process_set(added)  # re-adding the object: the freed id is used again
    assert again is added and added.process_set_id == old_id
    if r in ranks:
        assert np.array_equal(bf.allgather(np.array([r]), process_set=added), np.array(ranks))
    assert bf.remove_process_set(added)
    fake = bf.ProcessSet([0])
    fake.process_set_id = 10  # "you should not do this" (Horovod's test): an unknown set
    expect_error(ValueError, lambda: bf.allreduce(np.ones(1), process_set=fake), "not registered")
    if n == 2:
        assert bf.add_process_set(ODD).process_set_id == 2


def case_a_set_removed_with_a_call_in_flight(r, n):
    """The set's first rank submits a call its other members never submit; the set is removed:
    that call fails with ProcessSetError naming the set, nobody hangs, the job goes on."""
    if n < 3:
        skip("needs a set of two ranks besides the global one (3 ranks)")
    ranks = list(range(1, n))
    s = bf.add_process_set(ranks)
    handle = rt.allreduce_async(np.ones(2), name="orphan", process_set=s) if r == ranks[0] else None
    bf.barrier()
    bf.remove_process_set(s)
    if handle is not None:
        expect_error(bf.ProcessSetError, lambda: rt.synchronize(handle), "was removed while this call was in flight")
    assert np.array_equal(bf.allreduce(np.ones(1), op=bf.Sum, name="after.orphan"), np.full(1, float(n)))


def case_errors_name_the_set(r, n):
    this, ranks = mine(r, n)
    if len(ranks) >= 2:
        errors_in_a_set(r, n, this, ranks)
    bf.barrier()


def errors_in_a_set(r, n, this, ranks):
    sid = this.process_set_id
    shape = (2,) if r == ranks[0] else (3,)
    e = expect_error(bf.TensorMismatchError, lambda: bf.allreduce(np.ones(shape), name="mismatch", process_set=this),
                     f"in process set {sid} (ranks {ranks})", f"rank {ranks[0]}: allreduce", f"rank {ranks[1]}:")
    assert e.name == "mismatch"
    e = expect_error(bf.InvalidArgumentError,
                     lambda: bf.allreduce(np.ones(2), op="median" if r == ranks[-1] else bf.Sum, process_set=this),
                     f"in process set {sid} (ranks {ranks}) was refused by rank {ranks[-1]}")
    # A broadcast root outside the set is refused by the rank that passes it, named by its global rank.
    outsider = next(q for q in range(n) if q not in ranks) if len(ranks) < n else None
    if outsider is not None:
        expect_error(bf.InvalidArgumentError,
                     lambda: bf.broadcast(np.ones(1), outsider if r == ranks[0] else ranks[0], process_set=this),
                     f"root_rank {outsider} is not a rank in process set {sid}")
    got = bf.allreduce(np.ones(2), op=bf.Sum, process_set=this)  # the set works on
    assert np.array_equal(got, np.full(2, float(len(ranks))))


def case_static_sets_from_communicators(r, n):
    """init(process_sets=[ProcessSet(split communicator), ...]): each rank names its own half
    (Horovod's multi-comm test); ids follow Horovod's order; comm_process_set_id finds them."""
    from mpi4py import MPI

    bf.shutdown()
    world = MPI.COMM_WORLD
    sub = world.Split(color=r % 2, key=r)
    sets = [bf.ProcessSet(sub), bf.ProcessSet([0])] if n > 2 else [bf.ProcessSet(sub)]
    bf.init(process_sets=sets)
    ids = rt.get_process_set_ids_and_ranks()
    want = {0: list(range(n)), 1: list(range(0, n, 2)), 2: list(range(1, n, 2))}
    if n > 2:
        want[3] = [0]
    assert ids == want, ids
    assert sets[0].process_set_id == 1 + r % 2 and sets[0].ranks == list(range(r % 2, n, 2)), sets[0]
    assert rt.comm_process_set_id(sub) == 1 + r % 2 and rt.comm_process_set_id(world) == 0
    got = bf.allreduce(np.array([r]), op=bf.Sum, process_set=sets[0])
    assert got[0] == sum(range(r % 2, n, 2)), got
    # A list naming the global set, or one set twice, fails init on every rank, naming the rank.
    bf.shutdown()
    bad = [bf.ProcessSet(range(n))] if r == n - 1 else []
    expect_error(bf.ProcessSetError, lambda: bf.init(process_sets=bad),
                 f"rank {n - 1}: process_sets[0] (ranks {list(range(n))}) is a duplicate of the global set")
    bf.shutdown()
    sub.Free()
    restart()


def case_init_is_a_no_op_after_a_peer_shut_the_job_down(r, n):
    """Horovod's rule: init() on an initialized process does nothing, also after a peer's
    shutdown() stopped the runtime; the next collective says the job has been shut down."""
    bf.barrier()
    if r == 0:
        bf.shutdown()
    else:
        expect_error(bf.ShutdownError, lambda: bf.allreduce(np.ones(1), name="waits.for.rank0"), "shutdown() was called")
        while rt.RUNTIME.engine.alive:  # the stopped runtime's thread ends
            time.sleep(0.05)
        bf.init()  # a no-op (before: a new runtime started alone and waited for the ranks that left)
        assert bf.is_initialized()
        expect_error(bf.ShutdownError, lambda: bf.allreduce(np.ones(1), name="after.init"), "has been shut down")
        bf.shutdown()
    restart()


def case_plan_of_a_set_is_the_plan_of_its_devices(r, n):
    """On a DGX-1 (BLINKFLOW_TOPOLOGY=dgx1-v100), a set's all-reduce plan is planned on its own
    GPUs: its rate is what ``blinkrun plan --gpus`` reports for them (the test compares)."""
    if os.environ.get("BLINKFLOW_TOPOLOGY") != "dgx1-v100" or n < 3:
        skip("needs a DGX-1 topology (BLINKFLOW_TOPOLOGY=dgx1-v100) and a set of at least two ranks")
    s = bf.add_process_set(list(range(1, n)))
    if s.included():
        loop = rt.RUNTIME.engine.loop_for(s.process_set_id)
        plan = loop.job.plans.get("allreduce")
        devices = list(loop.job.devices)
        print(f"SETPLAN rank {r} devices {','.join(map(str, devices))} rate {plan.rate_gbps!r}", flush=True)
        assert list(loop.job.topology.compute_ids) == devices, loop.job.topology.compute_ids
        got = bf.allreduce(value(r, (1000,)), op=bf.Sum, process_set=s)  # the cpu backend runs the DGX plan
        assert np.array_equal(got, sum(value(q, (1000,)) for q in range(1, n)))
    bf.remove_process_set(s)


def restart():
    """Start afresh with the even and the odd ranks as static sets (ids 1 and 2)."""
    global EVEN, ODD
    from mpi4py import MPI

    bf.shutdown()
    n = MPI.COMM_WORLD.Get_size()
    EVEN, ODD = bf.ProcessSet(range(0, n, 2)), bf.ProcessSet(range(1, n, 2))
    bf.init(process_sets=[EVEN, ODD])


def main():
    started = time.monotonic()
    restart()
    run_cases(globals(), bf.rank(), bf.size(), sys.argv[1:])
    bf.shutdown()
    print(f"DONE in {time.monotonic() - started:.1f} s", flush=True)


if __name__ == "__main__":
    main()
