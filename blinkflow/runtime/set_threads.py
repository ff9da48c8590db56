"""A running engine's process sets: which sets exist, and one thread per set this rank is in.

Horovod's process sets (``horovod/common/process_sets.py``, ``operations.cc``): a set is a subset
of the job's ranks that runs collectives of its own. Here each set is its own communicator with
its own negotiation, response cache, fusion, executor, backends and plans (a
:class:`~.set_loop.SetLoop` over the set's :func:`~.job.set_job`), and its loop runs on a
background thread of its own on each member. The global set's loop is the engine's thread.

Adding and removing sets is collective over every rank of the job and goes through the global
set's negotiation: ``add_process_set`` submits a request under an automatic name of the global
set, and when its response runs, on the global thread and at the same point of the global
sequence on every rank, every rank splits the set's communicator from the job's and the members
set the set up (its plan agreed, its backend made) before its thread starts. Every rank keeps
the same registry (id -> ranks): ids are the smallest free ones, in the order of the responses.

**Why collectives of different sets cannot deadlock.** The classic hazard is one thread running
the collectives of several sets in the order their negotiations happen to complete: ranks A and
B share sets S and T; A's thread enters S's collective while B's enters T's, and each waits for
the other forever. Horovod avoids it by negotiating and running every set in a fixed order each
cycle. blinkflow never lets a thread run collectives of two sets:

1. Every MPI call of set S (its negotiation, its executions, its plan agreements, its teardown)
   is made on S's thread, on communicators private to S (the set's split of the job's
   communicator and what is split or duplicated from it). The one exception is S's set-up,
   which the global thread runs before S's thread exists, at the add response every rank runs.
2. On every member, S's thread makes the same sequence of collective calls: the negotiation is
   a collective per cycle, and every member executes the same responses in the same order (the
   negotiation's guarantee), each a fixed sequence of collectives.
3. So a member's S-thread can only wait for other members' S-threads, inside a collective of S.
   S-threads hold no lock while they wait (the GIL is released in MPI calls and in the quiet
   waits), and never wait for a user thread or another set's thread.

Hence a wait-for edge always joins two threads of one set, and within a set the threads
advance through one common sequence of collectives: the member that is furthest behind is
waited for by the others and waits for nobody, so it completes its call, and by induction so
does every call. No cycle of waits can form inside a set, and none can cross sets. The global
thread's extra work (a set's set-up, a removal's join) only waits for the set's other members
to reach the same point of the global sequence, which they all do (2, applied to the global
set); a removal's join waits for the set's last cycle, which every member's S-thread reaches
once its own global thread ran the removal (it asks its S-thread to stop; idle S-threads keep
cycling every ``BLINKFLOW_CYCLE_TIME``). What this does not cover is a user's program waiting
for one set's result before submitting what another rank waits for in another set, the same
user-level ordering Horovod leaves to the program.

Process sets need ``MPI_THREAD_MULTIPLE`` (several threads make MPI calls at once); mpi4py asks
for it by default.
"""
from __future__ import annotations

import threading
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from ..config import Config
from ..errors import BlinkflowError, ProcessSetError
from .handles import HandleTable
from .job import Job, set_job
from .log import logger
from .set_loop import SetLoop
from .state import SharedState


def describe(set_id: int, ranks: Sequence[int]) -> str:
    return f"process set {set_id} (ranks {list(ranks)})"


class SetThread:
    """One process set's loop on a background thread of its own."""

    def __init__(self, loop: SetLoop, on_failure: Callable[[SetLoop, BaseException], None]):
        self.loop = loop
        self._on_failure = on_failure
        self._stop_error: Optional[BlinkflowError] = None
        self.thread = threading.Thread(target=self._main, name=f"blinkflow-set-{loop.set_id}", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self, reason: str, error: BlinkflowError) -> None:
        """Ask the set to stop (its members agree on the cycle); calls still in flight then
        fail with ``error``."""
        self._stop_error = error
        self.loop.state.request_shutdown(reason)

    def join(self, gave_up: Callable[[], bool]) -> None:
        """Wait for the thread, unless ``gave_up()`` (a peer died: its MPI calls may never return)."""
        while self.thread.is_alive():
            self.thread.join(0.25)
            if gave_up():
                return

    def _main(self) -> None:
        loop = self.loop
        try:
            loop.run()
        except BaseException as e:  # noqa: BLE001 - every failure must reach the waiting users
            self._on_failure(loop, e)
            return
        loop.state.fail(self._stop_error or ProcessSetError(f"{describe(loop.set_id, loop.job.ranks)} stopped"))
        loop.close_backends()  # collective over the set's communicators: every member is here now
        loop.job.free()


class ProcessSets:
    """The registry of process sets (the same on every rank) and this rank's set threads.

    Runs on the engine's global thread: :meth:`add` and :meth:`remove` are collective over the
    job's communicator, called at the same response on every rank.
    """

    def __init__(self, job: Job, config: Config, handles: HandleTable, timeline,
                 on_failure: Callable[[SetLoop, BaseException], None], gave_up: Callable[[], bool]):
        self.job = job
        self.config = config
        self.handles = handles
        self.timeline = timeline
        self._on_failure = on_failure
        self._gave_up = gave_up
        self.ranks_of: Dict[int, Tuple[int, ...]] = {0: tuple(range(job.size))}
        """Every registered set's ranks, by id (0: the global set)."""
        self.threads: Dict[int, SetThread] = {}
        """This rank's sets (other than the global one)."""

    def loop(self, set_id: int) -> Optional[SetLoop]:
        thread = self.threads.get(set_id)
        return thread.loop if thread is not None else None

    def add(self, ranks: Sequence[int]) -> int:
        """Register the set of global ``ranks`` (sorted, distinct, checked) and start its thread
        on its members; returns its id. Collective over the job's communicator."""
        ranks = tuple(ranks)
        for set_id, known in self.ranks_of.items():
            if known == ranks:  # the same on every rank: every rank raises, nobody splits
                raise ProcessSetError(f"{describe(set_id, ranks)} exists already; a process set's ranks must "
                                      "differ from every other set's")
        set_id = next(i for i in range(1, len(self.ranks_of) + 1) if i not in self.ranks_of)
        sub, loop, error = None, None, None
        try:
            sub = set_job(self.job, ranks)
            if sub is not None:
                loop = SetLoop(set_id, sub, self.config, SharedState(self.config, sub.rank, self.handles),
                               self.timeline)
                loop.backend("cpu")  # collective among the members: a failure shows here, on all
        except Exception as e:  # noqa: BLE001 - every rank must hear of it before anyone goes on
            error = e
        said = self.job.comm.allgather(None if error is None else f"{type(error).__name__}: {error}")
        failed = [(r, why) for r, why in enumerate(said) if why is not None]
        if failed:
            if loop is not None:
                loop.close_backends()
            if sub is not None:
                sub.free()
            raise ProcessSetError(f"process set of ranks {list(ranks)} could not be made: "
                                  + "; ".join(f"rank {r}: {why}" for r, why in failed))
        self.ranks_of[set_id] = ranks
        if loop is not None:
            thread = self.threads[set_id] = SetThread(loop, self._on_failure)
            thread.start()
        logger.debug("added %s", describe(set_id, ranks))
        return set_id

    def remove(self, set_id: int) -> bool:
        """Unregister set ``set_id`` and stop its thread (after its members agreed on a last
        cycle); False for the global set or an unknown id. Runs at the same response on every
        rank."""
        if set_id == 0 or set_id not in self.ranks_of:
            return False
        ranks = self.ranks_of.pop(set_id)
        thread = self.threads.pop(set_id, None)
        if thread is not None:
            what = describe(set_id, ranks)
            thread.stop(f"{what} was removed", ProcessSetError(f"{what} was removed while this call was in flight"))
            thread.join(self._gave_up)
        logger.debug("removed %s", describe(set_id, ranks))
        return True

    def stop_all(self, reason: str, error: BlinkflowError) -> None:
        """Stop every set of this rank (the job stops: every rank does this after the same global cycle)."""
        threads = list(self.threads.values())
        self.threads.clear()
        for thread in threads:
            thread.stop(reason, error)
        for thread in threads:
            thread.join(self._gave_up)

    def fail_all(self, error: BlinkflowError) -> None:
        for thread in self.threads.values():
            thread.loop.state.fail(error)


def static_sets(mine: List[object], comm) -> List[Tuple[int, ...]]:
    """The sets ``init(process_sets=...)`` adds, in id order, from every rank's list of rank
    tuples (collective over the job's communicator; an entry that is a string is this rank's
    reason to refuse it). A set given by an MPI communicator names other ranks on each rank
    (Horovod's split communicators): position by position, each rank's set is taken in rank
    order, repeats once. Every rank gets the same list, or the same ProcessSetError naming the
    ranks whose lists are wrong (an entry twice, the global set, ranks outside the job)."""
    every = comm.allgather(mine)
    size = comm.Get_size()
    wrong = []
    for r, sets in enumerate(every):
        seen_here = {tuple(range(size))}
        for i, ranks in enumerate(sets):
            if isinstance(ranks, str):
                wrong.append(f"rank {r}: process_sets[{i}]: {ranks}")
            elif ranks in seen_here:
                wrong.append(f"rank {r}: process_sets[{i}] (ranks {list(ranks)}) is a duplicate"
                             + (" of the global set" if ranks == tuple(range(size)) else ""))
            else:
                seen_here.add(ranks)
    if wrong:
        raise ProcessSetError("init(process_sets=...): " + "; ".join(wrong) + ". Pass each set once, as ranks "
                              "of the job (the global set is always there: hvd.global_process_set)")
    out: List[Tuple[int, ...]] = []
    seen = {tuple(range(size))}
    for position in range(max((len(sets) for sets in every), default=0)):
        for sets in every:
            if position < len(sets) and sets[position] not in seen:
                seen.add(sets[position])
                out.append(sets[position])
    return out
