"""What the runner (:mod:`.runner`) needs from a backend: a :class:`Transport`.

A transport moves one program's chunks between ranks and combines them on one buffer. The
runner decides *when* an action may run; the transport decides *how*:

* ``issue(action, ...)`` performs (CPU) or enqueues (GPU) the action's local work (reduce-into,
  copy) and its transfer, and tells the peers what they need to know (the chunk is READY, the
  receive slot is FREE again) in whatever way the link between the two ranks works;
* ``poll()`` / ``wait()`` report those events from the peers (and from the transport's own
  transfers, e.g. an MPI send that completed).

Links differ in two ways the runner must know about, per peer:

``window(peer)``  receive slots per (peer, channel) at the receiver: the sender may run that
                  many transfers ahead of the receiver's releases (a GPU's IPC slots). None: no
                  slots to wait for (the receiver reads our buffer in place, or MPI buffers).
``holds(peer)``   whether a send keeps reading its source range after it was issued, until it is
                  released (the peer pulls from our shared memory; an ``Isend`` is in flight).
                  Then an action that overwrites that range waits for the release.

Events are ``(kind, peer, channel, seq, payload)`` with ``kind`` :data:`READY` (peer's transfer
``seq`` on ``channel`` can be consumed; ``payload`` says where, for transports that pull) or
:data:`FREE` (peer released our transfer ``seq``).
"""
from __future__ import annotations

import abc
from typing import Any, List, Optional, Sequence, Tuple

READY = 1
FREE = 2

Event = Tuple[int, int, int, int, Any]


class Transport(abc.ABC):
    """One backend's way of running a program on one buffer."""

    @abc.abstractmethod
    def window(self, peer: int) -> Optional[int]:
        """Transfers to ``peer`` per channel that may precede its releases; None: unlimited."""

    @abc.abstractmethod
    def holds(self, peer: int) -> bool:
        """Whether a send to ``peer`` reads its source range until the transfer is released."""

    def begin(self, program, recv_seqs: Sequence[Tuple[int, ...]]) -> None:
        """Called before the first action, with the absolute sequence numbers of every action's
        inputs (post receives, order streams after the caller's)."""

    @abc.abstractmethod
    def issue(self, action, recv_seqs: Tuple[int, ...], send_seq: int, wait_free: bool,
              payloads: Tuple[Any, ...]) -> None:
        """Run (or enqueue) ``action``: combine its inputs (``action.inputs``, absolute sequence
        numbers ``recv_seqs``, each with the ``payloads`` its READY carried) into its range, in
        that order after the local value, and send the range when it sends (``send_seq``, or -1).
        ``wait_free`` asks a device to wait for the peer's release of the destination slot."""

    @abc.abstractmethod
    def poll(self) -> List[Event]:
        """Events that already happened (never blocks)."""

    @abc.abstractmethod
    def wait(self) -> List[Event]:
        """Block until at least one event happened; return them."""

    def end(self, program) -> None:
        """Called after the last action was issued (order the caller's stream after ours)."""

    def flush(self) -> None:
        """Complete outstanding control messages (called at the end of every program)."""
