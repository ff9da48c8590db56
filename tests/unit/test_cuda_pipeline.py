"""The GPU executor's host logic on the CPU: program compilation and the issue loop.

The loop (``blinkflow.backends.cuda.pipeline``) is generic over a messenger and an issuer, so
here each rank is a thread with a numpy buffer, receive slots are numpy arrays and messages go
through queues. The fake issuer executes each action at once, which is a legal (maximally
eager) GPU timing: correctness must then follow from the READY/FREE protocol alone.
"""
import queue
import threading

import numpy as np
import pytest

from blinkflow.backends.cuda.pipeline import Issuer, Messenger, SequenceState, run_program
from blinkflow.backends.cuda.program import compile_program
from blinkflow.backends.cuda.schedules import chain_allreduce_schedule as chain_allreduce
from blinkflow.backends.cuda.schedules import direct_allgather_schedule, direct_reducescatter_schedule
from blinkflow.errors import ScheduleError
from blinkflow.schedule.ir import Schedule, Step

COMBINE = {"sum": np.add, "max": np.maximum}


class QueueMessenger(Messenger):
    def __init__(self, rank, boxes):
        self.rank, self.boxes = rank, boxes

    def post(self, dst, kind, channel, seq):
        self.boxes[dst].put((kind, self.rank, channel, seq))

    def wait(self):
        return self.boxes[self.rank].get(timeout=10)

    def poll(self):
        out = []
        while True:
            try:
                out.append(self.boxes[self.rank].get_nowait())
            except queue.Empty:
                return out


class NumpyIssuer(Issuer):
    """Slots live in the receiver's dict, indexed (src, channel, slot), like the IPC arena."""

    def __init__(self, rank, bufs, slots, nslots, combine, log):
        self.rank, self.bufs, self.slots, self.nslots, self.combine, self.log = rank, bufs, slots, nslots, combine, log

    def _slot(self, owner, src, channel, seq, count):
        key = (src, channel, seq % self.nslots)
        arr = self.slots[owner].setdefault(key, np.full(64, -1.0))
        return arr[:count]

    def issue(self, a, recv_seq, send_seq, wait_free):
        buf = self.bufs[self.rank]
        span = slice(a.offset, a.offset + a.count)
        self.log.append((self.rank, a.index))
        if a.op == "copy":
            buf[span] = buf[a.src_offset:a.src_offset + a.count]
            return
        if recv_seq >= 0:
            incoming = self._slot(self.rank, a.recv_from, a.channel, recv_seq, a.count)
            buf[span] = self.combine(buf[span], incoming) if a.reduces else incoming
            incoming[:] = np.nan  # a consumed slot must never be read again
        if send_seq >= 0:
            self._slot(a.send_to, self.rank, a.channel, send_seq, a.count)[:] = buf[span]


def run_ranks(schedules_per_call, inputs, nslots=2, op="sum"):
    """Run several calls (one schedule each) on len(inputs) thread-ranks; return the buffers."""
    n = len(inputs)
    boxes = [queue.Queue() for _ in range(n)]
    slots = [dict() for _ in range(n)]
    results, errors, log = {}, [], []

    def rank_main(r):
        try:
            state = SequenceState()
            messenger = QueueMessenger(r, boxes)
            for call, schedule in enumerate(schedules_per_call):
                buf = inputs[r][call].copy()
                bufs[r] = buf
                prog = compile_program(schedule, schedule.devices[r], {d: i for i, d in enumerate(schedule.devices)})
                run_program(prog, NumpyIssuer(r, bufs, slots, nslots, COMBINE[op], log), messenger, state)
                results[(r, call)] = buf
            assert all(box.empty() for box in boxes[r:r + 1])
        except BaseException as e:  # surfaced by the main thread
            errors.append((r, e))

    bufs = [None] * n
    threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors, errors
    assert all(not t.is_alive() for t in threads), "a rank hung"
    return results


@pytest.mark.parametrize("n", [2, 3, 4])
@pytest.mark.parametrize("nchannels", [1, 2])
@pytest.mark.parametrize("nslots", [1, 2, 4])
def test_chain_allreduce_over_threads(n, nchannels, nslots):
    rng = np.random.default_rng(n * 10 + nchannels)
    nelems, chunk = 37, 5
    sched = chain_allreduce(list(range(10, 10 + n)), nelems, chunk, nchannels)
    calls = 3  # sequence numbers and slots carry across calls
    inputs = [[rng.integers(-50, 50, nelems).astype(np.float64) for _ in range(calls)] for _ in range(n)]
    out = run_ranks([sched] * calls, inputs, nslots=nslots)
    for call in range(calls):
        want = sum(inputs[r][call] for r in range(n))
        for r in range(n):
            np.testing.assert_array_equal(out[(r, call)], want)


def test_max_and_mixed_schedules_across_calls():
    n = 3
    rng = np.random.default_rng(7)
    shards = ((0, 0, 4), (1, 4, 9), (2, 13, 2))
    gather = direct_allgather_schedule((0, 1, 2), shards, 15, 3)
    reduce = chain_allreduce([0, 1, 2], 15, 4, 2)
    inputs = [[rng.normal(size=15) for _ in range(2)] for _ in range(n)]
    out = run_ranks([reduce, gather], inputs, nslots=1, op="max")
    want = np.maximum.reduce([inputs[r][0] for r in range(n)])
    for r in range(n):
        np.testing.assert_array_equal(out[(r, 0)], want)
        for owner, off, cnt in shards:
            np.testing.assert_array_equal(out[(r, 1)][off:off + cnt], inputs[owner][1][off:off + cnt])


def test_hazards_become_dependencies():
    # recv into [0, 4) after sending [2, 6): a write-after-read the schedule did not declare.
    prog = Schedule("broadcast", (0, 1), 8, 4, programs=(
        (0, (Step("send", 2, 4, peer=1), Step("recv", 0, 4, peer=1, channel=1), Step("copy", 6, 2, src_offset=0))),
        (1, (Step("recv", 2, 4, peer=0), Step("send", 0, 4, peer=0, channel=1))),
    ), nchannels=2)
    prog.validate()
    p = compile_program(prog, 0, {0: 0, 1: 1})
    assert p.actions[1].deps == (0,)
    assert p.actions[2].deps == (1,)  # reads what action 1 wrote
    assert p.cross_stream_deps == (True, True, False)
    assert p.sends == {(1, 0): 1} and p.recvs == {(1, 1): 1}
    assert p.slot_elems == 4


def test_direct_allgather_rejects_bad_chunk():
    with pytest.raises(ScheduleError):
        direct_allgather_schedule((0, 1), ((0, 0, 1), (1, 1, 1)), 2, 0)


@pytest.mark.parametrize("root", [0, 2, 3])
def test_chain_broadcast_over_threads(root):
    from blinkflow.backends.cuda.schedules import chain_broadcast_schedule

    rng = np.random.default_rng(root)
    sched = chain_broadcast_schedule([0, 1, 2, 3], root, 23, 4)
    inputs = [[rng.normal(size=23)] for _ in range(4)]
    out = run_ranks([sched], inputs, nslots=2)
    for r in range(4):
        np.testing.assert_array_equal(out[(r, 0)], inputs[root][0])


def test_hazards_match_the_quadratic_definition():
    """The block index finds exactly the conflicting earlier steps (brute force on random steps)."""
    from blinkflow.backends.cuda.program import _overlap, _ranges

    rng = np.random.default_rng(11)
    steps = []
    for _ in range(120):
        off, cnt = int(rng.integers(0, 90)), int(rng.integers(0, 12))
        kind = rng.choice(["send", "recv", "recv_reduce", "copy"])
        if kind == "copy":
            steps.append(Step("copy", off, cnt, src_offset=int(rng.integers(0, 100 - cnt))))
        else:
            steps.append(Step(str(kind), off, cnt, peer=1))
    sched = Schedule("allreduce", (0, 1), 102, 5, programs=((0, tuple(steps)), (1, ())))
    prog = compile_program(sched, 0, {0: 0, 1: 1})
    for i, a in enumerate(prog.actions):
        ri, wi = _ranges(steps[i])
        want = {j for j in range(i) if _overlap(wi, _ranges(steps[j])[0]) or _overlap(wi, _ranges(steps[j])[1])
                or _overlap(ri, _ranges(steps[j])[1])}
        assert set(a.deps) == want, i


@pytest.mark.parametrize("nslots", [1, 3])
def test_direct_reducescatter_over_threads(nslots):
    rng = np.random.default_rng(nslots)
    shards = ((0, 0, 7), (1, 7, 0), (2, 7, 12), (3, 19, 4))
    sched = direct_reducescatter_schedule((0, 1, 2, 3), shards, 23, 3)
    inputs = [[rng.normal(size=23)] for _ in range(4)]
    out = run_ranks([sched, sched], [i * 2 for i in inputs], nslots=nslots)
    for owner, off, cnt in shards:
        # the owner folds in its successors in a fixed order: own + next + next-but-one + ...
        order = [(owner + h) % 4 for h in range(4)]
        want = inputs[order[0]][0][off:off + cnt].copy()
        for r in order[1:]:
            want = want + inputs[r][0][off:off + cnt]
        for call in (0, 1):
            np.testing.assert_array_equal(out[(owner, call)][off:off + cnt], want)


@pytest.mark.parametrize("devices", [(0, 1), (0, 1, 2), (3, 0, 2, 1)])
@pytest.mark.parametrize("nelems, chunk", [(1, 1), (23, 3), (40, 7)])
def test_the_backends_own_schedules_pass_the_symbolic_checker(devices, nelems, chunk):
    # They run in production (uneven shards, the three-phase fallback), so they get the same
    # proof as the lowered plans; rounds used to be all 0, which the checker refused.
    from blinkflow.backends.cuda.schedules import chain_broadcast_schedule
    from blinkflow.planner.plan import split_counts
    from blinkflow.schedule.symbolic import check

    counts = split_counts([1.0] * len(devices), nelems)
    offsets = [sum(counts[:i]) for i in range(len(devices))]
    shards = tuple((d, o, c) for d, o, c in zip(devices, offsets, counts))
    uneven = tuple((d, 0, 0) for d in devices[:-1]) + ((devices[-1], 0, nelems),)  # empty shards too
    for s in (direct_allgather_schedule(devices, shards, nelems, chunk),
              direct_allgather_schedule(devices, uneven, nelems, chunk),
              direct_reducescatter_schedule(devices, shards, nelems, chunk),
              chain_allreduce(devices, nelems, chunk, nchannels=min(2, len(devices))),
              chain_broadcast_schedule(devices, devices[-1], nelems, chunk)):
        check(s)
        assert s.nchannels >= (len(devices) - 1 if s.collective in ("allgather", "reducescatter") else 1)
