"""What one rank alone refuses (bad arguments) must reach every rank as one error, and the next
collective must still pair correctly (issue 18, findings 1-3).

Run by ``test_refusals.py`` under mpirun at 2, 3 and 4 ranks. Every rank makes the same calls;
in each round one rank (each rank in turn) passes arguments the runtime refuses. Every rank must
raise ``InvalidArgumentError`` naming that rank and the reason, and the very next collectives,
unnamed and named, must return the right values (before the fix an unnamed refusal drew no
automatic name on the refusing rank, so its later calls paired with the others' earlier ones,
and a named refusal left the others waiting forever). Each case reports through the test harness
(tests/harness.py).
"""
import sys

import numpy as np

import blinkflow as bf
from blinkflow.runtime import api as rt
from harness import run_cases, skip


def refusals(n):
    """(label, call with bad arguments, the same call with good ones, hint the error must carry).

    Each call takes a ``name`` (None: unnamed). The good call's result is not checked here: the
    collectives after each round are (they would pair with the wrong call if names slipped)."""
    f32 = np.ones((n, 2), np.float32)
    return [
        ("complex", lambda nm: bf.allreduce(np.ones(3, np.complex64), name=nm),
         lambda nm: bf.allreduce(np.ones(3, np.float32), name=nm), "dtype complex64 is not supported"),
        ("nan.prescale", lambda nm: bf.allreduce(f32, prescale_factor=float("nan"), name=nm),
         lambda nm: bf.allreduce(f32, name=nm), "prescale_factor must be a finite number"),
        ("str.postscale", lambda nm: bf.allreduce(f32, postscale_factor="x", name=nm),
         lambda nm: bf.allreduce(f32, name=nm), "postscale_factor must be a finite number"),
        ("bool.average", lambda nm: bf.allreduce(np.ones(2, bool), name=nm),
         lambda nm: bf.allreduce(np.ones(2, bool), op=bf.Max, name=nm), "Average is not defined for bool"),
        ("unknown.op", lambda nm: bf.allreduce(f32, op="median", name=nm),
         lambda nm: bf.allreduce(f32, op=bf.Sum, name=nm), "unknown reduce op 'median'"),
        ("ragged", lambda nm: bf.allreduce([[1.0], [1.0, 2.0]], name=nm),
         lambda nm: bf.allreduce([[1.0, 0.0], [1.0, 2.0]], name=nm), "ValueError"),
        ("group.member", lambda nm: bf.grouped_allreduce([f32, np.ones(2, np.complex128)], name=nm),
         lambda nm: bf.grouped_allreduce([f32, np.ones(2)], name=nm), "member #1: dtype complex128"),
        ("group.op", lambda nm: bf.grouped_allreduce([f32], op=99, name=nm),
         lambda nm: bf.grouped_allreduce([f32], name=nm), "unknown reduce op 99"),
        ("allgather.0d", lambda nm: bf.allgather(np.float32(1), name=nm),
         lambda nm: bf.allgather(np.ones(1, np.float32), name=nm), "reshape it to (1,)"),
        ("grouped_allgather.0d", lambda nm: bf.grouped_allgather([np.ones(2), np.float64(1)], name=nm),
         lambda nm: bf.grouped_allgather([np.ones(2), np.ones(1)], name=nm), "member #1: a 0-d tensor"),
        ("root.range", lambda nm: bf.broadcast(f32, n, name=nm),
         lambda nm: bf.broadcast(f32, 0, name=nm), f"root_rank {n} is not a rank of this job"),
        ("root.fraction", lambda nm: bf.broadcast(f32, 0.5, name=nm),
         lambda nm: bf.broadcast(f32, 0, name=nm), "root_rank must be an integer, got 0.5"),
        ("grouped_broadcast.root", lambda nm: rt.synchronize(rt.grouped_broadcast_async([f32], -1, name=nm)),
         lambda nm: rt.synchronize(rt.grouped_broadcast_async([f32], 0, name=nm)), "root_rank -1 is not a rank"),
        ("reducescatter.0d", lambda nm: bf.reducescatter(np.float32(2), name=nm),
         lambda nm: bf.reducescatter(np.ones(n, np.float32), name=nm), "reshape it to (1,)"),
        ("reducescatter.bool", lambda nm: bf.reducescatter(np.ones(n, bool), name=nm),
         lambda nm: bf.reducescatter(np.ones(n, bool), op=bf.Sum, name=nm), "Average is not defined for bool"),
        ("alltoall.sum", lambda nm: bf.alltoall(f32, splits=[n + 1] + [0] * (n - 1), name=nm),
         lambda nm: bf.alltoall(f32, splits=[1] * n, name=nm), "summing to the first dimension"),
        ("alltoall.fraction", lambda nm: bf.alltoall(f32, splits=[1.5] + [1] * (n - 2) + [0.5], name=nm),
         lambda nm: bf.alltoall(f32, splits=[1] * n, name=nm), "splits must be integers"),
        ("alltoall.count", lambda nm: bf.alltoall(f32, splits=[1] * (n + 1), name=nm),
         lambda nm: bf.alltoall(f32, splits=[1] * n, name=nm), f"must be {n} non-negative numbers"),
    ] + ([] if n == 1 else [  # one rank divides everything
        ("alltoall.uneven", lambda nm: bf.alltoall(np.ones(n + 1), name=nm),
         lambda nm: bf.alltoall(np.ones(n), name=nm), "not divisible by the number of ranks")])


def expect_refusal(label, call, name, bad, r, n, hint):
    try:
        call(name)
    except bf.InvalidArgumentError as e:
        message = str(e)
        assert f"refused by rank {bad}: " in message and hint in message, (label, message)
        if name is not None:
            assert repr(name) in message, (label, message)
        return message
    raise AssertionError(f"{label}: rank {r} got no InvalidArgumentError (rank {bad} refused the call)")


def next_collectives_pair(r, n, tag):
    """The collectives right after a refusal: unnamed ones first (the ones that slipped), then
    named; each rank's input differs, so a call paired with another rank's wrong call shows."""
    x = np.array([r + 1.0, 100.0 * (r + 1)])
    want = np.array([n * (n + 1) / 2, 100.0 * n * (n + 1) / 2])
    got = bf.allreduce(x, op=bf.Sum)
    assert np.array_equal(got, want), (tag, got, want)
    got = bf.allgather(np.full(r + 1, r, np.int64))
    assert np.array_equal(got, np.repeat(np.arange(n), np.arange(n) + 1)), (tag, got)
    got = bf.allreduce(x, op=bf.Sum, name=f"after.{tag}")
    assert np.array_equal(got, want), (tag, got, want)


def case_one_rank_refuses(r, n):
    """Every refusal, unnamed and named, by each rank in turn."""
    for round_, (label, bad_call, good_call, hint) in enumerate(refusals(n)):
        bad = round_ % n
        for name in (None, f"named.{label}"):
            expect_refusal(label, bad_call if r == bad else good_call, name, bad, r, n, hint)
            next_collectives_pair(r, n, f"{label}.{name}")


def case_refusal_of_a_cached_name(r, n):
    """A name the response cache holds, refused on one rank: its bit is invalid everywhere, the
    name is negotiated in full, and it is cached again afterwards."""
    for _ in range(3):
        assert np.array_equal(bf.allreduce(np.ones(2), op=bf.Sum, name="cached"), np.full(2, float(n)))
    expect_refusal("cached", lambda nm: bf.allreduce(np.ones(2), op="median" if r == n - 1 else bf.Sum, name=nm),
                   "cached", n - 1, r, n, "unknown reduce op")
    for _ in range(3):
        assert np.array_equal(bf.allreduce(np.ones(2), op=bf.Sum, name="cached"), np.full(2, float(n)))
    next_collectives_pair(r, n, "cached")


def case_every_rank_refuses(r, n):
    """All ranks refuse (the same bad call everywhere): one error naming them all."""
    try:
        bf.allreduce(np.ones(2, np.complex64))
    except bf.InvalidArgumentError as e:
        who = f"rank {0}" if n == 1 else f"ranks {list(range(n))}"
        assert f"refused by {who}: dtype complex64" in str(e), str(e)
    else:
        raise AssertionError("no error")
    next_collectives_pair(r, n, "all")


def case_async_refusal(r, n):
    """An asynchronous call returns a handle on every rank; synchronize raises the refusal."""
    bad = n - 1
    h = rt.allreduce_async(np.ones(2), op="median" if r == bad else bf.Sum)
    ok = rt.allreduce_async(np.full(2, 2.0), op=bf.Sum, name="async.ok")
    try:
        rt.synchronize(h)
    except bf.InvalidArgumentError as e:
        assert f"refused by rank {bad}: unknown reduce op 'median'" in str(e), str(e)
    else:
        raise AssertionError("no error")
    assert np.array_equal(rt.synchronize(ok), np.full(2, 2.0 * n))
    next_collectives_pair(r, n, "async")


def case_grouped_allgather_member_count(r, n):
    """Finding 3: one rank passes fewer members to grouped_allgather. Before, the ranks with
    fewer members returned and the others waited forever."""
    if n == 1:
        skip("one rank cannot pass fewer members than another")
    short = n - 1
    members = [np.full((r + 1, 2), r, np.float32)] * (1 if r == short else 2)
    for name in (None, "gag.count"):
        try:
            bf.grouped_allgather(members, name=name)
        except bf.TensorMismatchError as e:
            text = str(e)
            assert "group members" in text and f"rank {short}: allgather group of 1 tensors" in text, text
        else:
            raise AssertionError("different member counts did not raise")
        next_collectives_pair(r, n, f"gag.{name}")
    # The group itself: first dimensions differ per rank and member, each gathered in rank order.
    got = bf.grouped_allgather([np.full((r + 1, 2), r, np.float32), np.full(r, r, np.int32)])
    assert np.array_equal(got[0], np.repeat(np.arange(n), np.arange(n) + 1)[:, None] * np.ones(2)), got[0]
    assert np.array_equal(got[1], np.repeat(np.arange(n), np.arange(n))), got[1]
    assert bf.grouped_allgather([]) == []
    got = rt.synchronize(rt.grouped_broadcast_async([np.full(3, r), np.full((2, 2), r + 0.5)], n - 1))
    assert np.array_equal(got[0], np.full(3, n - 1)) and np.array_equal(got[1], np.full((2, 2), n - 0.5)), got


def case_long_names_are_shortened(r, n):
    """A 10-million-character name: messages show its start and its length, not all of it."""
    name = "x" * 10_000_000
    try:
        bf.allreduce(np.ones(2), op="median" if r == 0 else bf.Sum, name=name)
    except bf.InvalidArgumentError as e:
        assert len(str(e)) < 2000 and "(10000002 characters)" in str(e), str(e)[:300]
    else:
        raise AssertionError("no error")
    next_collectives_pair(r, n, "long")


def main():
    bf.init()
    run_cases(globals(), bf.rank(), bf.size(), sys.argv[1:])
    bf.shutdown()


if __name__ == "__main__":
    main()
