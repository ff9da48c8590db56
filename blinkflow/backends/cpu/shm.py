"""Shared-memory segments of the ranks of one host (MPI-3 ``MPI_Win_allocate_shared``).

Every rank of ``local_comm`` owns one segment of a shared window and can read every peer's
segment directly: on a host the "links" of the plan's trees are plain loads and stores, so a
rank reduces its shard by reading its peers' segments in place and nobody copies data through
MPI. Windows are collective objects, so they are only created when every local rank asks for the
same size (the callers derive sizes from arguments that agree on every rank) and they grow
geometrically, so a job allocates a handful of times in its life, never per call.

Two windows serve two purposes:

* the *user* window backs :meth:`CpuBackend.buffer`: the runtime packs its fusion buffer
  straight into it (zero copy). An older, smaller user window is kept alive until ``close`` so
  a view the runtime still holds never dangles.
* the *staging* window receives arguments that live in ordinary process memory; only the
  backend holds views into it, so it may be replaced freely.
"""
from __future__ import annotations

from typing import List, Optional, Tuple

import numpy as np

from ...errors import BackendError

#: Segments are multiples of this (a huge page), and never smaller.
_GRANULE = 2 * 1024 * 1024


def _round_up(nbytes: int) -> int:
    """Next power of two of at least one granule: growth stays rare (log2 of the largest size)."""
    size = _GRANULE
    while size < nbytes:
        size *= 2
    return size


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

    def offset_of(self, arr: np.ndarray) -> Optional[int]:
        """Byte offset of ``arr`` inside this rank's segment, or None when it lives elsewhere."""
        ptr = arr.__array_interface__["data"][0]
        if self.base <= ptr and ptr + arr.nbytes <= self.base + self.nbytes:
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
        self._staging: Optional[_Window] = None

    # ---- allocation (collective) ------------------------------------------------------------
    def _new(self, nbytes: int) -> _Window:
        win = _Window(self.comm, _round_up(nbytes))
        self.windows.append(win)
        return win

    def user(self, nbytes: int) -> _Window:
        if self._user is None or self._user.nbytes < nbytes:
            self._user = self._new(nbytes)  # the old one stays alive: the runtime may hold views
        return self._user

    def staging(self, nbytes: int) -> _Window:
        if self._staging is None or self._staging.nbytes < nbytes:
            old = self._staging
            self._staging = self._new(nbytes)
            if old is not None:
                self.windows[self.windows.index(old)] = None  # keep indexes stable on every rank
                old.free()
        return self._staging

    # ---- addressing -------------------------------------------------------------------------
    def locate(self, arr: np.ndarray) -> Tuple[int, int]:
        """(window index, byte offset) of ``arr`` if it lies in a shared segment, else (-1, -1)."""
        if arr.flags.c_contiguous:
            for index in range(len(self.windows) - 1, -1, -1):
                win = self.windows[index]
                if win is not None:
                    off = win.offset_of(arr)
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
        self._user = self._staging = None
