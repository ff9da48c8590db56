"""The unit tests' one stand-in for an mpi4py communicator: ``FakeComm(world, rank)`` answers the
collectives the runtime's pure parts call, through a *world* that says what the other ranks
contribute — real ranks as threads (:class:`ThreadWorld`), or contributions fixed in advance
(:class:`ScriptedWorld`)."""
import threading

import numpy as np


class ThreadWorld:
    """Collectives among ``size`` threads: every call deposits, meets, reads, meets again."""

    def __init__(self, size):
        self.size = size
        self.slots = [None] * size
        self.barrier = threading.Barrier(size, timeout=10)

    def exchange(self, rank, value):
        self.slots[rank] = value
        self.barrier.wait()
        every = list(self.slots)
        self.barrier.wait()
        return every


class ScriptedWorld:
    """Peers whose contributions are given up front; ``None`` marks the calling rank's place."""

    def __init__(self, every):
        self.every = list(every)

    @property
    def rank(self):
        return self.every.index(None)

    def exchange(self, rank, value):
        return [value if e is None else e for e in self.every]


class Done:
    """A request that has completed (the fake collectives complete on the call)."""

    def Test(self):
        return True


class FakeComm:
    def __init__(self, world, rank):
        self.world, self.rank = world, rank

    def Iallreduce(self, send, recv, op):  # any buffers, as mpi4py takes them; the op is BAND
        every = self.world.exchange(self.rank, np.frombuffer(send, np.uint8).copy())
        np.frombuffer(recv, np.uint8)[...] = np.bitwise_and.reduce(np.stack(every), axis=0)
        return Done()

    def gather(self, obj, root=0):
        every = self.world.exchange(self.rank, obj)
        return every if self.rank == root else None

    def bcast(self, obj, root=0):
        return self.world.exchange(self.rank, obj)[root]

    def allgather(self, obj):
        return self.world.exchange(self.rank, obj)
