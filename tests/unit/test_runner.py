"""The one schedule runner on the CPU, over thread ranks: program compilation (hazards, fused
reductions, final ranges) and the issue loop with both kinds of links a backend has.

Each rank is a thread with a numpy buffer and messages go through queues. Two transports stand in
for the backends' links, both executing each action at once (a legal, maximally eager timing):

* push (the GPU's IPC slots): a send copies the chunk into the receiver's slot, ``window`` =
  slots, and the receiver's FREE makes the slot reusable;
* pull (the CPU's shared memory, MPI's ``Isend``): the receiver reads the sender's buffer in
  place, so the sender may not overwrite a range it sent until the receiver released it. The
  transport asserts exactly that, so a runner that let a write through early fails here.

Correctness must then follow from the runner's READY/FREE logic alone.
"""
import queue
import threading
import time

import numpy as np
import pytest

from blinkflow.errors import ScheduleError
from blinkflow.schedule.builder import ScheduleBuilder
from blinkflow.schedule.ir import Schedule, Step
from blinkflow.schedule.program import _overlap, _ranges, compile_program
from blinkflow.schedule.runner import SequenceState, run_program, settle
from blinkflow.bench.hand_schedules import (chain_allreduce_schedule as chain_allreduce, chain_broadcast_schedule,
                                       direct_allgather_schedule, direct_reducescatter_schedule)
from blinkflow.schedule.transport import FREE, READY, Transport

COMBINE = {"sum": np.add, "max": np.maximum}


class _Threads(Transport):
    def __init__(self, rank, bufs, boxes, combine, log):
        self.rank, self.bufs, self.boxes, self.combine, self.log = rank, bufs, boxes, combine, log

    def post(self, dst, kind, channel, seq, payload=None):
        self.boxes[dst].put((kind, self.rank, channel, seq, payload))

    def poll(self):
        out = []
        while True:
            try:
                out.append(self.boxes[self.rank].get_nowait())
            except queue.Empty:
                return out

    def wait(self):
        return [self.boxes[self.rank].get(timeout=10)]

    reduce_all = None
    """``f(local, chunks) -> result``: fold an action's inputs in one pass (the cuda runner's fused
    kernel) instead of one ``combine`` per input."""

    def _combine_into(self, a, incoming):
        buf = self.bufs[self.rank]
        span = slice(a.offset, a.offset + a.count)
        if a.reduces and self.reduce_all is not None:
            buf[span] = self.reduce_all(buf[span], incoming)
            return
        for chunk in incoming:
            buf[span] = self.combine(buf[span], chunk) if a.reduces else chunk


class PushTransport(_Threads):
    """Slots live in the receiver's dict, indexed (src, channel, slot), like the IPC arena."""

    def __init__(self, rank, bufs, boxes, combine, log, slots, nslots):
        super().__init__(rank, bufs, boxes, combine, log)
        self.slots, self.nslots = slots, nslots

    def window(self, peer):
        return self.nslots

    def holds(self, peer):
        return False

    def _slot(self, owner, src, channel, seq, count):
        arr = self.slots[owner].setdefault((src, channel, seq % self.nslots), np.full(64, -1.0))
        return arr[:count]

    def issue(self, a, recv_seqs, send_seq, wait_free, payloads):
        buf = self.bufs[self.rank]
        self.log.append((self.rank, a.index))
        if a.op == "copy":
            buf[a.offset:a.offset + a.count] = buf[a.src_offset:a.src_offset + a.count]
            return
        slots = [self._slot(self.rank, src, a.channel, seq, a.count) for (src, _), seq in zip(a.inputs, recv_seqs)]
        self._combine_into(a, [s.copy() for s in slots])
        for s, (src, _), seq in zip(slots, a.inputs, recv_seqs):
            s[:] = np.nan  # a consumed slot must never be read again
            self.post(src, FREE, a.channel, seq)
        if send_seq >= 0:
            self._slot(a.send_to, self.rank, a.channel, send_seq, a.count)[:] = buf[a.offset:a.offset + a.count]
            self.post(a.send_to, READY, a.channel, send_seq)


class PullTransport(_Threads):
    """Receivers read the sender's buffer where it lies; a sender tracks what is still read."""

    def __init__(self, rank, bufs, boxes, combine, log, held, delay=0.0):
        super().__init__(rank, bufs, boxes, combine, log)
        self.held = held  # held[rank]: {(channel, seq, dst): (lo, hi)} still read by a peer
        self.delay = delay  # seconds a receive waits before reading (a slow rank)

    def window(self, peer):
        return None

    def holds(self, peer):
        return True

    def _writes(self, lo, hi):
        for key, (a, b) in list(self.held[self.rank].items()):
            assert not (lo < b and a < hi), f"rank {self.rank} overwrote [{a}, {b}) before {key} was released"

    def issue(self, a, recv_seqs, send_seq, wait_free, payloads):
        buf = self.bufs[self.rank]
        self.log.append((self.rank, a.index))
        if a.op == "copy":
            self._writes(a.offset, a.offset + a.count)
            buf[a.offset:a.offset + a.count] = buf[a.src_offset:a.src_offset + a.count]
            return
        if a.inputs:
            time.sleep(self.delay)
            self._writes(a.offset, a.offset + a.count)
        incoming = [self.bufs[src][lo:hi].copy() for (src, _), (lo, hi) in zip(a.inputs, payloads)]
        self._combine_into(a, incoming)
        for (src, _), seq in zip(a.inputs, recv_seqs):
            self.post(src, FREE, a.channel, seq)
        if send_seq >= 0:
            self.held[self.rank][(a.channel, send_seq, a.send_to)] = (a.offset, a.offset + a.count)
            self.post(a.send_to, READY, a.channel, send_seq, (a.offset, a.offset + a.count))

    def note_free(self, event):
        kind, peer, channel, seq, _ = event
        if kind == FREE:
            self.held[self.rank].pop((channel, seq, peer), None)

    def poll(self):
        events = super().poll()
        for e in events:
            self.note_free(e)
        return events

    def wait(self):
        events = super().wait()
        for e in events:
            self.note_free(e)
        return events


def run_ranks(schedules_per_call, inputs, nslots=2, op="sum", link="push", fuse=1, delays=None, reduce_all=None):
    """Run several calls (one schedule each) on len(inputs) thread-ranks; return the buffers.
    ``reduce_all``: see :attr:`_Threads.reduce_all`."""
    n = len(inputs)
    boxes = [queue.Queue() for _ in range(n)]
    slots = [dict() for _ in range(n)]
    held = [dict() for _ in range(n)]
    results, errors, log = {}, [], []

    def rank_main(r):
        try:
            state = SequenceState()
            for call, schedule in enumerate(schedules_per_call):
                buf = inputs[r][call].copy()
                bufs[r] = buf
                prog = compile_program(schedule, schedule.devices[r], {d: i for i, d in enumerate(schedule.devices)},
                                       fuse_inputs=fuse)
                if link == "push":
                    transport = PushTransport(r, bufs, boxes, COMBINE[op], log, slots, nslots)
                else:
                    transport = PullTransport(r, bufs, boxes, COMBINE[op], log, held, (delays or {}).get(r, 0.0))
                transport.reduce_all = reduce_all
                run_program(prog, transport, state)
                results[(r, call)] = buf.copy()
                if link == "pull":
                    assert not held[r], f"rank {r} returned with transfers still read: {held[r]}"
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


class SlotPullTransport(PullTransport):
    """Pull over two buffers per rank used in turn (the CPU backend's shared slots): a READY says
    which slot, and what is still read is tracked per (rank, slot)."""

    def __init__(self, rank, slots, boxes, log, held, slot, delay):
        super().__init__(rank, None, boxes, COMBINE["sum"], log, held, delay)
        self.slot_bufs, self.slot = slots, slot
        self.bufs = {rank: slots[rank][slot]}

    def _writes(self, lo, hi):
        for key, (s, a, b) in list(self.held[self.rank].items()):
            assert s != self.slot or not (lo < b and a < hi), f"rank {self.rank} overwrote slot {s} [{a}, {b})"

    def issue(self, a, recv_seqs, send_seq, wait_free, payloads):
        buf = self.bufs[self.rank]
        if a.inputs:
            time.sleep(self.delay)
            self._writes(a.offset, a.offset + a.count)
        incoming = [self.slot_bufs[src][s][lo:hi].copy() for (src, _), (s, lo, hi) in zip(a.inputs, payloads)]
        self._combine_into(a, incoming)
        for (src, _), seq in zip(a.inputs, recv_seqs):
            self.post(src, FREE, a.channel, seq)
        if send_seq >= 0:
            span = (self.slot, a.offset, a.offset + a.count)
            self.held[self.rank][(a.channel, send_seq, a.send_to)] = span
            self.post(a.send_to, READY, a.channel, send_seq, span)


@pytest.mark.parametrize("settled", [True, False])
def test_deferred_releases_are_waited_for_before_a_slot_is_written_again(settled):
    """``run_program(defer=slot)`` returns while a slow peer may still read the slot; ``settle``
    before the slot is written again waits for that peer (the CPU backend's alternating shared
    slots). Without the settle the next write lands on a range still being read. (A broadcast:
    its root hears nothing from the others, so nothing else holds it back; in an all-reduce
    every rank waits for data that each peer sends only after it finished the call before.)"""
    sched = chain_broadcast_schedule([0, 1, 2], 0, 12, 4)
    n, calls = 3, 5
    boxes = [queue.Queue() for _ in range(n)]
    slots = [[np.zeros(12), np.zeros(12)] for _ in range(n)]
    held = [dict() for _ in range(n)]
    results, errors = {}, []

    def rank_main(r):
        try:
            state = SequenceState()
            prog = compile_program(sched, r, {d: d for d in range(n)})
            for call in range(calls):
                slot = call % 2
                transport = SlotPullTransport(r, slots, boxes, [], held, slot, 0.05 if r == 2 else 0.0)
                if settled:
                    settle(state, transport, slot)
                transport._writes(0, 12)  # the input is about to be written: nobody may read it
                if r == 0:
                    slots[r][slot][:] = 1 + 10 * call
                run_program(prog, transport, state, defer=slot)
                results[(r, call)] = slots[r][slot].copy()
            settle(state, transport)
            assert not state.unsettled and not held[r]
        except BaseException as e:  # surfaced by the main thread
            errors.append((r, e))
            for box in boxes:
                box.put(("stop", r, 0, 0, None))  # an event no runner knows: the others stop too

    threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert all(not t.is_alive() for t in threads), "a rank hung"
    if not settled:
        assert any("overwrote" in str(e) for _, e in errors), errors
        return
    assert not errors, errors
    for call in range(calls):
        for r in range(n):
            assert results[(r, call)].tolist() == [1.0 + 10 * call] * 12


LINKS = [("push", 1), ("push", 2), ("push", 4), ("pull", None)]


@pytest.mark.parametrize("n", [2, 3, 4])
@pytest.mark.parametrize("nchannels", [1, 2])
@pytest.mark.parametrize("link,nslots", LINKS)
def test_chain_allreduce_over_threads(n, nchannels, link, nslots):
    rng = np.random.default_rng(n * 10 + nchannels)
    nelems, chunk = 37, 5
    sched = chain_allreduce(list(range(10, 10 + n)), nelems, chunk, nchannels)
    calls = 3  # sequence numbers and slots carry across calls
    inputs = [[rng.integers(-50, 50, nelems).astype(np.float64) for _ in range(calls)] for _ in range(n)]
    out = run_ranks([sched] * calls, inputs, nslots=nslots, link=link)
    for call in range(calls):
        want = sum(inputs[r][call] for r in range(n))
        for r in range(n):
            np.testing.assert_array_equal(out[(r, call)], want)


@pytest.mark.parametrize("link", ["push", "pull"])
def test_max_and_mixed_schedules_across_calls(link):
    n = 3
    rng = np.random.default_rng(7)
    shards = ((0, 0, 4), (1, 4, 9), (2, 13, 2))
    gather = direct_allgather_schedule((0, 1, 2), shards, 15, 3)
    reduce = chain_allreduce([0, 1, 2], 15, 4, 2)
    inputs = [[rng.normal(size=15) for _ in range(2)] for _ in range(n)]
    out = run_ranks([reduce, gather], inputs, nslots=1, op="max", link=link)
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
    assert p.actions[1].releases == (0,)  # it overwrites what the send of action 0 reads
    assert p.actions[2].deps == (1,)  # reads what action 1 wrote
    assert p.actions[2].releases == ()
    assert p.cross_stream_deps == (True, True, False)
    assert p.sends == {(1, 0): 1} and p.recvs == {(1, 1): 1}
    assert p.slot_elems == 4
    # [0, 4) is received last and read by nothing after it: the result there; [4, 8) is not.
    assert [a.final for a in p.actions] == [False, False, False]  # the copy reads [0, 2) afterwards
    q = compile_program(prog, 1, {0: 0, 1: 1})
    assert [a.final for a in q.actions] == [False, False]  # [2, 6) is received, then [0, 4) sent
    assert q.leftover == ((0, 8),)


def test_a_sent_range_is_not_overwritten_before_the_receiver_read_it():
    """Device 0 sends [0, 4) to a slow device 1, then receives [0, 4) from device 2, whose data is
    there at once. Nothing causal orders device 1's read before device 0's overwrite (the IR's
    round rule does, for a round-by-round executor): the runner must wait for the release."""
    sched = Schedule("allgather", (0, 1, 2), 4, 4, programs=(
        (0, (Step("send", 0, 4, peer=1, round=0), Step("recv", 0, 4, peer=2, channel=1, round=2))),
        (1, (Step("recv", 0, 4, peer=0, round=1),)),
        (2, (Step("send", 0, 4, peer=0, channel=1, round=0),)),
    ), nchannels=2)
    sched.validate()
    inputs = [[np.full(4, float(r))] for r in range(3)]
    out = run_ranks([sched], inputs, link="pull", delays={1: 0.2})
    assert out[(1, 0)].tolist() == [0.0] * 4  # device 0's data, not device 2's
    assert out[(0, 0)].tolist() == [2.0] * 4


def test_final_receives_and_leftover_ranges():
    sched = chain_broadcast_schedule([0, 1, 2], 0, 10, 4)
    root, leaf = compile_program(sched, 0, {0: 0, 1: 1, 2: 2}), compile_program(sched, 2, {0: 0, 1: 1, 2: 2})
    assert root.leftover == ((0, 10),) and not any(a.final for a in root.actions)
    assert leaf.leftover == () and all(a.final for a in leaf.actions)
    middle = compile_program(sched, 1, {0: 0, 1: 1, 2: 2})  # receives and forwards: not final
    assert middle.leftover == ((0, 10),)


def test_direct_allgather_rejects_bad_chunk():
    with pytest.raises(ScheduleError):
        direct_allgather_schedule((0, 1), ((0, 0, 1), (1, 1, 1)), 2, 0)


@pytest.mark.parametrize("root", [0, 2, 3])
@pytest.mark.parametrize("link", ["push", "pull"])
def test_chain_broadcast_over_threads(root, link):
    rng = np.random.default_rng(root)
    sched = chain_broadcast_schedule([0, 1, 2, 3], root, 23, 4)
    inputs = [[rng.normal(size=23)] for _ in range(4)]
    out = run_ranks([sched], inputs, nslots=2, link=link)
    for r in range(4):
        np.testing.assert_array_equal(out[(r, 0)], inputs[root][0])


def test_hazards_match_the_quadratic_definition():
    """The block index finds exactly the conflicting earlier steps (brute force on random steps)."""
    rng = np.random.default_rng(11)
    steps = []
    for _ in range(120):
        off, cnt = int(rng.integers(0, 90)), int(rng.integers(0, 12))
        kind = rng.choice(["send", "recv", "recv_reduce", "recv_send", "copy"])
        if kind == "copy":
            steps.append(Step("copy", off, cnt, src_offset=int(rng.integers(0, 100 - cnt))))
        elif kind == "recv_send":
            steps.append(Step("recv_send", off, cnt, peer=1, send_to=1))
        else:
            steps.append(Step(str(kind), off, cnt, peer=1))
    sched = Schedule("allreduce", (0, 1), 102, 5, programs=((0, tuple(steps)), (1, ())))
    prog = compile_program(sched, 0, {0: 0, 1: 1})
    sends = ("send", "recv_send")
    for i, a in enumerate(prog.actions):
        assert a.steps == (i,)  # no fusion asked for
        ri, wi = _ranges(steps[i])
        want = {j for j in range(i) if _overlap(wi, _ranges(steps[j])[0]) or _overlap(wi, _ranges(steps[j])[1])
                or _overlap(ri, _ranges(steps[j])[1])}
        assert set(a.deps) == want, i
        released = {j for j in range(i) if steps[j].op in sends
                    and _overlap(wi, [(steps[j].offset, steps[j].offset + steps[j].count)])}
        assert set(a.releases) == released, i
        later = [j for j in range(i + 1, len(steps)) if _overlap(ri + wi, _ranges(steps[j])[0] + _ranges(steps[j])[1])]
        assert a.final == (steps[i].op in ("recv", "recv_reduce") and steps[i].count > 0 and not later), i


def test_copy_out_is_the_last_touch_of_each_leftover_element():
    """Every element of ``leftover`` is copied out exactly once: by the action after which no step
    touches it (``copy_out``; only an action none of whose elements is touched later qualifies,
    so fusing cannot move the copy before a later reader), or else at the end (``untouched``).
    Brute force on random steps, fused and not."""
    rng = np.random.default_rng(5)
    for trial in range(20):
        steps, theirs = [], {1: [], 2: []}
        for _ in range(40):
            off, cnt, peer = int(rng.integers(0, 60)), int(rng.integers(0, 10)), int(rng.integers(1, 3))
            kind = rng.choice(["send", "recv", "recv_reduce", "recv_reduce", "copy"])
            if kind == "copy":
                steps.append(Step("copy", off, cnt, src_offset=int(rng.integers(0, 70 - cnt))))
            elif kind == "send":
                steps.append(Step("send", off, cnt, peer=peer, round=1))
            else:
                steps.append(Step(str(kind), off, cnt, peer=peer, round=1))
                theirs[peer].append(Step("send", off, cnt, peer=0))
        sched = Schedule("allreduce", (0, 1, 2), 70, 5,
                         programs=((0, tuple(steps)), (1, tuple(theirs[1])), (2, tuple(theirs[2]))))
        for fuse in (1, 4):
            prog = compile_program(sched, 0, {0: 0, 1: 1, 2: 2}, fuse_inputs=fuse)
            left = {e for lo, hi in prog.leftover for e in range(lo, hi)}
            copied = [e for a in prog.actions for lo, hi in a.copy_out for e in range(lo, hi)]
            copied += [e for lo, hi in prog.untouched for e in range(lo, hi)]
            assert sorted(copied) == sorted(left), (trial, fuse)  # each once, nothing else
            touched_after = {}
            for a in prog.actions:
                for lo, hi in a.copy_out:
                    last = max(a.steps)
                    for j in range(last + 1, len(steps)):
                        reads, writes = _ranges(steps[j])
                        assert not _overlap(reads + writes, [(lo, hi)]), (trial, fuse, a.index, j)
                    # ...and nothing after the action touches any of its elements at all
                    mine = [span for i in a.steps for span in _ranges(steps[i])[0] + _ranges(steps[i])[1]]
                    touched_after[a.index] = any(_overlap(mine, _ranges(steps[j])[0] + _ranges(steps[j])[1])
                                                 for j in range(last + 1, len(steps)))
            assert not any(touched_after.values())


def test_a_star_root_copies_its_shard_out_right_after_sending_it():
    """The cpu-host plan at two ranks: each root sends its reduced shard and copies it out at
    once (the copy overlaps the wait for the other shard); nothing is left for the end."""
    from blinkflow.planner import Plan, Tree
    from blinkflow.schedule.lower import lower

    plan = Plan("allreduce", "t", (0, 1), (Tree(0, 0.5, ((0, 1),)), Tree(1, 0.5, ((1, 0),))), 1.0, 1.0)
    sched = lower(plan, 10, chunk_elems=10, align=1)
    for d in (0, 1):
        prog = compile_program(sched, d, {0: 0, 1: 1}, fuse_inputs=8)
        assert prog.untouched == ()
        copying = [a for a in prog.actions if a.copy_out]
        assert len(copying) == 1 and copying[0].op == "send" and copying[0].send_to == 1 - d
        assert copying[0].copy_out == ((copying[0].offset, copying[0].offset + copying[0].count),)


@pytest.mark.parametrize("link,nslots", LINKS)
def test_direct_reducescatter_over_threads(link, nslots):
    rng = np.random.default_rng(nslots or 0)
    shards = ((0, 0, 7), (1, 7, 0), (2, 7, 12), (3, 19, 4))
    sched = direct_reducescatter_schedule((0, 1, 2, 3), shards, 23, 3)
    inputs = [[rng.normal(size=23)] for _ in range(4)]
    for fuse in (1, 2, 8):
        out = run_ranks([sched, sched], [i * 2 for i in inputs], nslots=nslots, link=link, fuse=fuse)
        for owner, off, cnt in shards:
            # the owner folds in its successors in a fixed order: own + next + next-but-one + ...
            order = [(owner + h) % 4 for h in range(4)]
            want = inputs[order[0]][0][off:off + cnt].copy()
            for r in order[1:]:
                want = want + inputs[r][0][off:off + cnt]
            for call in (0, 1):
                np.testing.assert_array_equal(out[(owner, call)][off:off + cnt], want)


def test_reductions_of_one_range_fuse_into_one_action_in_program_order():
    from blinkflow.planner import Plan, Tree
    from blinkflow.schedule.lower import lower

    star = Tree(0, 1.0, ((0, 2), (0, 1), (0, 3)))  # children folded in edge order: 2, 1, 3
    sched = lower(Plan("allreduce", "t", (0, 1, 2, 3), (star,), 1.0, 1.0), 24, chunk_elems=12)
    plain = compile_program(sched, 0, {d: d for d in range(4)})
    fused = compile_program(sched, 0, {d: d for d in range(4)}, fuse_inputs=8)
    capped = compile_program(sched, 0, {d: d for d in range(4)}, fuse_inputs=2)
    reduces = [a for a in fused.actions if a.reduces]
    assert len(reduces) == 2  # two chunks, three children folded into each
    assert all([src for src, _ in a.inputs] == [2, 1, 3] for a in reduces)
    assert len([a for a in plain.actions if a.reduces]) == 6
    assert len([a for a in capped.actions if a.reduces]) == 4  # 2 + 1 inputs per chunk
    # every step is performed exactly once, and deps point backwards
    for prog in (fused, capped):
        assert sorted(s for a in prog.actions for s in a.steps) == list(range(len(sched.program(0))))
        assert all(d < a.index for a in prog.actions for d in a.deps)
    # a child's chain (reduce, then forward up) never fuses: one input each
    assert all(len(a.inputs) <= 1 for a in compile_program(sched, 1, {d: d for d in range(4)}, 8).actions)


@pytest.mark.parametrize("link", ["push", "pull"])
@pytest.mark.parametrize("fuse", [1, 3, 8])
def test_planned_trees_run_with_fused_reductions(link, fuse):
    """Lowered plans (a single-root tree, ForestColl stars) give the same bits fused or not."""
    from blinkflow.planner import make_plan
    from blinkflow.schedule.lower import lower
    from blinkflow.topology.presets import get_preset

    topology = get_preset("dgx1-v100")
    devices = [0, 1, 2, 3, 4]
    plan = make_plan(topology, "allreduce", devices=devices)
    sched = lower(plan, 61, chunk_elems=7)
    rng = np.random.default_rng(fuse)
    inputs = [[rng.normal(size=61), rng.normal(size=61)] for _ in devices]
    out = run_ranks([sched, sched], inputs, nslots=2, link=link, fuse=fuse)
    base = run_ranks([sched, sched], inputs, nslots=2, link="push", fuse=1)
    for r in range(len(devices)):
        for call in (0, 1):
            np.testing.assert_array_equal(out[(r, call)], base[(0, call)])  # bitwise, everywhere
            np.testing.assert_allclose(out[(r, call)], sum(i[call] for i in inputs), rtol=1e-12)


@pytest.mark.parametrize("devices", [(0, 1), (0, 1, 2), (3, 0, 2, 1)])
@pytest.mark.parametrize("nelems, chunk", [(1, 1), (23, 3), (40, 7)])
def test_hand_made_schedules_pass_the_symbolic_checker(devices, nelems, chunk):
    # Tests and the GPU bench run them, so they get the same proof as the lowered plans.
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


R, A, B, D = 0, 1, 2, 3
X, Y = (0, 1), (1, 1)  # (offset, count)


def pull_schedule():
    """R folds range X from A, then from B. A sends X to R, overwrites X (a receive from D), and
    sends the new X to B, which forwards it to R. Rounds: A's overwrite waits for R's receive
    (round 1), B's chunk arrives at round 5."""
    b = ScheduleBuilder("allreduce", (R, A, B, D), 2)
    b.add(A, "send", *X, peer=R)
    b.add(R, "recv_reduce", *X, peer=A)
    b.add(D, "send", *X, peer=A)
    b.add(A, "recv", *X, peer=D)          # overwrites what R reads in place (pull): waits for R's release
    b.add(A, "send", *X, peer=B)
    b.add(B, "recv", *X, peer=A)
    b.add(B, "send", *X, peer=R)
    b.add(R, "recv_reduce", *X, peer=B)   # fused with R's first reduction of X
    return b.build(1)


def push_schedule():
    """Window 1: A's second transfer to R needs R's release of the first, which the fused
    action only gives once B's chunk is there, and B's chunk needs A's second transfer."""
    b = ScheduleBuilder("allreduce", (R, A, B), 2)
    b.add(A, "send", *X, peer=R)
    b.add(R, "recv_reduce", *X, peer=A)
    b.add(A, "send", *Y, peer=R)
    b.add(R, "recv", *Y, peer=A)
    b.add(R, "send", *Y, peer=B)
    b.add(B, "recv", *Y, peer=R)
    b.add(B, "copy", *X, src_offset=1)
    b.add(B, "send", *X, peer=R)
    b.add(R, "recv_reduce", *X, peer=B)
    return b.build(1)


@pytest.mark.parametrize("make,link", [(pull_schedule, "pull"), (push_schedule, "push")])
def test_a_reduction_is_not_fused_with_one_whose_chunk_depends_on_its_release(make, link):
    """Found by review: fusing R's two reductions of X made R hold back A's release until B's
    chunk came, and B's chunk needed that release (directly, or through a one-slot window)."""
    sched = make()
    sched.validate()
    ranks = {d: i for i, d in enumerate(sched.devices)}
    prog = compile_program(sched, R, ranks, fuse_inputs=2)
    assert len([a for a in prog.actions if a.reduces]) == 2  # kept apart
    n = len(sched.devices)
    inputs = [[np.arange(2, dtype=float) + 10 * r] for r in range(n)]
    run_ranks([sched], inputs, nslots=1, link=link, fuse=2)  # hung before
