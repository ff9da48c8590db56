"""Re-forming the job: the one reset of elastic training.

After a loss, every surviving rank calls :func:`reform` (``blinkflow.elastic.run`` does, once
the collective in flight has raised :class:`~blinkflow.errors.ShutdownError` there):

1. **Retire the old runtime, locally.** Its calls still in flight fail; each of its MPI
   communicators is *revoked* (ULFM ``MPI_Comm_revoke``), so a survivor still waiting inside one
   of the old job's collectives, perhaps for a survivor that already left it, returns from it
   with an error instead of waiting forever; its threads end. Nothing of it is collective, and
   nothing finalizes MPI.
2. **Agree on who is left.** ULFM ``MPI_Comm_shrink`` of the old job's communicator: every
   survivor gets the same communicator of the survivors, in their old order (the agreement is
   the shrink's own; a rank that dies during it is left out of it as well).
3. **Check the quorum** (:mod:`.quorum`): a network cut makes both sides see the other as lost,
   and both would shrink and go on. Only a group holding a majority of the ranks whose fate it
   cannot know (ranks lost on a host it shares are dead, not cut off), at a tie the group with the
   old job's rank 0, goes on; any other raises :class:`~blinkflow.errors.PartitionError` on each of
   its ranks, naming the hosts it lost contact with, and leaves with status 1 like step 4's error.
4. **Check the bound.** Fewer than ``BLINKFLOW_ELASTIC_MIN_NP`` (``blinkrun --min-np``) left:
   :class:`~blinkflow.errors.TooFewRanksError` on every survivor, naming the ranks lost; the
   runtime is marked broken, so the process leaves with status 1 at exit and ``mpirun`` ends.
5. **Start again on the survivors**, as ``init(comm=survivors)`` does: discovery, a fresh plan
   for exactly the surviving devices (each rank keeps the device it drove, whatever its new
   rank), the plan agreed by digest, the process sets re-registered with their ranks renumbered.
   A process set that lost a member cannot be re-formed: ProcessSetError on every survivor
   names the set and the rank it lost.
6. **Agree that it started everywhere** (ULFM ``MPI_Comm_agree``, whose answer every live rank
   gets alike). Ranks that fail together are found one after another (the failure detector
   suspects paused ranks about its timeout apart), so a rank the shrink kept may die before the
   new job has started on it, and step 5 then fails on some survivors and not on others. On a
   "no", every survivor retires what started on it as in step 1 and goes back to step 2 on the
   survivors' communicator. A round whose shrink loses nobody ends the reset on every survivor
   with the error the start failed with (there, or a ShutdownError saying it failed elsewhere);
   otherwise each round loses a rank, and step 4 ends the rounds.

Between 2 and 5, once every survivor is past step 1 (the shrink is collective among them), the
old job's backends and communicators are released: its shared-memory windows (``MPI_Win_free``
synchronizes the window's ranks; with the lost ones reported failed it returns among the
survivors), its rings, its GPU receive slots, device executor memory and the peers' memory it
mapped (each survivor synchronized its device in step 1, so no copy into them is still queued,
and a lost peer's died with its process). Its communicators, revoked, are kept until the
survivors' next shrink (the next round or reset), ranks added, or the process's exit
(:func:`blinkflow.backends.teardown.free` says why: a freed one's context id goes to the next
communicator, with the messages dead ranks still sent on it). That runs under a deadline
(:data:`RELEASE_S`): should it not return, the old runtime is left as it is and its mappings stay
until the process exits. Communicators this module made (a shrink's, a merge's) are freed once the
job has started again on another (a round's shrink that step 6 undid is kept like the runtime's
communicators), and the last before ``MPI_Finalize`` (:func:`_adopt` says why).

:func:`reform_on` is the entry for a communicator made elsewhere (ranks added: an
intercommunicator merged with the newcomers, ``MPI.Intercomm.Merge``): collective over that
communicator. Ranks of the old job retire their runtime (a clean, collective shutdown among the
old ranks when nobody was lost, else step 1) and keep their devices; the newcomers, which have
no runtime yet, take devices nobody holds; all start together on ``comm``. Process sets are
carried by process: a set's members are found in ``comm`` by their MPI process.

Both return a :class:`Reset` (who left or came, the new size, the all-reduce plan's rate before
and after), logged as one line on the new rank 0, recorded in the timeline, counted by
:func:`resets`.
"""
from __future__ import annotations

import atexit
import dataclasses
import sys
import threading
import time
from typing import Dict, List, Optional, Sequence, Tuple

from ..backends import teardown
from ..backends.teardown import quietly
from ..config import get_config
from ..errors import NotInitializedError, PartitionError, ProcessSetError, ShutdownError, TooFewRanksError
from ..runtime import launcher_hooks, lifecycle
from ..runtime.global_state import RUNTIME
from ..runtime.liveness import is_process_failure
from ..runtime.log import logger
from . import quorum

#: How long a retired runtime's threads get to leave (its communicators are revoked by then, so
#: only a thread inside a long local computation takes this long; it is a daemon and left behind).
RETIRE_JOIN_S = 10.0
#: How long releasing the old job's windows and communicators may take (see the module docstring).
RELEASE_S = 10.0


@dataclasses.dataclass(frozen=True)
class Reset:
    """One re-forming of the job, as every rank of the new job sees it."""

    old_size: int
    new_size: int
    lost: Tuple[int, ...]
    """Ranks of the old job that are gone (their old ranks)."""
    added: int
    """Ranks that joined (:func:`reform_on` with newcomers)."""
    old_rank: Optional[int]
    """This process's rank in the old job (None for a newcomer)."""
    new_rank: int
    old_rate_gbps: Optional[float]
    new_rate_gbps: float
    """The all-reduce plan's rate (algorithm bandwidth) before and after; None when unknown."""
    seconds: float
    """From the start of the reset until the new job was ready, on this rank."""

    def describe(self) -> str:
        who = []
        if self.lost:
            who.append(f"rank{'s' if len(self.lost) > 1 else ''} {', '.join(map(str, self.lost))} left")
        if self.added:
            who.append(f"{self.added} rank{'s' if self.added > 1 else ''} joined")
        rate = f"all-reduce plan {self.new_rate_gbps:.3g} GB/s"
        if self.old_rate_gbps is not None:
            rate += f" (was {self.old_rate_gbps:.3g})"
        return (f"blinkflow elastic reset: {' and '.join(who) or 'the same ranks'}; {self.old_size} -> "
                f"{self.new_size} ranks; {rate}; {self.seconds:.2f} s")


_history: List[Reset] = []
_unreleased: List[object] = []
"""Retired engines whose release did not finish in time: kept, with their windows, until exit."""
_made: List[object] = []
"""Communicators this module started a runtime on (a shrink's survivors, a merge with newcomers),
newest last: each is freed once the runtime on it is retired, the last at exit (see
:func:`_free_made`)."""
_exit_hook_registered = False


def resets() -> int:
    """How many times this process's job re-formed (Horovod has no such counter; a user's
    reset callback can read it)."""
    return len(_history)


def history() -> List[Reset]:
    """Every reset of this process's job, oldest first."""
    return list(_history)


def reform() -> Reset:
    """Re-form the job on the ranks that are left (see the module docstring); collective over the
    survivors. Raises PartitionError on a group that may not go on (step 3), TooFewRanksError below
    the minimum, ProcessSetError for a set that lost a member, the error a start failed with when
    it failed without a rank lost (step 6); NotInitializedError when no job ever ran here."""
    started = time.monotonic()
    engine = _take_engine("blinkflow.elastic.reform")
    old = _Old.of(engine)
    hosts = engine.job.hosts
    comm = engine_comm = engine.job.comm
    failed: Optional[BaseException] = None   # why the last round's start failed here (None: elsewhere, or no round yet)
    while True:
        idle = _retire(engine) if engine is not None else True
        survivors = comm.Shrink()
        # Kept communicators go once the survivors have shrunk: whatever a survivor sent on them
        # before it entered the shrink has arrived (messages between two processes keep their
        # order), and the ranks lost before it sent their last long ago.
        teardown.free_kept()
        if comm is not engine_comm:   # the last round's survivors: the rank lost in it may have sent on them
            if comm in _made:
                _made.remove(comm)
            teardown.keep(comm)
            if survivors.Get_size() == comm.Get_size():
                # Nobody was lost, so the start failed for a reason another round would meet
                # again: the same answer on every rank (the shrink's size is agreed).
                if engine is not None:
                    _release(engine, idle)
                quietly(survivors.Free)
                error = failed if failed is not None and not _from_the_others(failed) else ShutdownError(
                    "blinkflow elastic: the job could not start again on the survivors (another rank's start "
                    "failed, no rank was lost); it ends")
                RUNTIME.remember_broken(None, error)
                raise error
        kept = _old_ranks_of(old.group, survivors)
        side = quorum.decide(kept, old.size, hosts)
        if not side.goes_on:
            if engine is not None:
                _release(engine, idle)
            quietly(survivors.Free)
            error = PartitionError(quorum.refusal(side, old.size, hosts), lost=side.uncertain + side.dead,
                                   left=len(side.survivors), unreachable_hosts=side.unreachable_hosts(hosts))
            RUNTIME.remember_broken(None, error)  # leave at exit without MPI_Finalize: the other side is unreachable
            launcher_hooks.tell_cut_off()  # the daemon here cannot reach mpirun across the cut
            raise error
        _tell_launcher_who_is_lost(old.group, survivors)
        if engine is not None:
            _release(engine, idle)
        RUNTIME.ranks_lost = True
        _check_enough(tuple(sorted(set(range(old.size)) - set(kept))), old.size, survivors.Get_size())
        begun, failed = _start_agreed(old, survivors, started)
        if begun is not None:
            return _record(begun, old)
        # Some rank's start failed (a survivor lost while the job re-formed: ranks paused together
        # are declared dead one after another): retire what started here, shrink again.
        engine = _take_what_started()
        comm = survivors


def _start_agreed(old: "_Old", comm, started: float) -> Tuple[Optional["_Begun"], Optional[BaseException]]:
    """:func:`_start` on ``comm``, then an agreement among its ranks (ULFM ``MPI_Comm_agree``,
    whose result every live rank gets alike) that it succeeded everywhere: (what began, None), or
    (None, this rank's error or None) when it failed on some rank (a failure may be reported on
    some ranks and not others; the caller's next shrink tells whether a rank was lost)."""
    begun, error = None, None
    try:
        begun = _start(old, comm, started)
    except Exception as e:  # noqa: BLE001 - agreed on first; reform() decides after its next shrink
        error = e
        quietly(comm.Revoke)   # a rank still waiting in one of its collectives for this one returns
    if _agree(comm, begun is not None):
        return begun, None
    return None, error


def _agree(comm, ok: bool) -> bool:
    """Whether every live rank of ``comm`` says ``ok`` (false, alike everywhere, when a rank of it
    failed: the agreement reports the failure on every rank)."""
    from mpi4py import MPI

    try:
        return bool(comm.Agree(int(ok)))
    except MPI.Exception as e:
        if is_process_failure(e):
            return False
        raise


def _from_the_others(error: BaseException) -> bool:
    """Whether a start failed here because of the other ranks (one failed, or revoked the
    communicator when its own start failed), not for a reason of this rank's own."""
    return is_process_failure(error) or isinstance(error, ShutdownError)


def _old_ranks_of(old_group, survivors) -> List[int]:
    """The survivors' ranks in the old job (a shrink keeps their order)."""
    from mpi4py import MPI

    return list(MPI.Group.Translate_ranks(survivors.Get_group(), list(range(survivors.Get_size())), old_group))


def _tell_launcher_who_is_lost(old_group, survivors) -> None:
    """On the new rank 0, under blinkrun: the old job's ranks not among the survivors, as
    MPI_COMM_WORLD ranks (blinkrun's numbers; ranks that joined later have none there and are
    reported by their wrappers alone). A host that went silent cannot say its ranks are gone."""
    report = getattr(sys.modules.get("sitecustomize"), "blinkrun_ranks_lost", None)
    if report is None or survivors.Get_rank() != 0:
        return
    from mpi4py import MPI
    lost = MPI.Group.Difference(old_group, survivors.Get_group())
    world = MPI.Group.Translate_ranks(lost, list(range(lost.Get_size())), MPI.COMM_WORLD.Get_group())
    report([r for r in world if r != MPI.UNDEFINED])


def reform_on(comm) -> Reset:
    """Start the job again on ``comm`` (an intracommunicator holding some or all of the old job's
    processes and any newcomers); collective over ``comm``. On ranks of the old job the runtime
    is retired first: with a clean shutdown when it is healthy (collective over the old job's
    ranks, which must all call this), else locally as after a loss."""
    started = time.monotonic()
    teardown.free_kept()   # the last reset's communicators: the ranks that could send on them are gone
    engine = RUNTIME.engine or RUNTIME.broken_engine
    old = _Old.of(engine) if engine is not None and engine.job is not None else None
    if old is not None:
        if engine.peer_failed or engine.broken or not engine.alive:
            _take_engine("blinkflow.elastic.reform_on")
            _release(engine, _retire(engine))
        else:
            lifecycle.shutdown()
    return _record(_start(old, comm, started), old)


@dataclasses.dataclass
class _Old:
    """What the new job needs of the old one on this rank."""

    group: object
    """The old job's MPI group, from the communicator the runtime was started on: the runtime's
    own duplicate is freed by a clean shutdown, which the first rank to re-form starts for all."""
    rank: int
    size: int
    device: Optional[int]
    sets: Dict[int, Tuple[int, ...]]
    rate_gbps: Optional[float]
    cuda_ordinal: Optional[int]
    """The CUDA device this process drives (None: none); it keeps it, whatever its new local rank."""

    @classmethod
    def of(cls, engine) -> "_Old":
        from ..backends.cuda import device as cuda_device
        from ..placement import cuda_usable

        job = engine.job
        sets = dict(engine.sets.ranks_of) if engine.sets is not None else {}
        sets.pop(0, None)
        cuda = cuda_usable(engine.config)
        return cls(group=members(engine).Get_group(), rank=job.rank, size=job.size,
                   device=job.devices[job.rank], sets=sets, rate_gbps=_allreduce_rate(job),
                   cuda_ordinal=cuda_device.rank_device(job.layout) if cuda else None)


def members(engine):
    """The communicator the engine was started on: it runs on a private duplicate, so this one
    is free for the elastic side's own calls (a spawn) and outlives the engine's shutdown."""
    from mpi4py import MPI

    comm = getattr(engine, "_user_comm", None)
    return comm if comm is not None else MPI.COMM_WORLD


def _take_engine(what: str):
    engine = _take_what_started()
    if engine is None:
        raise NotInitializedError(what)
    return engine


def _take_what_started():
    """The runtime of this rank, running or broken, or None when none has a job; RUNTIME holds
    none afterwards (nor the failure of a start that broke on the way)."""
    with RUNTIME.lock:
        engine = RUNTIME.engine or RUNTIME.broken_engine
        RUNTIME.engine = None
        RUNTIME.broken_by = RUNTIME.broken_engine = None
    if engine is not None and engine.job is None and engine.side is not None:
        quietly(engine.side.comm.Revoke)   # a start that broke before its job: its side channel alone is left
        engine.side.close()                # (kept while revoked: see teardown.free)
    return engine if engine is not None and engine.job is not None else None


def _retire(engine) -> bool:
    """Step 1 of the module docstring, on this rank alone; whether the old runtime is idle (its
    threads ended, its devices quiet), so that it may be released."""
    failure = engine.state.failure or ShutdownError("the job is re-forming after a rank was lost")
    engine.peer_failed = True  # nobody waits for its threads in MPI any more (stop(), the exit hook)
    engine.state.fail(failure)
    if engine.sets is not None:
        engine.sets.fail_all(failure)
    for comm in _communicators(engine):
        quietly(comm.Revoke)  # already revoked or freed: nothing waits in it then
    deadline = time.monotonic() + RETIRE_JOIN_S
    threads = [engine._thread] + [t.thread for t in (engine.sets.threads.values() if engine.sets else ())]
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    stuck = [t.name for t in threads if t.is_alive()]
    if stuck:
        logger.warning("elastic reset: threads %s of the old runtime did not end within %.0f s; left behind",
                       stuck, RETIRE_JOIN_S)
    if engine._watchdog is not None:
        engine._watchdog.stop()
    if engine._timeline is not None:
        engine._timeline.close()
    # Before the shrink: once every survivor is past it, none still writes into a peer's memory (a
    # GPU copy or kernel queued by a thread that has ended), so each may free its own. A thread
    # left behind may still use the backends, and a device that does not go quiet may still
    # write: then nothing of this runtime is released.
    return not stuck and _within(RETIRE_JOIN_S, lambda: [quietly(b.quiesce) for b in _backends(engine)])


def _within(seconds: float, work) -> bool:
    """Run ``work()`` on a helper thread; whether it returned within ``seconds`` (else it is left
    to finish, or not, on its own)."""
    thread = threading.Thread(target=work, name="blinkflow-elastic-release", daemon=True)
    thread.start()
    thread.join(seconds)
    return not thread.is_alive()


def _backends(engine) -> List[object]:
    loops = [engine.loop] + ([t.loop for t in engine.sets.threads.values()] if engine.sets else [])
    return [backend for loop in loops if loop is not None for backend in loop.backends.values()]


def _release(engine, idle: bool) -> None:
    """Free the retired engine's backends (windows, rings, device memory and IPC mappings) and
    communicators, under a deadline. Every survivor quiesced its backends before the shrink, so
    they are closed without the barrier a revoked communicator would refuse
    (``Backend.close_after_loss``)."""
    if not idle:
        logger.warning("elastic reset: the old runtime is not idle; its memory stays mapped until this process exits")
        _unreleased.append(engine)
        return
    loops = [engine.loop] + ([t.loop for t in engine.sets.threads.values()] if engine.sets else [])

    def release() -> None:
        for loop in loops:
            if loop is not None:
                for backend in loop.backends.values():
                    try:
                        backend.close_after_loss()
                    except Exception:  # noqa: BLE001 - the rest must still be released
                        logger.exception("elastic reset: releasing the old job's %s backend failed", backend.name)
                loop.backends.clear()
                loop.job.free()
        if engine.side is not None:
            engine.side.close()

    if not _within(RELEASE_S, release):
        logger.warning("elastic reset: the old job's shared memory was not released within %.0f s; it stays "
                       "mapped until this process exits", RELEASE_S)
        _unreleased.append(engine)


def _communicators(engine) -> List[object]:
    """Every MPI communicator the engine's threads may wait in: the job's and each process set's
    (negotiation, and what backends split from them), the side channel's, and those each backend
    made for itself (found among its attributes and its wire's: backends keep their own)."""
    from mpi4py import MPI

    loops = [engine.loop] + ([t.loop for t in engine.sets.threads.values()] if engine.sets else [])
    holders: List[object] = [engine.side]
    for loop in loops:
        if loop is None:
            continue
        holders.append(loop.job)
        for backend in loop.backends.values():
            holders += [backend, getattr(backend, "wire", None)]
    found: Dict[int, object] = {}
    for holder in holders:
        for value in (vars(holder).values() if holder is not None and hasattr(holder, "__dict__") else ()):
            if isinstance(value, MPI.Comm) and value != MPI.COMM_NULL:
                found[id(value)] = value
    return list(found.values())


def _start(old: Optional[_Old], comm, started: float) -> "_Begun":
    """Steps 4 and 5 on ``comm`` (already agreed among its ranks)."""
    size, rank = comm.Get_size(), comm.Get_rank()
    kept = _old_ranks(old, comm)  # kept[new rank] = old rank, or None for a newcomer
    # Every rank must learn the old job's facts, newcomers too; the lowest old rank tells them.
    teller = _first_old(kept)
    old_size, old_sets, old_rate = comm.bcast((old.size, old.sets, old.rate_gbps) if rank == teller else None,
                                              root=teller)
    lost = tuple(sorted(set(range(old_size)) - {r for r in kept if r is not None}))
    _check_enough(lost, old_size, size)
    sets = _renumbered(old_sets, kept, lost)
    if old is not None and old.cuda_ordinal is not None:
        from ..backends.cuda.device import keep_ordinal

        keep_ordinal(old.cuda_ordinal)
    lifecycle.start(comm, [list(ranks) for ranks in sets], device=old.device if old is not None else None)
    _adopt(comm)
    reset = Reset(old_size=old_size, new_size=size, lost=lost, added=sum(r is None for r in kept),
                  old_rank=old.rank if old is not None else None, new_rank=rank, old_rate_gbps=old_rate,
                  new_rate_gbps=_allreduce_rate(RUNTIME.engine.job), seconds=time.monotonic() - started)
    return _Begun(reset, old_sets, kept)


def _check_enough(lost: Tuple[int, ...], old_size: int, size: int) -> None:
    """Step 4: TooFewRanksError when ranks were lost and fewer than the minimum are left (the same
    answer on every rank: it depends on agreed facts alone)."""
    minimum = get_config().elastic_min_np
    if lost and size < minimum:
        error = TooFewRanksError(
            f"blinkflow elastic: rank{'s' if len(lost) > 1 else ''} {', '.join(map(str, lost))} of the "
            f"{old_size}-rank job {'are' if len(lost) > 1 else 'is'} gone and {size} rank{'s are' if size > 1 else ' is'} "
            f"left, fewer than the minimum of {minimum} (blinkrun --min-np, BLINKFLOW_ELASTIC_MIN_NP); the job ends. "
            "Start it again from its last checkpoint, or lower --min-np", lost=lost, left=size)
        RUNTIME.remember_broken(None, error)  # leave at exit without MPI_Finalize: ranks are gone
        raise error


@dataclasses.dataclass(frozen=True)
class _Begun:
    """A new job started on this rank, not yet recorded (see :func:`_record`)."""

    reset: Reset
    old_sets: Dict[int, Tuple[int, ...]]
    kept: List[Optional[int]]


def _record(begun: _Begun, old: Optional[_Old]) -> Reset:
    """The new job is the job: the user's process sets renumbered, the reset counted, logged on the
    new rank 0 and in the timeline."""
    if old is not None:
        quietly(old.group.Free)
    _renumber_user_sets(begun.old_sets, begun.kept)
    reset, engine = begun.reset, RUNTIME.engine
    _history.append(reset)
    if reset.new_rank == 0:
        logger.warning(reset.describe())
    if engine._timeline is not None:
        engine._timeline.instant("elastic", "ELASTIC_RESET", {"lost": list(reset.lost), "added": reset.added,
                                                              "size": reset.new_size, "rate_gbps": reset.new_rate_gbps})
    return reset


def _adopt(comm) -> None:
    """``comm`` now carries the runtime: free the communicators earlier resets made (their runtimes
    are retired), and free ``comm`` itself before MPI_Finalize.

    Once ranks were spawned, every communicator holding them spans two launches, and Open MPI 5's
    ``MPI_Finalize`` disconnects each such communicator the program left allocated
    (``ompi_dpm_dyn_finalize``). After kill/add cycles that step corrupted the heap (glibc then
    aborted finalize: "double free or corruption", "free(): invalid next size"), and with a merged
    communicator left, and no rank lost, it crashed too (SIGSEGV) or hung. Open MPI skips the step
    when no more than one such communicator is counted as allocated."""
    global _exit_hook_registered
    for made in _made:
        quietly(made.Free)
    _made[:] = [comm]
    if not _exit_hook_registered:
        # Registered now, after MPI started and blinkflow's own exit hook was registered: atexit
        # runs it first, before that hook's (or mpi4py's) MPI_Finalize.
        atexit.register(_free_made)
        _exit_hook_registered = True


def _free_made() -> None:
    """At exit: the communicator the runtime was started on is only the elastic side's (the
    runtime works on its own duplicates), so it goes before MPI_Finalize (see :func:`_adopt`), and
    so do the retired runtimes' communicators still kept (:func:`~blinkflow.backends.teardown.free`)."""
    for made in _made:
        quietly(made.Free)
    _made.clear()
    teardown.free_kept()


def _old_ranks(old: Optional[_Old], comm) -> List[Optional[int]]:
    """For each rank of ``comm``, its rank in the old job (None: not in it); the same on every
    rank of ``comm`` (gathered, since a newcomer does not know the old job)."""
    mine = old.rank if old is not None else None
    if old is not None:
        from mpi4py import MPI

        mine = MPI.Group.Translate_ranks(comm.Get_group(), [comm.Get_rank()], old.group)[0]
        mine = None if mine == MPI.UNDEFINED else mine
    return comm.allgather(mine)


def _first_old(kept: Sequence[Optional[int]]) -> int:
    for new, old in enumerate(kept):
        if old is not None:
            return new
    return 0


def _renumbered(sets: Dict[int, Tuple[int, ...]], kept: Sequence[Optional[int]], lost: Sequence[int]
                ) -> List[Tuple[int, ...]]:
    """The old job's process sets (by id) as ranks of the new job, in id order; ProcessSetError
    for a set that lost a member (or ids that cannot be kept)."""
    new_of = {old: new for new, old in enumerate(kept) if old is not None}
    broken = [(set_id, ranks, sorted(set(ranks) & set(lost))) for set_id, ranks in sorted(sets.items())
              if set(ranks) & set(lost)]
    if broken:
        RUNTIME.remember_broken(None, ProcessSetError("process sets lost members"))
        raise ProcessSetError("blinkflow elastic: " + "; ".join(
            f"process set {set_id} (ranks {list(ranks)}) lost rank{'s' if len(gone) > 1 else ''} "
            f"{', '.join(map(str, gone))}" for set_id, ranks, gone in broken)
            + ": a process set is re-formed only when all its ranks survive. Remove the set before the loss can "
            "happen, or rebuild it from the survivors yourself (add_process_set in a reset callback)")
    if sorted(sets) != list(range(1, len(sets) + 1)):
        RUNTIME.remember_broken(None, ProcessSetError("process set ids with gaps"))
        raise ProcessSetError(f"blinkflow elastic: process sets with ids {sorted(sets)} cannot keep their ids when the "
                              "job re-forms (ids must be 1..n, none removed); remove and add them again after the reset")
    return [tuple(sorted(new_of[r] for r in sets[set_id])) for set_id in sorted(sets)]


def _renumber_user_sets(old_sets: Dict[int, Tuple[int, ...]], kept: Sequence[Optional[int]]) -> None:
    from ..runtime.process_sets import known_sets

    new_of = {old: new for new, old in enumerate(kept) if old is not None}
    for process_set in known_sets():
        if process_set.process_set_id in old_sets and process_set.ranks is not None:
            process_set.ranks = sorted(new_of[r] for r in process_set.ranks if r in new_of)


def _allreduce_rate(job) -> Optional[float]:
    try:
        return float(job.plans.get("allreduce").rate_gbps)
    except Exception:  # noqa: BLE001 - a rate is for the log line only
        return None
