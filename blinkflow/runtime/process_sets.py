"""Horovod's process sets, as users hold them: ``ProcessSet``, ``global_process_set``.

A :class:`ProcessSet` names a subset of the job's ranks that runs collectives of its own
(``allreduce(..., process_set=even)``): given as a list of ranks, or as an MPI communicator (its
processes). It is registered by ``init(process_sets=[...])`` or ``add_process_set(...)``, which
give it its ``process_set_id`` (the same on every rank), and unregistered by
``remove_process_set``. ``global_process_set`` (id 0) is every rank of the job and is the
default of every collective. Names, defaults and semantics follow Horovod
(``horovod/common/process_sets.py``); broadcast roots stay global ranks there too.

The engine's side (a communicator, negotiation, plan and thread per set) is
:mod:`.set_threads`; this module is the object the user passes around.
"""
from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

from ..errors import ProcessSetError


class ProcessSet:
    """A set of the job's ranks that runs collectives together (Horovod's ``hvd.ProcessSet``).

    ``ProcessSet([0, 2])`` or ``ProcessSet(mpi4py_communicator)``; pass it to ``init`` or to
    ``add_process_set``, then to collectives as ``process_set=``. ``ranks`` are sorted global
    ranks; ``process_set_id`` is set while the set is registered (None otherwise).
    """

    process_set_id: Optional[int] = None
    ranks: Optional[List[int]] = None
    mpi_comm = None

    def __init__(self, ranks_or_comm):
        if _is_communicator(ranks_or_comm):
            self.mpi_comm = ranks_or_comm
            return
        try:
            ranks = sorted(ranks_or_comm)
        except TypeError:
            raise ProcessSetError(f"ProcessSet takes a list of ranks or an mpi4py communicator, got "
                                  f"{type(ranks_or_comm).__name__}") from None
        if any(not isinstance(r, int) or isinstance(r, bool) for r in ranks):
            raise ProcessSetError(f"ProcessSet ranks must be integers, got {ranks!r}")
        if len(set(ranks)) != len(ranks):
            raise ProcessSetError(f"ProcessSet ranks {ranks} name a rank twice")
        self.ranks = ranks

    def size(self) -> Optional[int]:
        """How many ranks the set has, or None while it is not registered."""
        if self.process_set_id is None:
            return None
        return len(_registered(self))

    def rank(self) -> Optional[int]:
        """This process's rank within the set (its place in ``ranks``), or None while the set is
        not registered; a ProcessSetError (a ValueError) on a rank outside the set. Collectives
        still take global ranks (a broadcast's ``root_rank``)."""
        if self.process_set_id is None:
            return None
        ranks = _registered(self)
        me = _api().rank()
        if me not in ranks:
            raise ProcessSetError(f"rank {me} is not part of {self}")
        return ranks.index(me)

    def included(self) -> Optional[bool]:
        """Whether this process is in the set (None while its ranks are not known)."""
        if self.ranks is None:
            return None
        return _api().rank() in self.ranks

    def _invalidate(self) -> None:
        self.process_set_id = None

    def __str__(self) -> str:
        return f"ProcessSet(process_set_id={self.process_set_id}, ranks={self.ranks}, mpi_comm={self.mpi_comm})"

    __repr__ = __str__


def _api():
    from . import api

    return api


def _is_communicator(value) -> bool:
    return type(value).__module__.startswith("mpi4py")


def _registered(process_set: ProcessSet) -> Tuple[int, ...]:
    ranks = _api().process_set_ranks(process_set.process_set_id)
    if ranks is None:
        raise ProcessSetError(f"{process_set} is not registered (it was removed, or never passed to "
                              "init(process_sets=...) or add_process_set)")
    return ranks


def ranks_of_entry(process_set, job_comm) -> object:
    """The global ranks of an ``init(process_sets=...)`` entry as a tuple, or why it is refused
    (a string: every rank then hears it). A communicator gives its processes' ranks in the job."""
    if not isinstance(process_set, ProcessSet):
        try:
            process_set = ProcessSet(process_set)
        except ProcessSetError as e:
            return str(e)
    if process_set.ranks is None:
        from mpi4py import MPI

        comm = process_set.mpi_comm
        if comm == MPI.COMM_NULL:
            return "an MPI communicator this rank is not in (MPI.COMM_NULL)"
        ranks = MPI.Group.Translate_ranks(comm.Get_group(), list(range(comm.Get_size())), job_comm.Get_group())
        if any(r == MPI.UNDEFINED for r in ranks):
            return "an MPI communicator with processes outside the job's communicator"
        return tuple(sorted(ranks))
    size = job_comm.Get_size()
    if not process_set.ranks or any(not 0 <= r < size for r in process_set.ranks):
        return f"ranks {process_set.ranks} are not ranks of the job (0..{size - 1}), or none"
    return tuple(process_set.ranks)


def set_id_of(process_set) -> int:
    """The id a collective's ``process_set=`` argument names (None and global: 0)."""
    if process_set is None or process_set is global_process_set:
        return 0
    if not isinstance(process_set, ProcessSet):
        raise ProcessSetError(f"process_set must be a blinkflow ProcessSet, got {type(process_set).__name__}")
    if process_set.process_set_id is None:
        raise ProcessSetError(f"{process_set} is not registered (it was removed, or never passed to "
                              "init(process_sets=...) or add_process_set)")
    return process_set.process_set_id


def check_ranks(ranks: Sequence[int], size: int) -> Tuple[int, ...]:
    """``add_process_set``'s ranks: distinct ranks of the job, sorted."""
    ranks = tuple(sorted(ranks))
    if not ranks or any(not 0 <= r < size for r in ranks):
        raise ProcessSetError(f"process set ranks {list(ranks)} must be ranks of the job (0..{size - 1}), at least one")
    return ranks


global_process_set = ProcessSet([])
"""Every rank of the job (id 0), the default of every collective; ``init`` fills in its ranks."""
global_process_set.process_set_id = 0
