"""Shared-memory segments of the ranks of one host (MPI-3 ``MPI_Win_allocate_shared``).

Every rank of ``local_comm`` owns one segment of a shared window and can read every peer's
segment directly: on a host the "links" of the plan's trees are plain loads and stores, so a
rank reduces its shard by reading its peers' segments in place and nobody copies data through
MPI. Windows are collective objects, so they are only created when every local rank asks for the
same size (the callers derive sizes from arguments that agree on every rank) and they grow
geometrically, so a job allocates a handful of times in its life, never per call.

Two windows serve two purposes:

* the *user* window backs :meth:`CpuBackend.buffer`: the runtime packs its fusion buffer
  straight into it (zero copy) and peers read it in place while a schedule runs. It has two
  slots handed out in turn, so a collective that stages its argument in a slot never writes
  over that argument when it is itself the previous slot, and a call returns while peers may
  still read its slot: the backend waits for their releases before it hands that slot out
  again, a call later (:func:`blinkflow.schedule.runner.settle`). On growth the previous window stays
  alive (a view into it stays usable for one more growth, more than ``Backend.buffer``
  promises); older ones are freed, collectively, so memory stays below three times the largest
  buffer.
* the *control* window holds each rank's table of where its tensors are, for peers that read
  them in place by cross-memory attach (:mod:`.cma`).
"""
from __future__ import annotations

from typing import List, Optional, Tuple

import numpy as np

from ...errors import BackendError

#: Segments are multiples of this (a huge page), and never smaller.
_GRANULE = 2 * 1024 * 1024


def _round_up(nbytes: int) -> int:
    """Next power of two of at least one granule: growth stays rare (log2 of the largest size)."""
    return _GRANULE if nbytes <= _GRANULE else 1 << (nbytes - 1).bit_length()


class _Window:
    """One shared window: this rank's segment and a uint8 view of every peer's segment."""

    def __init__(self, local_comm, nbytes: int):
        from mpi4py import MPI

        try:
            self.win = MPI.Win.Allocate_shared(nbytes, 1, comm=local_comm)
        except MPI.Exception as e:  # pragma: no cover - depends on the MPI build
            raise BackendError(f"cannot allocate a {nbytes}-byte shared-memory window on this host: {e}") from None
        self.nbytes = nbytes
        self.segments: List[np.ndarray] = []
        for peer in range(local_comm.Get_size()):
            mem, _ = self.win.Shared_query(peer)
            self.segments.append(np.frombuffer(mem, dtype=np.uint8, count=nbytes))
        self.mine = self.segments[local_comm.Get_rank()]
        self.base = self.mine.__array_interface__["data"][0]

    def offset_at(self, ptr: int, nbytes: int) -> Optional[int]:
        """Byte offset of the ``nbytes`` at address ``ptr`` inside this rank's segment, or None."""
        if self.base <= ptr and ptr + nbytes <= self.base + self.nbytes:
            return ptr - self.base
        return None

    def free(self) -> None:
        self.segments = []
        self.mine = None
        self.win.Free()


class SharedArena:
    """The windows of one host's ranks. Every method that allocates is collective over
    ``local_comm`` and must be called with the same size on every local rank."""

    def __init__(self, local_comm):
        self.comm = local_comm
        self.windows: List[_Window] = []  # every window ever made, in creation order (same on all ranks)
        self._user: Optional[_Window] = None
        self._previous_user: Optional[_Window] = None
        self._user_slot = 0
        self._user_index = -1  # of the user window in ``windows``
        self._control: Optional[_Window] = None
        self._handed: Tuple[Optional[np.ndarray], Tuple[int, int]] = (None, (-1, -1))
        """The slot :meth:`user_slot` handed out last and its :meth:`locate`: the buffer almost
        every collective then runs on, found without a search."""

    # ---- allocation (collective) ------------------------------------------------------------
    def _new(self, nbytes: int) -> _Window:
        win = _Window(self.comm, _round_up(nbytes))
        self.windows.append(win)
        return win

    def user_slot(self, nbytes: int, dtype=np.uint8) -> np.ndarray:
        """``nbytes`` of this rank's next user slot (alternating between two), as ``dtype``."""
        slot = _round_up(nbytes)
        if self._user is None or self._user.nbytes < 2 * slot:
            self._retire(self._previous_user)
            self._previous_user, self._user = self._user, self._new(2 * slot)
            self._user_index = len(self.windows) - 1
        half = self._user.nbytes // 2
        self._user_slot ^= 1
        start = self._user_slot * half
        slot = self._user.mine[start:start + nbytes].view(dtype)
        self._handed = (slot, (self._user_index, start))
        return slot

    def next_user_slot(self, nbytes: int) -> Optional[int]:
        """The slot :meth:`user_slot` (``nbytes``) will hand out, or None when it will make a new
        window (and free the one before the current)."""
        if self._user is None or self._user.nbytes < 2 * _round_up(nbytes):
            return None
        return self._user_slot ^ 1

    def user_slot_of(self, arr: np.ndarray, where: Tuple[int, int]) -> Optional[int]:
        """Which slot of the current user window ``arr`` lies in, or None (elsewhere); ``where``
        is its :meth:`locate`."""
        window, offset = where
        if self._user is None or window < 0 or self.windows[window] is not self._user:
            return None
        half = self._user.nbytes // 2
        return offset // half if (offset % half) + arr.nbytes <= half else None

    def control(self, nbytes: int) -> _Window:
        """A small window where each rank publishes where its tensors are (see cma.py); made
        once, at the first call (collective), with the same ``nbytes`` on every rank."""
        if self._control is None:
            self._control = self._new(nbytes)
        return self._control

    def _retire(self, win: Optional[_Window]) -> None:
        """Free ``win`` (collective: every rank retires the same window at the same call)."""
        if win is not None:
            self.windows[self.windows.index(win)] = None  # keep indexes stable on every rank
            win.free()

    # ---- addressing -------------------------------------------------------------------------
    def locate(self, arr: np.ndarray) -> Tuple[int, int]:
        """(window index, byte offset) of ``arr`` if it lies in a shared segment, else (-1, -1)."""
        if arr is self._handed[0]:
            return self._handed[1]
        if arr.flags.c_contiguous:
            ptr, nbytes = arr.__array_interface__["data"][0], arr.nbytes
            for index in range(len(self.windows) - 1, -1, -1):
                win = self.windows[index]
                if win is not None:
                    off = win.offset_at(ptr, nbytes)
                    if off is not None:
                        return index, off
        return -1, -1

    def peer_view(self, window: int, peer: int, offset: int, count: int, dtype) -> np.ndarray:
        """``count`` elements of ``dtype`` at byte ``offset`` of ``peer``'s segment of ``window``."""
        seg = self.windows[window].segments[peer]
        nbytes = count * np.dtype(dtype).itemsize
        return seg[offset:offset + nbytes].view(dtype)

    def close(self) -> None:
        for win in self.windows:
            if win is not None:
                win.free()
        self.windows = []
        self._user = self._previous_user = self._control = None
        self._handed = (None, (-1, -1))
