"""Run by test_schedule_trace.py: what the CPU backend runs is the lowered schedule.

For every collective each rank records the transfers its transport makes, as they happen, and
compares them with its program in the schedule object the backend ran: the same peers, ranges
and channels, in each (peer, channel) queue's order (the IR's FIFO matching), and nothing else.
The simulator then runs that very schedule object. Under ``BLINKFLOW_SPLIT_HOSTS=2`` the
all-reduce is the three-phase one, and transfers between the pretend hosts must appear.
Every rank prints the test harness's completion marker when all of it held.
"""
import collections
import dataclasses
import faulthandler

import numpy as np
from mpi4py import MPI

from blinkflow.backends.cpu import CpuBackend
from blinkflow.config import Config
from blinkflow.ops import ReduceOp
from blinkflow.runtime.standalone import standalone_context
from blinkflow.schedule.ir import RECEIVING_OPS, REDUCING_OPS
from blinkflow.sim import simulate
from harness import done

comm = MPI.COMM_WORLD
RANK, SIZE = comm.Get_rank(), comm.Get_size()


def expected(program):
    """The transfers ``program``'s schedule says this rank makes, queue by queue."""
    rank_of = {d: r for r, d in enumerate(program.schedule.devices)}
    queues = collections.defaultdict(list)
    device = program.schedule.devices[program.rank]
    for step in program.schedule.program(device):
        if step.op in RECEIVING_OPS:
            kind = "recv_reduce" if step.op in REDUCING_OPS else "recv"
            queues[(kind, rank_of[step.peer], step.channel)].append((step.offset, step.count))
        if step.destination is not None:
            queues[("send", rank_of[step.destination], step.channel)].append((step.offset, step.count))
    return dict(queues)


def observed(trace):
    """The transfers made, queue by queue in sequence order. A queue's sends leave in that order
    (MPI's matching needs it); its receives may run in any order once their chunks are there."""
    queues = collections.defaultdict(list)
    for kind, peer, channel, seq, offset, count in trace:
        queues[(kind, peer, channel)].append((seq, offset, count))
    out = {}
    for key, transfers in queues.items():
        seqs = [s for s, _, _ in transfers]
        if key[0] == "send":
            assert seqs == sorted(seqs), f"rank {RANK}: sends of queue {key} left out of order: {seqs}"
        ordered = sorted(transfers)
        assert [s for s, _, _ in ordered] == list(range(ordered[0][0], ordered[0][0] + len(ordered))), (key, seqs)
        out[key] = [(offset, count) for _, offset, count in ordered]
    return out


def check_simulated(schedule, topology, what):
    """The simulator runs the very schedule object the runner ran, whole: every step of every
    device, the call's bytes, the job ending when its last device does, and at least the bytes the
    schedule sends crossing the links (routes through switches cross more than one)."""
    result = simulate(schedule, topology)
    steps = sum(len(steps) for _, steps in schedule.programs)
    assert (result.collective, result.ndevices, result.nsteps, result.size_bytes) == \
        (schedule.collective, len(schedule.devices), steps, schedule.nelems * 4), (what, result)
    assert set(result.per_rank) == set(schedule.devices), (what, result.per_rank)
    assert all(0 < t <= result.seconds for d, t in result.per_rank.items() if schedule.program(d)), what
    assert max(result.per_rank.values()) == result.seconds, what
    sent = 4 * sum(step.count for _, steps in schedule.programs for step in steps if step.destination is not None)
    moved = sum(result.link_bytes.values())
    assert sent > 0 and moved >= sent, f"{what}: the schedule sends {sent} bytes, the simulator moved {moved}"
    assert all(0 < u <= 1 + 1e-9 for u in result.link_utilisation.values()), (what, result.link_utilisation)


def check(be, what, program):
    got, want = observed(be.trace), expected(program)
    assert got == want, f"rank {RANK} {what}: ran {got}, the schedule says {want}"
    assert be.trace, f"rank {RANK} {what}: nothing moved"
    check_simulated(program.schedule, be.ctx.topology, what)
    return {peer for _, peer, _, _, _, _ in be.trace}


def main():
    faulthandler.dump_traceback_later(120, exit=True)
    config = dataclasses.replace(Config.from_env(), chunk_bytes=64 * 1024)  # several chunks per tree
    be = CpuBackend(standalone_context(MPI.COMM_WORLD, config))
    chunk = be._choose("allreduce", 0, 4).chunk_elems(4)
    peers = set()
    n = 100_003
    counts = [1000 + 7 * r for r in range(SIZE)]
    rng = np.random.default_rng(RANK)

    be.trace = []
    buf = be.buffer(n, np.float32)
    buf[...] = rng.random(n)
    be.allreduce(buf, ReduceOp.SUM)
    peers |= check(be, "allreduce", be.programs.get("allreduce", n, chunk))

    be.trace = []
    out = np.empty(n, np.float32)
    buf = be.buffer(n, np.float32)
    buf[...] = rng.random(n)
    be.allreduce(buf, ReduceOp.MAX, out=out)  # out of place: the same transfers
    check(be, "allreduce into out", be.programs.get("allreduce", n, chunk))

    root = SIZE - 1
    be.trace = []
    be.broadcast(rng.random(n).astype(np.float32), root)
    check(be, "broadcast", be.programs.get("broadcast", n, chunk, root=root))

    be.trace = []
    be.allgather(rng.random(counts[RANK]).astype(np.float32), np.empty(sum(counts), np.float32), counts)
    check(be, "allgather", be.programs.get("allgather", sum(counts), chunk, counts=counts))

    be.trace = []
    be.reducescatter(rng.random(sum(counts)).astype(np.float32), np.empty(counts[RANK], np.float32), counts,
                     ReduceOp.SUM)
    check(be, "reducescatter", be.programs.get("reducescatter", sum(counts), chunk, counts=counts))

    layout = be.layout
    if layout.nhosts > 1:  # the three-phase all-reduce moved data between the pretend hosts
        remote = [p for p in peers if not layout.same_host(p)]
        assert remote, f"rank {RANK}: no transfer crossed hosts in the all-reduce ({peers})"
        plan = be.ctx.plan_for("allreduce")
        assert plan.is_three_phase, plan.algorithm
    be.close()
    done(RANK)


if __name__ == "__main__":
    main()
