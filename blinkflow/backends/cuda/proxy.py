"""The device executor's proxy: a host thread that carries the chunks of network edges and
watches every launch's deadline.

A block never talks to MPI. A connection to a rank on another host ends in this rank's pinned,
device-mapped host memory (NCCL's network proxy does the same):

* **sending**: the block writes the chunk into an *outbox* ring and raises the outbox ``tail``;
  the proxy sends that slot to the peer (MPI, tag = channel) and, once the send completed (the
  slot may be reused), raises the block's ``head``;
* **receiving**: the proxy waits until the block freed the slot (the block raises a ``head``
  here, in host memory), receives the next chunk into it, then raises the ring's ``tail``.

So the blocks see the same counters as on a connection inside the host. One transfer per
connection is in flight at a time; MPI keeps a (source, tag) pair in order, so chunks of one
connection arrive in sequence, across calls too.

Every call, even one without network edges, goes through the proxy, whose deadline raises the
launch's abort flag: a table that waits forever (a dead peer, a wrong table) ends every block,
and the call raises a :class:`BackendError` instead of hanging.

Nothing is posted for a call before its launch was issued: MPI matches a receive by (source,
tag) alone, so a receive posted for a call whose launch then failed could take the peer's chunk
of the *next* call (and raise the ring's tail for it) before its cancellation, and that call's own
receive would wait for a chunk that already came.
"""
from __future__ import annotations

import dataclasses
import queue
import threading
import time
from typing import List, Optional, Sequence

import numpy as np

from ...errors import BackendError
from ..host_memory import view
from ..teardown import quietly


@dataclasses.dataclass
class Edge:
    """One network connection of one call: ``transfers`` chunks from sequence ``base`` on."""

    peer: int
    channel: int
    sending: bool
    ring: int
    """Address of the ring of ``window`` slots of ``slot_bytes`` (pinned host memory)."""
    tail: int
    head: int
    base: int
    counts: Sequence[int]
    """Bytes of each transfer of the call."""
    window: int
    slot_bytes: int
    done: int = 0
    request: object = None

    def slot(self, k: int) -> np.ndarray:
        seq = self.base + k
        return view(self.ring + (seq % self.window) * self.slot_bytes, self.counts[k], np.uint8)


@dataclasses.dataclass
class ProxyCall:
    """The launching thread's side of one call: ``issued`` once its launch returned (or failed,
    with the abort flag raised first), ``launched`` once the launch ended."""

    issued: threading.Event = dataclasses.field(default_factory=threading.Event)
    launched: threading.Event = dataclasses.field(default_factory=threading.Event)


class Proxy:
    """One thread per backend serving calls in order (every call's edges, and its deadline)."""

    def __init__(self, comm):
        self.comm = comm
        self._work: "queue.Queue" = queue.Queue()
        self._done: "queue.Queue" = queue.Queue()
        self._thread = threading.Thread(target=self._main, name="blinkflow-device-proxy", daemon=True)
        self._thread.start()

    def start(self, edges: List[Edge], abort: np.ndarray, timeout: float) -> "ProxyCall":
        """Serve ``edges`` for the call about to launch, once :meth:`ProxyCall.issued` says the
        launch was issued, and raise ``abort[0]`` if the call is not done within ``timeout`` s."""
        call = ProxyCall()
        self._work.put((edges, abort, time.monotonic() + timeout, timeout, call))
        return call

    def finish(self, call: "ProxyCall") -> None:
        """After the launch ended (or failed: ``abort[0]`` raised first): wait for the call's
        edges; raise the proxy's BackendError if it failed or the deadline passed."""
        call.issued.set()
        call.launched.set()
        error = self._done.get()
        if error is not None:
            raise BackendError(error)

    def close(self) -> None:
        self._work.put(None)
        self._thread.join(timeout=5)

    def _main(self) -> None:
        from mpi4py import MPI

        while True:
            item = self._work.get()
            if item is None:
                return
            edges, abort, deadline, timeout, call = item
            try:
                self._serve(MPI, edges, abort, deadline, timeout, call)
                self._done.put(None)
            except BaseException as e:  # noqa: BLE001 - reported to the calling thread
                abort[0] = 1
                for e2 in edges:
                    if e2.request is not None:
                        quietly(e2.request.Cancel)  # no Wait: a send whose peer stalled may never complete
                self._done.put(str(e) if isinstance(e, BackendError) else f"device proxy failed: {e!r}")

    def _serve(self, MPI, edges: List[Edge], abort: np.ndarray, deadline: float, timeout: float,
               call: "ProxyCall") -> None:
        call.issued.wait(max(0.0, deadline - time.monotonic()))
        if abort[0] or not call.issued.is_set():
            # the launch failed (abort raised before ``issued``) or never returned: post nothing
            raise BackendError("the device executor's launch was aborted")
        launched = call.launched
        counters = {}

        def counter(addr):
            c = counters.get(addr)
            if c is None:
                c = counters[addr] = view(addr, 1, np.int64)
            return c

        left = [e for e in edges if e.counts]
        while True:
            moved = False
            for e in left:
                if e.request is not None:
                    if not e.request.Test():
                        continue
                    e.request = None
                    e.done += 1
                    # A send completed: the block may reuse the slot. A receive landed: the
                    # block may read it.
                    counter(e.head if e.sending else e.tail)[0] = e.base + e.done
                    moved = True
                if e.done == len(e.counts):
                    continue
                k = e.done
                if e.sending:
                    if counter(e.tail)[0] >= e.base + k + 1:
                        e.request = self.comm.Isend([e.slot(k), MPI.BYTE], dest=e.peer, tag=e.channel)
                        moved = True
                elif counter(e.head)[0] >= e.base + k + 1 - e.window:
                    e.request = self.comm.Irecv([e.slot(k), MPI.BYTE], source=e.peer, tag=e.channel)
                    moved = True
            left = [e for e in left if e.done < len(e.counts) or e.request is not None]
            if abort[0]:
                raise BackendError("the device executor's launch was aborted")
            if time.monotonic() > deadline:
                abort[0] = 1
                waiting = [f"{'send to' if e.sending else 'receive from'} rank {e.peer} channel {e.channel} "
                           f"chunk {e.done}/{len(e.counts)}" for e in left]
                raise BackendError(f"the device executor's call was not done within {timeout:g} s; its blocks were "
                                   "aborted" + (f" (network edges waiting: {'; '.join(waiting[:6])})" if waiting else "")
                                   + ". A peer failed or is stalled; see the other ranks' errors")
            if not left and launched.is_set():
                return
            if not moved:
                time.sleep(2e-5)
