"""The side channel (blinkflow/runtime/side_channel.py) frees its communicator when it closes,
whatever state its posted receives are in (a revoked one at ``teardown.free_kept``, which the
elastic reset calls once the survivors have shrunk again), and closing never waits for a peer.
Run by ``test_side_channel.py`` under mpirun at 1, 2 and 4 ranks, plain and with ULFM (``mpirun
--with-ft ulfm``, as blinkrun starts elastic jobs; the launch sets ``ULFM=1``); reports through
tests/harness.py.

Each rank posts what its watchdog posts (a heartbeat receive from its right neighbour, a notice
receive from any rank) before the channel closes: with the peers there (a clean shutdown); after
the communicator was revoked, as an elastic reset revokes every communicator of the runtime it
retires before releasing it (the posted receives then complete in error, and a test of them
raises); and with a heartbeat and a notice received and the next receives posted. A
communicator left allocated in an elastic job that spawned ranks is one more that
``MPI_Finalize`` must disconnect (tests/elastic/test_grow_cycles.py counts them).
"""
import os
import sys
import time

from mpi4py import MPI

import blinkflow  # noqa: F401 - sets the MPI defaults (ULFM) before mpi4py starts MPI
from blinkflow.backends import teardown
from blinkflow.runtime.side_channel import open_side_channel
from harness import run_cases, skip

#: Longer than a close may take: it cancels and tests, never waits for a peer.
CLOSE_BOUND_S = 5.0


def _posted(rank, size):
    channel = open_side_channel(MPI.COMM_WORLD)
    assert channel.concurrent, "mpi4py starts MPI with MPI_THREAD_MULTIPLE by default"
    right = (rank + 1) % size
    assert channel.heard(right) is False   # posts the heartbeat receive (nobody beat yet)
    assert channel.poll_notice() is None   # posts the notice receive
    return channel, right


def _closes_and_frees(channel):
    began = time.monotonic()
    channel.close()
    assert time.monotonic() - began < CLOSE_BOUND_S, f"close took {time.monotonic() - began:.1f} s"
    assert channel.comm == MPI.COMM_NULL, "the side channel's communicator was left allocated"
    channel.close()   # a second close does nothing


def case_close_with_the_peers_there_frees_the_communicator(rank, size):
    channel, _ = _posted(rank, size)
    MPI.COMM_WORLD.Barrier()
    _closes_and_frees(channel)


def case_close_after_the_communicator_was_revoked_keeps_it_until_free_kept(rank, size):
    """A revoked communicator is a retired runtime's: freed, its context id would go to the next
    communicator made, with whatever a dead rank still sent on it (backends/teardown.py)."""
    if os.environ.get("ULFM") != "1":
        skip("a revocation needs ULFM (mpirun --with-ft ulfm); this launch is without it")
    channel, right = _posted(rank, size)
    MPI.COMM_WORLD.Barrier()
    if rank == 0:
        channel.comm.Revoke()
    # Every rank's posted receives complete in error once the revocation reaches it; the
    # watchdog's looks test them (each test raises inside the channel, which says nothing) and
    # drive MPI's progress, which brings the revocation.
    deadline = time.monotonic() + CLOSE_BOUND_S
    while not channel.comm.Is_revoked():
        assert time.monotonic() < deadline, "the revocation did not reach this rank"
        assert channel.heard(right) is False
        assert channel.poll_notice() is None
        time.sleep(0.01)
    assert channel.heard(right) is False
    assert channel.poll_notice() is None
    MPI.COMM_WORLD.Barrier()
    began = time.monotonic()
    channel.close()
    assert time.monotonic() - began < CLOSE_BOUND_S, f"close took {time.monotonic() - began:.1f} s"
    assert channel.comm != MPI.COMM_NULL and channel.comm.Is_revoked(), "a revoked communicator was freed at once"
    teardown.free_kept()   # what the next reset, or the exit, does
    assert channel.comm == MPI.COMM_NULL, "the revoked side channel's communicator was left allocated"


def case_close_after_messages_arrived_frees_the_communicator(rank, size):
    if size == 1:
        skip("needs a peer to beat and to send a notice")
    channel, right = _posted(rank, size)
    MPI.COMM_WORLD.Barrier()   # every rank posted its receives before any beat is sent
    channel.beat((rank - 1) % size)
    if rank == size - 1:
        channel.tell([0], "a notice for rank 0")
    deadline = time.monotonic() + CLOSE_BOUND_S
    while not channel.heard(right):
        assert time.monotonic() < deadline, f"no heartbeat from rank {right}"
        time.sleep(0.01)
    if rank == 0:
        notice = None
        while notice is None:
            assert time.monotonic() < deadline, f"no notice from rank {size - 1}"
            notice = channel.poll_notice()
            time.sleep(0.01)
        assert notice["rank"] == size - 1 and notice["text"] == "a notice for rank 0", notice
    MPI.COMM_WORLD.Barrier()
    _closes_and_frees(channel)


if __name__ == "__main__":
    run_cases(globals(), MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size(), sys.argv[1:])
