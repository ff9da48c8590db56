"""Horovod's process sets, as users hold them: ``ProcessSet``, ``global_process_set``.

A :class:`ProcessSet` names a subset of the job's ranks that runs collectives of its own
(``allreduce(..., process_set=even)``): given as a list of ranks, or as an MPI communicator (its
processes). It is registered by ``init(process_sets=[...])`` or ``add_process_set(...)``, which
give it its ``process_set_id`` (the same on every rank), and unregistered by
``remove_process_set``. ``global_process_set`` (id 0) is every rank of the job and is the
default of every collective. Names, defaults and semantics follow Horovod
(``horovod/common/process_sets.py``); broadcast roots stay global ranks there too.

The engine's side (a communicator, negotiation, plan and thread per set) is
:mod:`.set_threads`; this module is the object the user passes around, the registry calls
(``add_process_set``, ``remove_process_set``, the queries) and :func:`loop_of`, which finds the
loop a collective's ``process_set=`` runs on.
"""
from __future__ import annotations

import sys
import weakref
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ..errors import InvalidArgumentError, ProcessSetError
from .enqueue import enqueue, enqueue_refusal, first, synchronize
from .global_state import RUNTIME
from .messages import Kind, Request


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
        me = RUNTIME.running("blinkflow.rank()").job.rank
        if me not in ranks:
            raise ProcessSetError(f"rank {me} is not part of {self}")
        return ranks.index(me)

    def included(self) -> Optional[bool]:
        """Whether this process is in the set (None while its ranks are not known)."""
        if self.ranks is None:
            return None
        return RUNTIME.running("blinkflow.rank()").job.rank in self.ranks

    def _invalidate(self) -> None:
        self.process_set_id = None

    def __str__(self) -> str:
        return f"ProcessSet(process_set_id={self.process_set_id}, ranks={self.ranks}, mpi_comm={self.mpi_comm})"

    __repr__ = __str__


def _is_communicator(value) -> bool:
    """Whether ``value`` is an mpi4py communicator (mpi4py.MPI is loaded once one exists)."""
    mpi = sys.modules.get("mpi4py.MPI")
    return mpi is not None and isinstance(value, mpi.Comm)


def _registered(process_set: ProcessSet) -> Tuple[int, ...]:
    ranks = process_set_ranks(process_set.process_set_id)
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


_registered_objects: "weakref.WeakSet[ProcessSet]" = weakref.WeakSet()
"""The user's ProcessSet objects that were registered: an elastic reset renumbers their ranks."""


def known_sets() -> List[ProcessSet]:
    """The ProcessSet objects registered in this process and still alive (not the global set)."""
    return [s for s in list(_registered_objects) if s.process_set_id]


global_process_set = ProcessSet([])
"""Every rank of the job (id 0), the default of every collective; ``init`` fills in its ranks."""
global_process_set.process_set_id = 0


# ---- the registry, as the user calls it ----------------------------------------------------------
def init_entries(process_sets) -> List[Any]:
    """``init(process_sets=...)`` as a list of entries (``"dynamic"`` or None: none)."""
    if process_sets is None or (isinstance(process_sets, str) and process_sets.lower() == "dynamic"):
        return []
    if isinstance(process_sets, str):
        raise ProcessSetError(f"init(process_sets={process_sets!r}): pass a list of ProcessSet, 'dynamic' or None")
    return list(process_sets)


def register_entries(engine, entries: List[Any]) -> None:
    """Give the user's ProcessSet objects the ids ``init`` registered them under (Horovod's
    ``_init_process_sets``): a set given by a communicator learns its ranks."""
    global_process_set.ranks = list(range(engine.job.size))
    ids = {ranks: set_id for set_id, ranks in engine.sets.ranks_of.items()}
    for entry in entries:
        if isinstance(entry, ProcessSet):
            ranks = ranks_of_entry(entry, engine.job.comm)
            entry.process_set_id = ids.get(ranks) if isinstance(ranks, tuple) else None
            _registered_objects.add(entry)
            if entry.ranks is None and isinstance(ranks, tuple):
                entry.ranks = list(ranks)


def loop_of(engine, process_set, what: str):
    """The loop of the process set a call names (None: the global set). Raised here, on this
    rank alone (nobody else expects the call): a set that is not registered (ProcessSetError, a
    ValueError as in Horovod) and a set this rank is not in (InvalidArgumentError). Once the
    job has stopped (a peer left or failed, or shut down), every set's loop has stopped with it
    and a call on any set raises the job's ShutdownError, naming that peer, as a global call
    does: a stop is one event for the whole job, whatever sets the peer was in (Horovod's
    rule: any rank's shutdown finalizes every process set with its shut-down error), since
    every set's communicator is split from the job's and goes with it."""
    if process_set is None or process_set is global_process_set:
        return engine.loop
    set_id = set_id_of(process_set)
    loop = engine.loop_for(set_id)
    if loop is not None:
        return loop
    if engine.state.failure is not None:
        raise engine.state.failure
    ranks = engine.sets.ranks_of.get(set_id)
    if ranks is None:
        raise ProcessSetError(f"{what}: {process_set} is not registered (it was removed, or never passed to "
                              "init(process_sets=...) or add_process_set)")
    raise InvalidArgumentError(f"{what}: rank {engine.job.rank} is not in process set {set_id} (ranks {list(ranks)}); "
                               "call a set's collectives on its ranks only")


def add_process_set(process_set) -> ProcessSet:
    """Register ``process_set`` (a :class:`ProcessSet` of ranks, or a list of ranks) and return it
    with its id. Collective over every rank of the job (every rank calls it, with the same ranks),
    negotiated like a collective of the global set; the set's members then plan its collectives
    on their own devices and run them on a thread of their own. A set whose ranks equal another
    registered set's raises ProcessSetError (a ValueError) on every rank; so do this call and
    another rank's different global collective where ranks do not call it at the same place
    among their collectives (:mod:`.fences`)."""
    engine = RUNTIME.running("blinkflow.add_process_set")
    if not isinstance(process_set, ProcessSet):
        process_set = ProcessSet(process_set)
    if process_set.ranks is None:
        raise NotImplementedError("add_process_set of a set given by an MPI communicator is not implemented; build "
                                  "the ProcessSet from a list of ranks, or pass it to init(process_sets=[...])")
    name = RUNTIME.auto_name("add_process_set")
    try:
        ranks = check_ranks(process_set.ranks, engine.job.size)
    except Exception as e:  # noqa: BLE001 - whatever this rank refuses, every rank must hear of it
        synchronize(enqueue_refusal(engine.loop, Kind.ADD_PROCESS_SET, name, e))
    request = Request(name, Kind.ADD_PROCESS_SET, "uint8", ranks)
    process_set.process_set_id = synchronize(enqueue(engine.loop, [(request, None)], first))
    _registered_objects.add(process_set)
    return process_set


def remove_process_set(process_set: ProcessSet) -> bool:
    """Unregister ``process_set`` and invalidate the object; False for the global set or a set
    that is not registered (without a collective, as Horovod). Otherwise collective over every
    rank: the set's members finish its collectives in flight (they fail with ProcessSetError)
    and free its communicators. Every rank calls it at the same place among its global
    collectives; where some rank submitted another global collective instead, that call and
    this one fail at once with ProcessSetError on every rank that made them, naming the ranks
    (:mod:`.fences`)."""
    engine = RUNTIME.running("blinkflow.remove_process_set")
    set_id = getattr(process_set, "process_set_id", None)
    if set_id is None or set_id == 0:
        return False
    request = Request(RUNTIME.auto_name("remove_process_set"), Kind.REMOVE_PROCESS_SET, "uint8", (), root=set_id)
    removed = synchronize(enqueue(engine.loop, [(request, None)], first))
    process_set._invalidate()  # not before: a call that failed on every rank removed nothing
    RUNTIME.forget_names(set_id)  # a later set under this id counts afresh
    return bool(removed)


def process_set_ranks(set_id: int):
    """The ranks of registered process set ``set_id`` (a tuple), or None."""
    engine = RUNTIME.engine
    if engine is None or engine.sets is None:
        return None
    return engine.sets.ranks_of.get(set_id)


def get_process_set_ids_and_ranks() -> Dict[int, List[int]]:
    """Every registered process set: id -> its ranks (Horovod's ``_get_process_set_ids_and_ranks``)."""
    engine = RUNTIME.running("blinkflow.get_process_set_ids_and_ranks")
    return {set_id: list(ranks) for set_id, ranks in sorted(engine.sets.ranks_of.items())}


def comm_process_set_id(comm) -> int:
    """The id of the registered process set whose ranks are ``comm``'s processes."""
    engine = RUNTIME.running("blinkflow.comm_process_set_id")
    ranks = ranks_of_entry(ProcessSet(comm), engine.job.comm)
    for set_id, known in engine.sets.ranks_of.items():
        if known == ranks:
            return set_id
    raise ProcessSetError(f"no registered process set holds the processes of {comm} (ranks {ranks})")
