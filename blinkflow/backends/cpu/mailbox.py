"""Control messages between the ranks of one host through shared memory: a ring per pair.

The runner's control messages (READY and FREE, six integers) inside a host go through here
rather than MPI: from Python an MPI message costs an ``Isend``, a ``Testsome`` that finds it and
a new ``Irecv``; a round trip measured 10.4 us at 2 ranks on the development VM, both sides
spinning, where writing the same six integers into a peer's shared memory and watching a counter
took 3.8 us (``python -m blinkflow.bench control``; docs/benchmarks.md). A 2-rank all-reduce
sends four such messages a call, two of them on its critical path. NCCL signals the same way inside a node: a flag in memory
both sides map (its LL / simple protocols' head and tail counters).

Layout: every local rank owns one segment of a shared window (:mod:`.shm`); in it, one *box*
per sender. A box is a header and a ring of ``slots`` messages, one cache line each. Word 0 of
the header counts the messages the sender has written and word 1 those it *spilled* (only the
sender writes either), word 8 (its own cache line) those the receiver has read (only it writes
it); message ``k`` sits in slot ``k % slots``. So each word has one writer, and a sender never
overwrites a message the receiver has not read.

A full ring never makes the sender wait. The receiver reads its boxes only inside the runner,
and it may be elsewhere for long: a rank that left a deferred call (``run_program(defer=...)``)
goes on to the next negotiation or collective while a peer still reads its chunks and owes it a
FREE per chunk; a sender waiting for room there would wait for a rank that waits for it (a
broadcast of more chunks than slots, then any blocking collective, hung so). Instead
:meth:`Mailbox.post` refuses, the caller (:class:`~blinkflow.backends.wire.MpiWire`) sends that
message over MPI, which never waits for the receiver, and counts it in the spill word; the
receiver tests its MPI control receive only while the spill words say messages went that way.
Per sender, a spilled message may arrive after later ones from the ring: the runner needs no
order (a READY is filed under its sequence number, a FREE in a set).

Ordering. A READY says "the chunk is in my segment": a receiver that sees the message must see
the chunk. The sender writes the chunk, then the message, then the count; the receiver reads
the count, then the message, then the chunk; and it reads a message before it says so in the
read count. That is correct where every core sees another core's stores in the order they were
made and a core does not move a load ahead of an earlier load, nor a store ahead of an earlier
load: x86-64's total store order. (The large copies of ``np.copyto`` may use non-temporal stores;
glibc ends those with an ``sfence``.) Python has no memory fence to offer on weaker CPUs
(aarch64, POWER), so there the messages go over MPI, as before: ``BLINKFLOW_CPU_CONTROL``
(:func:`shared_memory_ordered`).
"""
from __future__ import annotations

import platform
import struct
from typing import List, Sequence, Tuple

from ...errors import BackendError
from .shm import _Window

#: CPUs whose stores other cores see in program order (total store order), the mailbox's need.
#: 64-bit only: a 32-bit x86 writes a count's 8 bytes as two stores, which a reader could see
#: half done.
TSO_MACHINES = ("x86_64", "amd64")
#: int64 words per message slot: one 64-byte cache line (six used).
SLOT_WORDS = 8
#: Header words of a box: the sender's cache line (write count, spill count), then the receiver's
#: (read count).
HEADER_WORDS = 16
SPILL_WORD = 1
READ_WORD = 8
#: Ring slots per box: at most this many, fewer on hosts of many ranks (each rank's segment holds
#: one box per local rank, so its size grows with the square of the host's ranks).
MAX_SLOTS = 1024
SEGMENT_BUDGET = 4 * 1024 * 1024

HEADER_BYTES, SLOT_BYTES = HEADER_WORDS * 8, SLOT_WORDS * 8
_MESSAGE = struct.Struct("6q")

Message = Tuple[int, int, int, int, int, int]


def shared_memory_ordered(machine: str = "") -> bool:
    """Whether this CPU orders stores as the mailbox needs (see the module docstring)."""
    return (machine or platform.machine()).lower() in TSO_MACHINES


def slots_for(local_size: int) -> int:
    """Ring slots per box for a host of ``local_size`` ranks (a power of two, 16 to 1024)."""
    slots = MAX_SLOTS
    while slots > 16 and local_size * (HEADER_WORDS + slots * SLOT_WORDS) * 8 > SEGMENT_BUDGET:
        slots //= 2
    return slots


class Mailbox:
    """This rank's boxes (one per local sender) and its view of every peer's box for it.
    Creating and closing one are collective over ``local_comm``."""

    def __init__(self, local_comm, local_ranks: Sequence[int], slots: int = 0):
        """``local_ranks``: the global rank of every local rank, in local rank order."""
        size = local_comm.Get_size()
        self.me = local_comm.Get_rank()
        self.slots = slots or slots_for(size)
        box_bytes = (HEADER_WORDS + self.slots * SLOT_WORDS) * 8
        self._window = _Window(local_comm, size * box_bytes)
        self._window.mine[:] = 0
        local_comm.Barrier()  # every count is zero before anyone writes a message
        # Plain memoryviews, a fraction of numpy's cost per access on the path of every transfer.
        # A message is one ``pack_into``. A count is an item of an int64 view: one aligned 8-byte
        # store or load, which another core sees whole. (Never ``pack_into`` a count: it zeroes
        # its target before it writes the value, and a peer reading in between sees 0.)
        segments = [memoryview(seg) for seg in self._window.segments]
        counts = [view.cast("q") for view in segments]
        self._in, self._in_counts = segments[self.me], counts[self.me]  # box s (from rank s) at s * box_bytes
        self._out, self._out_counts = segments, counts  # our box in rank d's segment at me * box_bytes
        self._box, self._box_words = box_bytes, box_bytes // 8
        self._local_of = {int(g): i for i, g in enumerate(local_ranks)}
        self._written = [0] * size  # messages this rank wrote into d's box
        self._spilled = [0] * size  # messages to d that went by MPI instead (its box was full)
        self._room = [self.slots] * size  # messages it may still write there before rereading d's count
        self._read = [0] * size  # messages this rank read from s's box
        self._peers = [s for s in range(size) if s != self.me]
        self.spilled_to_me = 0
        """What the peers' spill words said at the last :meth:`poll`: messages they sent this rank by
        MPI, in total."""

    def post(self, rank: int, message: Message) -> bool:
        """Write ``message`` into global ``rank``'s box from this rank; False, writing nothing, when
        that box is full (the caller sends it another way and calls :meth:`spilled`). Never waits."""
        d = self._local_of.get(rank, self.me)
        if d == self.me:
            raise BackendError(f"a control message to rank {rank}, which the shared-memory mailbox of local rank "
                               f"{self.me} does not reach (control messages go to the other ranks of this host)")
        if not self._room[d]:
            self._room[d] = self._free_slots(d)
            if not self._room[d]:
                return False
        k = self._written[d]
        _MESSAGE.pack_into(self._out[d], self.me * self._box + HEADER_BYTES + (k % self.slots) * SLOT_BYTES, *message)
        self._written[d] = k + 1
        self._room[d] -= 1
        self._out_counts[d][self.me * self._box_words] = k + 1  # after the message: it is read after the count
        return True

    def spilled(self, rank: int) -> None:
        """One message to global ``rank`` went another way (its box was full): say so in the spill
        word, after sending it (the receiver looks for it from then on until it came)."""
        d = self._local_of[rank]
        self._spilled[d] += 1
        self._out_counts[d][self.me * self._box_words + SPILL_WORD] = self._spilled[d]

    def _free_slots(self, d: int) -> int:
        return self.slots - (self._written[d] - self._out_counts[d][self.me * self._box_words + READ_WORD])

    def poll(self) -> List[Message]:
        """Every message that arrived in the boxes since the last call, each sender's in the order
        it wrote them; also updates :attr:`spilled_to_me`."""
        messages: List[Message] = []
        inbox, counts, slots = self._in, self._in_counts, self.slots
        spilled = 0
        for s in self._peers:
            word = s * self._box_words
            spilled += counts[word + SPILL_WORD]
            written = counts[word]
            read = self._read[s]
            if written == read:
                continue
            base = s * self._box + HEADER_BYTES
            for k in range(read, written):
                messages.append(_MESSAGE.unpack_from(inbox, base + (k % slots) * SLOT_BYTES))
            self._read[s] = written
            counts[word + READ_WORD] = written  # after reading them: those slots may be reused
        self.spilled_to_me = spilled
        return messages

    def close(self) -> None:
        """Free the window (collective over the host's ranks)."""
        if self._window is not None:
            for view in self._out_counts + self._out:
                view.release()
            self._in = self._out = self._in_counts = self._out_counts = None
            self._window.free()
            self._window = None
