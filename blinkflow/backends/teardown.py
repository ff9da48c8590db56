"""Releasing MPI and CUDA objects at teardown, when a peer may already have failed.

After a peer's failure (or under ULFM) ``Free`` and ``Cancel`` may raise, and so may CUDA's frees
after a failed call; at teardown there is nothing left to save, so they are attempted and their
errors dropped, in one place for the backends and the runtime alike.
"""
from __future__ import annotations


def free(comm) -> None:
    """``comm.Free()``, ignoring the error a failed peer can make it raise."""
    try:
        comm.Free()
    except Exception:  # noqa: BLE001 - nothing to save at teardown
        pass


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
