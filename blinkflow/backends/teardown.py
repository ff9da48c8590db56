"""Releasing MPI and CUDA objects at teardown, when a peer may already have failed.

After a peer's failure (or under ULFM) ``Free`` and ``Cancel`` may raise, and so may CUDA's frees
after a failed call; at teardown there is nothing left to save, so they are attempted and their
errors dropped, in one place for the backends and the runtime alike.
"""
from __future__ import annotations

import threading
from typing import List

_kept: List[object] = []
"""Revoked communicators :func:`free` keeps until :func:`free_kept`."""
_kept_lock = threading.Lock()   # a release left running past its deadline may still keep one


def free(comm) -> None:
    """``comm.Free()``, ignoring the error a failed peer can make it raise.

    A revoked communicator (a runtime retired after a loss, :mod:`blinkflow.elastic.reform`) is
    kept instead, until :func:`free_kept`: a rank declared dead that runs again, or one that died
    while the job re-formed, may still have messages on their way to it, and MPI hands a freed
    communicator's context id to the next one made, whose matching then takes those messages for
    its own (Open MPI's ob1 queues a message for an unknown context id and gives it to the next
    communicator with that id: one from a rank that communicator does not have aborts the process
    with status 255, one from a rank it has is delivered as if sent on it). A communicator that
    exists when they arrive takes them, and drops them when it is freed."""
    try:
        if comm.Is_revoked():
            keep(comm)
            return
        comm.Free()
    except Exception:  # noqa: BLE001 - nothing to save at teardown
        pass


def keep(comm) -> None:
    """Free ``comm`` at the next :func:`free_kept`, not now (see :func:`free`)."""
    with _kept_lock:
        _kept.append(comm)


def free_kept() -> None:
    """Free the communicators :func:`free` kept. The elastic reset calls it once the survivors
    have shrunk again (whatever a survivor sent on them has arrived by then: messages between two
    processes keep their order), before ranks are added, and at exit before ``MPI_Finalize``."""
    with _kept_lock:
        kept, _kept[:] = list(_kept), []
    for comm in kept:
        quietly(comm.Free)


def cancel(request) -> None:
    """Cancel and complete a pending request, ignoring errors (it may have completed, or its
    peer failed)."""
    try:
        request.Cancel()
        request.Wait()
    except Exception:  # noqa: BLE001 - nothing to cancel any more
        pass


def quietly(release, *args) -> None:
    """``release(*args)``, its error dropped, so a teardown after a failure releases the rest."""
    try:
        release(*args)
    except Exception:  # noqa: BLE001 - nothing to save at teardown
        pass
