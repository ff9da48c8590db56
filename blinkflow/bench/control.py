"""``python -m blinkflow.bench control``: the round trip of one control message between two
ranks of a host, through the cpu backend's shared-memory rings (:mod:`blinkflow.backends.cpu.mailbox`)
and through MPI (:class:`blinkflow.backends.wire.MpiWire` without a mailbox), the two taking turns
block by block in the same processes.

Run it under ``mpirun -np 2`` (ranks 0 and 1 play ping-pong; more ranks wait). A round trip is
rank 0 posting a READY-sized message and polling until rank 1's answer arrives, rank 1 polling
and answering: what the runner's control messages cost on the critical path of a collective,
Python included. Both sides spin (no sleeps), as the runner does once a peer has been heard.
"""
from __future__ import annotations

import statistics
import time

import click


def _round_trips(post, poll, me: int, peer: int, count: int) -> float:
    """Seconds per round trip over ``count`` of them (rank 0 starts each)."""
    def wait_one():
        while True:
            events = poll()
            if events:
                return events

    start = time.perf_counter()
    for k in range(count):
        if me == 0:
            post(peer, k)
            wait_one()
        else:
            wait_one()
            post(peer, k)
    return (time.perf_counter() - start) / count


@click.command()
@click.option("--trips", type=click.IntRange(min=1), default=2000, show_default=True,
              help="round trips per block")
@click.option("--blocks", type=click.IntRange(min=1), default=10, show_default=True,
              help="blocks per path, alternating")
def command(trips: int, blocks: int) -> None:
    from mpi4py import MPI

    from ..backends.cpu.mailbox import Mailbox, shared_memory_ordered
    from ..backends.wire import MpiWire
    from ..schedule.transport import READY

    world = MPI.COMM_WORLD
    local = world.Split_type(MPI.COMM_TYPE_SHARED)
    if world.Get_size() < 2 or local.Get_size() != world.Get_size():
        raise click.UsageError("run it under mpirun -np 2 on one host")
    me = world.Get_rank()
    peer = 1 - me if me < 2 else None
    comm = world.Dup()
    wire = MpiWire(comm)
    mailbox = Mailbox(local, list(range(world.Get_size()))) if shared_memory_ordered() else None
    paths = {"mpi": (lambda dst, k: wire.post(dst, READY, 0, k, (0, 0)), wire.poll)}
    if mailbox is not None:
        # Ping-pong leaves at most one unread message per ring, so a post is never refused.
        paths["shm"] = (lambda dst, k: mailbox.post(dst, (READY, me, 0, k, 0, 0)), mailbox.poll)
    times = {name: [] for name in paths}
    for _ in range(blocks):
        for name, (post, poll) in paths.items():
            world.Barrier()
            if peer is not None:
                times[name].append(_round_trips(post, poll, me, peer, trips))
            wire.flush()
    world.Barrier()
    if me == 0:
        click.echo(f"control message round trip, 2 ranks, {blocks} blocks of {trips} alternating "
                   "(median of block means [min-max])")
        for name, ts in times.items():
            click.echo(f"  {name}: {statistics.median(ts) * 1e6:.2f} us [{min(ts) * 1e6:.2f}-{max(ts) * 1e6:.2f}]")
        if mailbox is None:
            click.echo("  shm: not on this CPU (no total store order)")
    wire.close()
    if mailbox is not None:
        mailbox.close()
    comm.Free()
    local.Free()
