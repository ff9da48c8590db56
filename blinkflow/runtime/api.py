"""The framework-neutral runtime API (DESIGN §3.1) on numpy (and cupy) arrays.

``blinkflow.allreduce`` & co. dispatch numpy/cupy arrays here; ``blinkflow.init`` and the other
names of ``blinkflow._RUNTIME_NAMES`` are served from this module.

Asynchronous interface (the TensorFlow bindings build on it; it is stable):

* ``allreduce_async(tensor, op=Average, name=None, prescale_factor=1.0, postscale_factor=1.0,
  compression=Compression.none) -> int``, and likewise ``grouped_allreduce_async(tensors, ...)``,
  ``allgather_async(tensor, name=None)``, ``grouped_allgather_async(tensors, name=None)``,
  ``broadcast_async(tensor, root_rank, name=None)``, ``reducescatter_async(tensor, op=Average,
  name=None)``, ``alltoall_async(tensor, splits=None, name=None)``: submit and return a handle
  (a positive int) at once. The input must not be modified until the handle completes.
* ``poll(handle) -> bool``: whether ``synchronize`` would return without waiting. Never blocks.
* ``synchronize(handle)``: wait, forget the handle, and return what the synchronous call returns
  (a new array; a list for grouped calls; ``(output, received_splits)`` for ``alltoall`` with
  splits) or raise its error (TensorMismatchError, ShutdownError, ...). Safe from any thread.

Collectives are matched across ranks by name; unnamed calls are named ``<op>.noname.<n>`` with a
per-op counter (Horovod's rule), so ranks must issue unnamed calls in the same order. Results are
new arrays; inputs are never written and may be non-contiguous.
"""
from __future__ import annotations

import atexit
import itertools
import os
import pickle
import sys
import threading
from typing import Any, Dict, List, Optional

import numpy as np

from ..compression import Compression
from ..config import apply_mpi_defaults, get_config
from ..errors import BlinkflowError, InvalidArgumentError, NotInitializedError, ProcessSetError, ShutdownError
from ..ops import Average, as_reduce_op
from . import arguments, startup
from .background import SHUTDOWN_CALLED, Engine
from .handles import Handle, Slot
from .messages import JOIN_NAME, Kind, Request, clipped, shown
from .process_sets import ProcessSet, check_ranks, global_process_set, ranks_of_entry, set_id_of
from .state import Entry

_lock = threading.Lock()
_engine: Optional[Engine] = None
_counters: Dict[tuple, "itertools.count"] = {}
"""Automatic names per (process set id, op): a set's members draw theirs together."""
_broken_by: Optional[BaseException] = None
"""Set when an engine stopped after a peer died or its own loop broke, or init failed with ranks
left inside a collective: MPI on the world communicator cannot be trusted any more
(MPI_Finalize, or a new init on it, would wait forever)."""
_broken_engine: Optional[Engine] = None



# ---- lifecycle -----------------------------------------------------------------------------------
def init(comm=None, process_sets=None) -> None:
    """Start the runtime on ``comm`` (default ``MPI.COMM_WORLD``; or a list of its ranks, which
    then call ``init`` together); collective over it.

    Discovers the hosts and topology, makes the all-reduce plan, checks that every rank made the
    same one (PlanError naming the ranks otherwise) and starts the background thread.
    ``process_sets`` (Horovod's): a list of :class:`ProcessSet` (ranks or MPI communicators) to
    register now, in addition to ``global_process_set``; ``"dynamic"`` or None for none (sets can
    always be added later with ``add_process_set``). Calling ``init`` again while initialized does
    nothing, also after a peer's exit or ``shutdown()`` stopped the job (the next collective
    raises ShutdownError); after ``shutdown()`` on this rank it starts afresh. Every rank must
    call it within ``BLINKFLOW_START_TIMEOUT`` seconds (60) of the others, and a rank whose set-up
    fails tells the others: InitError names the ranks missing or failed.
    """
    global _engine
    with _lock:
        if _engine is not None:
            if _engine.alive and comm is not None and not isinstance(comm, (list, tuple, range)) \
                    and not _same_processes(comm, _engine.job.comm):
                raise BlinkflowError("blinkflow.init(comm): blinkflow is already running on another communicator "
                                     f"({_engine.job.size} ranks); call blinkflow.shutdown() on every rank first")
            return  # Horovod's rule: a no-op; a stopped job says so at the next collective
        if _broken_by is not None and comm is None:
            raise ShutdownError(f"blinkflow cannot start again on a job whose rank failed ({_broken_by}); restart "
                                "the job", rank=getattr(_broken_by, "rank", None))
        if comm is None and "mpi4py.MPI" not in sys.modules:
            apply_mpi_defaults()  # before MPI_Init, which importing mpi4py.MPI performs
        comm = _communicator(comm)
        entries = _process_set_entries(process_sets)
        base = comm
        if base is None:
            from mpi4py import MPI

            base = MPI.COMM_WORLD
        engine = Engine(get_config(), comm, [ranks_of_entry(e, base) for e in entries])
        try:
            engine.start()
        except BaseException as error:
            if engine.broken or startup.leaves_peers_waiting(error):
                _remember_broken(engine, error)  # MPI may be inside a collective that cannot finish
            raise
        _engine = engine
        _counters.clear()
        global_process_set.ranks = list(range(engine.job.size))
        _register(engine, entries)


def _communicator(comm):
    """``init``'s ``comm``: a communicator, or a list of COMM_WORLD ranks made into one (collective
    over those ranks)."""
    if not isinstance(comm, (list, tuple, range)):
        return comm
    from mpi4py import MPI

    ranks = sorted(int(r) for r in comm)
    world = MPI.COMM_WORLD
    if world.Get_rank() not in ranks:
        raise BlinkflowError(f"blinkflow.init(comm={ranks}): rank {world.Get_rank()} of MPI.COMM_WORLD is not in the "
                             "list; only the listed ranks call init")
    return world.Create_group(world.Get_group().Incl(ranks))


def _process_set_entries(process_sets) -> List[Any]:
    if process_sets is None or (isinstance(process_sets, str) and process_sets.lower() == "dynamic"):
        return []
    if isinstance(process_sets, str):
        raise ProcessSetError(f"init(process_sets={process_sets!r}): pass a list of ProcessSet, 'dynamic' or None")
    return list(process_sets)


def _register(engine: Engine, entries: List[Any]) -> None:
    """Give the user's ProcessSet objects the ids ``init`` registered them under (Horovod's
    ``_init_process_sets``): a set given by a communicator learns its ranks."""
    ids = {ranks: set_id for set_id, ranks in engine.sets.ranks_of.items()}
    for entry in entries:
        if isinstance(entry, ProcessSet):
            ranks = ranks_of_entry(entry, engine.job.comm)
            entry.process_set_id = ids.get(ranks) if isinstance(ranks, tuple) else None
            if entry.ranks is None and isinstance(ranks, tuple):
                entry.ranks = list(ranks)


def shutdown() -> None:
    """Stop the runtime on every rank (any rank calling it stops the job's collectives; calls still
    in flight elsewhere raise ShutdownError). Safe to call twice or before ``init``."""
    global _engine
    with _lock:
        engine, _engine = _engine, None
    if engine is not None:
        engine.stop(SHUTDOWN_CALLED)
        _remember_if_broken(engine)


def _remember_if_broken(engine: Engine) -> None:
    if engine.peer_failed or engine.broken:
        _remember_broken(engine, engine.state.failure or ShutdownError("a peer rank failed"))


def _remember_broken(engine: Engine, error: BaseException) -> None:
    global _broken_by, _broken_engine
    if _broken_by is None:
        _broken_by, _broken_engine = error, engine


def is_initialized() -> bool:
    return _engine is not None


def _running(what: str) -> Engine:
    engine = _engine
    if engine is None:
        raise NotInitializedError(what)
    return engine


def size() -> int:
    return _running("blinkflow.size()").job.size


def rank() -> int:
    return _running("blinkflow.rank()").job.rank


def local_size() -> int:
    return _running("blinkflow.local_size()").job.local_size


def local_rank() -> int:
    return _running("blinkflow.local_rank()").job.local_rank


def cross_size() -> int:
    return _running("blinkflow.cross_size()").job.cross_size


def cross_rank() -> int:
    return _running("blinkflow.cross_rank()").job.cross_rank


def mpi_threads_supported() -> bool:
    """Whether MPI runs with ``MPI_THREAD_MULTIPLE`` (the user may call MPI from any thread)."""
    return _running("blinkflow.mpi_threads_supported()").mpi_threads_supported


def _exit_hook() -> None:
    global _engine
    engine = _engine
    if _broken_by is not None or (engine is not None and (engine.peer_failed or engine.broken)):
        # A peer died, or this rank's loop died mid-collective: MPI_Finalize would wait forever
        # for ranks that cannot arrive (also after the user called shutdown() on the error).
        # Leave now with a failure status; mpirun (or the peers' watchdogs) then end the others,
        # told first which rank this one leaves because of.
        failed = engine if engine is not None and (engine.peer_failed or engine.broken) else _broken_engine
        if failed is not None and failed.job is not None:
            failed.tell_departure()
        _record_for_launcher(failed)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)
    if engine is not None:
        with _lock:
            _engine = None
        engine.stop(_exit_reason())
        _remember_if_broken(engine)


def _exit_reason() -> str:
    """Why this rank's runtime stops at interpreter exit, for the peers still waiting on it."""
    error = getattr(sys, "last_exc", None) or getattr(sys, "last_value", None)  # set for an uncaught exception
    if error is not None:
        return f"its process is exiting after an uncaught {type(error).__name__}: {clipped(str(error))}"
    return "its process is exiting (its script ended or called sys.exit without blinkflow.shutdown())"


def _record_for_launcher(engine: Optional[Engine]) -> None:
    """Under blinkrun, say why this rank exits with status 1 and which rank it blames (the
    launcher then names the rank at fault first, not this casualty). The hook is blinkrun's
    sitecustomize; plain mpirun has none."""
    record = getattr(sys.modules.get("sitecustomize"), "blinkrun_record_failure", None)
    failure = _broken_by or (engine.state.failure if engine is not None and engine.state is not None else None)
    if record is not None and failure is not None:
        record(f"{type(failure).__name__}: {clipped(str(failure))}", getattr(failure, "rank", None))


atexit.register(_exit_hook)  # after mpi4py's own atexit, so it runs before MPI_Finalize


# ---- submission ----------------------------------------------------------------------------------
def _same_processes(comm, running) -> bool:
    """Whether ``comm`` holds the running job's processes in its order (the job runs on a private
    duplicate, which compares as congruent); anything but a communicator is a typed error."""
    from mpi4py import MPI

    if not isinstance(comm, MPI.Comm):
        raise BlinkflowError(f"blinkflow.init(comm): expected an mpi4py communicator, got {type(comm).__name__}")
    return MPI.Comm.Compare(comm, running) in (MPI.IDENT, MPI.CONGRUENT)


def auto_name(op: str, set_id: int = 0) -> str:
    """The next automatic name of ``op`` (``<op>.noname.<n>``) in process set ``set_id`` (each
    set's members count their own calls); the TensorFlow bindings draw theirs here too when
    eager."""
    counter = _counters.get((set_id, op))
    if counter is None:
        counter = _counters[(set_id, op)] = itertools.count()
    return f"{op}.noname.{next(counter)}"


def _call_name(name, op: str, set_id: int = 0) -> str:
    """The name a call travels under, drawn before its arguments are looked at: a call this rank
    refuses must use up its automatic name like the others' accepted calls do, or its next
    call would pair with theirs (a silently wrong result)."""
    if name is None:
        return auto_name(op, set_id)
    reserved = arguments.reserved_name(name)
    if reserved is not None:  # the others cannot have used this name: nothing to pair with
        raise InvalidArgumentError(reserved)
    return name


def _target(engine: Engine, process_set, what: str):
    """The loop of the process set a call names (None: the global set). Raised here, on this
    rank alone (nobody else expects the call): a set that is not registered (ProcessSetError, a
    ValueError as in Horovod) and a set this rank is not in (InvalidArgumentError)."""
    if process_set is None or process_set is global_process_set:
        return engine.loop
    set_id = set_id_of(process_set)
    loop = engine.loop_for(set_id)
    if loop is not None:
        return loop
    ranks = engine.sets.ranks_of.get(set_id)
    if ranks is None:
        raise ProcessSetError(f"{what}: {process_set} is not registered (it was removed, or never passed to "
                              "init(process_sets=...) or add_process_set)")
    raise InvalidArgumentError(f"{what}: rank {engine.job.rank} is not in process set {set_id} (ranks {list(ranks)}); "
                               "call a set's collectives on its ranks only")


def _submit(loop, requests_arrays, finish) -> int:
    slots = [Slot() for _ in requests_arrays]
    entries = [Entry(request, array, slot) for (request, array), slot in zip(requests_arrays, slots)]
    timeline = loop.timeline
    if timeline is not None:
        for entry in entries:
            timeline.start(entry.name, "QUEUED")  # before submit: the background may drain at once
    state = loop.state
    try:
        state.submit(entries)
    except BlinkflowError:
        if timeline is not None:
            for entry in entries:
                timeline.end(entry.name, "QUEUED")
        raise
    return state.handles.add(Handle(slots, finish))


def _refused(loop, kind: Kind, name: str, error: Exception) -> int:
    """Submit a call this rank refuses (bad arguments) under its name, carrying the reason: the
    coordinator answers every rank with one InvalidArgumentError naming this rank and reason,
    so no rank waits for it and the next collective pairs as it should."""
    reason = str(error) if isinstance(error, BlinkflowError) else f"{type(error).__name__}: {error}"
    request = Request(name, kind, "", (), rejected=clipped(reason or type(error).__name__))
    return _submit(loop, [(request, None)], _refusals_never_finish)


def _refusals_never_finish(results):
    raise AssertionError("a refused call completed")  # its response is always an error


def refused_async(kind: str, name: str, error: Exception, process_set=None) -> int:
    """Submit a call that bindings (TensorFlow) refused before reaching the runtime, under
    ``name``; ``synchronize`` raises the error every rank of the call gets."""
    what = f"blinkflow.{kind}"
    return _refused(_target(_running(what), process_set, what), Kind[kind.upper()], name, error)


def _allreduce_arrays(tensors, op, compression):
    """Compressed arrays, devices and decompression contexts of all-reduce inputs."""
    if compression is Compression.none:  # hundreds of gradients per step: skip the identity calls
        pairs = [arguments.member(i, arguments.as_array, t) for i, t in enumerate(tensors)]
        contexts = [None] * len(pairs)
    else:
        contexts = []
        pairs = []
        for i, tensor in enumerate(tensors):
            compressed, ctx = compression.compress(tensor)
            pairs.append(arguments.member(i, arguments.as_array, compressed))
            contexts.append(ctx)
    if op is Average:
        for i, (array, _) in enumerate(pairs):
            arguments.member(i, arguments.no_bool_average, array, op)
    return [a for a, _ in pairs], [d for _, d in pairs], contexts


def allreduce_async(tensor, op=Average, name=None, prescale_factor=1.0, postscale_factor=1.0,
                    compression=Compression.none, process_set=None) -> int:
    """Submit an all-reduce; returns a handle for :func:`synchronize`."""
    loop = _target(_running("blinkflow.allreduce"), process_set, "allreduce")
    name = _call_name(name, "allreduce", loop.set_id)
    try:
        op = as_reduce_op(op)
        if compression is Compression.none:
            array, device = arguments.as_array(tensor)
            ctx = None
        else:
            compressed, ctx = compression.compress(tensor)
            array, device = arguments.as_array(compressed)
        arguments.no_bool_average(array, op)
        prescale = arguments.scale_factor(prescale_factor, "prescale")
        postscale = arguments.scale_factor(postscale_factor, "postscale")
    except Exception as e:  # noqa: BLE001 - whatever this rank refuses, every rank must hear of it
        return _refused(loop, Kind.ALLREDUCE, name, e)
    request = Request(name, Kind.ALLREDUCE, arguments.dtype_name(array), tuple(array.shape), int(op), -1,
                      prescale, postscale, None, device)
    if ctx is None:
        return _submit(loop, [(request, array)], _first)
    return _submit(loop, [(request, array)], lambda results: compression.decompress(results[0], ctx))


def _first(results):
    return results[0]


def grouped_allreduce_async(tensors, op=Average, name=None, prescale_factor=1.0, postscale_factor=1.0,
                            compression=Compression.none, process_set=None) -> int:
    """Submit all-reduces of ``tensors`` (dtypes may differ) negotiated as one unit and fused
    where they fit; the handle returns a list. The group travels under one name: every rank must
    pass the same number of tensors with the same shapes and dtypes, in the same order."""
    loop = _target(_running("blinkflow.grouped_allreduce"), process_set, "grouped_allreduce")
    name = _call_name(name, "grouped_allreduce", loop.set_id)
    try:
        op = as_reduce_op(op)
        tensors = list(tensors)
        members = arguments.numpy_members(tensors) if compression is Compression.none else None
        if members is not None:
            names, shapes = members
            if op is Average and "bool" in names:
                arguments.member(names.index("bool"), arguments.no_bool_average, tensors[names.index("bool")], op)
            arrays, device, parts = tensors, "cpu", tuple(zip(names, shapes))
        else:
            arrays, devices, ctxs = _allreduce_arrays(tensors, op, compression)
            device = _one_device(devices)
            parts = tuple((arguments.dtype_name(a), tuple(a.shape)) for a in arrays)
        prescale = arguments.scale_factor(prescale_factor, "prescale")
        postscale = arguments.scale_factor(postscale_factor, "postscale")
    except Exception as e:  # noqa: BLE001 - whatever this rank refuses, every rank must hear of it
        return _refused(loop, Kind.ALLREDUCE, name, e)
    request = Request(name, Kind.ALLREDUCE, _common_dtype(parts), (len(parts),), int(op),
                      -1, prescale, postscale, None, device, parts=parts)
    if compression is Compression.none:
        return _submit(loop, [(request, arrays)], _first)
    return _submit(loop, [(request, arrays)],
                   lambda results: [compression.decompress(r, c) for r, c in zip(results[0], ctxs)])


def _one_device(devices: List[str]) -> str:
    if len(set(devices)) > 1:
        raise InvalidArgumentError("the tensors mix numpy and cupy arrays; group tensors of one device together")
    return devices[0] if devices else "cpu"


def _common_dtype(parts) -> str:
    dtypes = {d for d, _ in parts}
    return dtypes.pop() if len(dtypes) == 1 else "mixed"


def allgather_async(tensor, name=None, process_set=None) -> int:
    loop = _target(_running("blinkflow.allgather"), process_set, "allgather")
    name = _call_name(name, "allgather", loop.set_id)
    try:
        array, device = arguments.as_array(tensor)
        arguments.need_dims(array)
    except Exception as e:  # noqa: BLE001 - whatever this rank refuses, every rank must hear of it
        return _refused(loop, Kind.ALLGATHER, name, e)
    request = Request(name, Kind.ALLGATHER, arguments.dtype_name(array), tuple(array.shape), device=device)
    return _submit(loop, [(request, array)], _first)


def _group_members(tensors, check=None):
    """(arrays, device, parts) of a group of tensors, each checked (member by member)."""
    pairs = [arguments.member(i, arguments.as_array, t) for i, t in enumerate(tensors)]
    if check is not None:
        for i, (array, _) in enumerate(pairs):
            arguments.member(i, check, array)
    arrays = [a for a, _ in pairs]
    return arrays, _one_device([d for _, d in pairs]), tuple((arguments.dtype_name(a), tuple(a.shape))
                                                             for a in arrays)


def grouped_allgather_async(tensors, name=None, process_set=None) -> int:
    """All-gather each of ``tensors``; the handle returns a list. The group is one request (one
    name): a rank that passes a different number of tensors gets the same TensorMismatchError
    as the others, instead of the ranks with fewer returning while the others wait."""
    loop = _target(_running("blinkflow.grouped_allgather"), process_set, "grouped_allgather")
    name = _call_name(name, "grouped_allgather", loop.set_id)
    try:
        arrays, device, parts = _group_members(list(tensors), arguments.need_dims)
    except Exception as e:  # noqa: BLE001 - whatever this rank refuses, every rank must hear of it
        return _refused(loop, Kind.ALLGATHER, name, e)
    request = Request(name, Kind.ALLGATHER, _common_dtype(parts), (len(parts),), device=device, parts=parts)
    return _submit(loop, [(request, arrays)], _first)


def broadcast_async(tensor, root_rank, name=None, process_set=None) -> int:
    """Every rank of the set gets ``root_rank``'s tensor; ``root_rank`` is a global rank (in the set)."""
    loop = _target(_running("blinkflow.broadcast"), process_set, "broadcast")
    name = _call_name(name, "broadcast", loop.set_id)
    try:
        root_rank = arguments.root_rank(root_rank, loop.job.global_ranks, loop.label)
        array, device = arguments.as_array(tensor)
    except Exception as e:  # noqa: BLE001 - whatever this rank refuses, every rank must hear of it
        return _refused(loop, Kind.BROADCAST, name, e)
    request = Request(name, Kind.BROADCAST, arguments.dtype_name(array), tuple(array.shape), root=root_rank,
                      device=device)
    return _submit(loop, [(request, array)], _first)


def grouped_broadcast_async(tensors, root_rank, name=None, process_set=None) -> int:
    """Broadcast each of ``tensors`` from ``root_rank`` as one request (one name); the handle
    returns a list. Every rank must pass the same number of tensors, shapes and dtypes."""
    loop = _target(_running("blinkflow.grouped_broadcast"), process_set, "grouped_broadcast")
    name = _call_name(name, "grouped_broadcast", loop.set_id)
    try:
        root_rank = arguments.root_rank(root_rank, loop.job.global_ranks, loop.label)
        arrays, device, parts = _group_members(list(tensors))
    except Exception as e:  # noqa: BLE001 - whatever this rank refuses, every rank must hear of it
        return _refused(loop, Kind.BROADCAST, name, e)
    request = Request(name, Kind.BROADCAST, _common_dtype(parts), (len(parts),), root=root_rank, device=device,
                      parts=parts)
    return _submit(loop, [(request, arrays)], _first)


def reducescatter_async(tensor, op=Average, name=None, prescale_factor=1.0, postscale_factor=1.0,
                        process_set=None) -> int:
    """Reduce over the set's ranks; rank i of the set keeps block i of the first dimension (the
    first ``n % size`` ranks one row more). Scale factors as in all-reduce."""
    loop = _target(_running("blinkflow.reducescatter"), process_set, "reducescatter")
    name = _call_name(name, "reducescatter", loop.set_id)
    try:
        op = as_reduce_op(op)
        array, device = arguments.as_array(tensor)
        arguments.need_dims(array)
        arguments.no_bool_average(array, op)
        prescale = arguments.scale_factor(prescale_factor, "prescale")
        postscale = arguments.scale_factor(postscale_factor, "postscale")
    except Exception as e:  # noqa: BLE001 - whatever this rank refuses, every rank must hear of it
        return _refused(loop, Kind.REDUCESCATTER, name, e)
    request = Request(name, Kind.REDUCESCATTER, arguments.dtype_name(array), tuple(array.shape), op=int(op),
                      prescale=prescale, postscale=postscale, device=device)
    return _submit(loop, [(request, array)], _first)


def grouped_reducescatter_async(tensors, op=Average, name=None, prescale_factor=1.0, postscale_factor=1.0,
                                process_set=None) -> int:
    """Reduce-scatter each of ``tensors`` as one request (one name, Horovod's
    ``grouped_reducescatter``); the handle returns a list."""
    loop = _target(_running("blinkflow.grouped_reducescatter"), process_set, "grouped_reducescatter")
    name = _call_name(name, "grouped_reducescatter", loop.set_id)
    try:
        op = as_reduce_op(op)
        arrays, device, parts = _group_members(list(tensors), arguments.need_dims)
        if op is Average:
            for i, array in enumerate(arrays):
                arguments.member(i, arguments.no_bool_average, array, op)
        prescale = arguments.scale_factor(prescale_factor, "prescale")
        postscale = arguments.scale_factor(postscale_factor, "postscale")
    except Exception as e:  # noqa: BLE001 - whatever this rank refuses, every rank must hear of it
        return _refused(loop, Kind.REDUCESCATTER, name, e)
    request = Request(name, Kind.REDUCESCATTER, _common_dtype(parts), (len(parts),), op=int(op), prescale=prescale,
                      postscale=postscale, device=device, parts=parts)
    return _submit(loop, [(request, arrays)], _first)


def alltoall_async(tensor, splits=None, name=None, process_set=None) -> int:
    """With ``splits`` the handle returns ``(output, received_splits)``, else the output."""
    loop = _target(_running("blinkflow.alltoall"), process_set, "alltoall")
    name = _call_name(name, "alltoall", loop.set_id)
    try:
        array, device = arguments.as_array(tensor)
        arguments.need_dims(array)
        parts = arguments.alltoall_splits(splits, array.shape[0], loop.job.size)
    except Exception as e:  # noqa: BLE001 - whatever this rank refuses, every rank must hear of it
        return _refused(loop, Kind.ALLTOALL, name, e)
    request = Request(name, Kind.ALLTOALL, arguments.dtype_name(array), tuple(array.shape), splits=parts,
                      device=device)
    with_splits = splits is not None
    return _submit(loop, [(request, array)], lambda results: results[0] if with_splits else results[0][0])


def poll(handle: int) -> bool:
    """True when ``synchronize(handle)`` would not block."""
    return _running("blinkflow.poll").state.handles.get(handle).done()


def synchronize(handle: int):
    """Wait for ``handle`` and return its result (or raise its error); the handle is then spent."""
    engine = _running("blinkflow.synchronize")
    table = engine.state.handles
    h = table.get(handle)
    try:
        return h.wait(engine.state.abort_check)
    finally:
        table.pop(handle)


# ---- synchronous API -----------------------------------------------------------------------------
def allreduce(tensor, op=Average, name=None, prescale_factor=1.0, postscale_factor=1.0,
              compression=Compression.none, process_set=None):
    return synchronize(allreduce_async(tensor, op, name, prescale_factor, postscale_factor, compression,
                                       process_set))


def grouped_allreduce(tensors, op=Average, name=None, prescale_factor=1.0, postscale_factor=1.0,
                      compression=Compression.none, process_set=None):
    return synchronize(grouped_allreduce_async(tensors, op, name, prescale_factor, postscale_factor, compression,
                                               process_set))


def allgather(tensor, name=None, process_set=None):
    return synchronize(allgather_async(tensor, name, process_set))


def grouped_allgather(tensors, name=None, process_set=None):
    return synchronize(grouped_allgather_async(tensors, name, process_set))


def broadcast(tensor, root_rank, name=None, process_set=None):
    return synchronize(broadcast_async(tensor, root_rank, name, process_set))


def grouped_broadcast(tensors, root_rank, name=None, process_set=None):
    return synchronize(grouped_broadcast_async(tensors, root_rank, name, process_set))


def reducescatter(tensor, op=Average, name=None, prescale_factor=1.0, postscale_factor=1.0, process_set=None):
    return synchronize(reducescatter_async(tensor, op, name, prescale_factor, postscale_factor, process_set))


def grouped_reducescatter(tensors, op=Average, name=None, prescale_factor=1.0, postscale_factor=1.0,
                          process_set=None):
    return synchronize(grouped_reducescatter_async(tensors, op, name, prescale_factor, postscale_factor,
                                                   process_set))


def alltoall(tensor, splits=None, name=None, process_set=None):
    return synchronize(alltoall_async(tensor, splits, name, process_set))


def barrier(process_set=None) -> None:
    """Wait until every rank (of ``process_set``) has called ``barrier()``."""
    loop = _target(_running("blinkflow.barrier"), process_set, "barrier")
    request = Request(auto_name("barrier", loop.set_id), Kind.BARRIER, "uint8", ())
    synchronize(_submit(loop, [(request, None)], lambda results: None))


def join() -> int:
    """Declare that this rank has no more collectives; wait until every rank has joined.

    Meanwhile this rank takes part in the others' all-reduces with zeros (Sum and Average only;
    Average still divides by the full size) and in their all-gathers with no rows. Returns the
    rank that joined last. Only the global set joins (Horovod's rule).
    """
    engine = _running("blinkflow.join")
    request = Request(JOIN_NAME, Kind.JOIN, "uint8", ())
    last = synchronize(_submit(engine.loop, [(request, None)], lambda results: results[0]))
    # Ranks made different numbers of unnamed calls before joining (that is what join is for):
    # every rank starts the automatic names afresh, or the next unnamed call would not match.
    _counters.clear()
    return last


def broadcast_object(obj: Any, root_rank: int = 0, name: Optional[str] = None, process_set=None) -> Any:
    """``root_rank``'s ``obj`` (pickled) on every rank (of ``process_set``)."""
    engine = _running("blinkflow.broadcast_object")
    loop = _target(engine, process_set, "broadcast_object")
    base = name if name is not None else auto_name("broadcast_object", loop.set_id)
    payload, failure = None, None
    if engine.job.rank == root_rank:
        payload, failure = _pickled(obj)
    # A length of -1 tells every rank that the root could not pickle its object.
    size = -1 if failure is not None else (0 if payload is None else payload.size)
    length = int(broadcast(np.array([size], np.int64), root_rank, f"{base}.size", process_set)[0])
    if length < 0:
        raise BlinkflowError(f"broadcast_object {shown(base)}: root rank {root_rank} could not pickle its object"
                             f"{f' ({failure})' if failure else ''}; broadcast only picklable objects")
    data = broadcast(payload if payload is not None else np.empty(length, np.uint8), root_rank, f"{base}.data",
                     process_set)
    return pickle.loads(data.tobytes())


def _pickled(obj: Any):
    """(bytes of ``obj`` as uint8, None), or (None, why) when it cannot be pickled."""
    try:
        return np.frombuffer(pickle.dumps(obj), np.uint8), None
    except Exception as e:  # noqa: BLE001 - pickling raises many types (PicklingError, TypeError, ...)
        return None, f"{type(e).__name__}: {e}"


def allgather_object(obj: Any, name: Optional[str] = None, process_set=None) -> List[Any]:
    """Every rank's ``obj`` (pickled), in rank order (of ``process_set``)."""
    loop = _target(_running("blinkflow.allgather_object"), process_set, "allgather_object")
    base = name if name is not None else auto_name("allgather_object", loop.set_id)
    payload, failure = _pickled(obj)
    lengths = allgather(np.array([-1 if payload is None else payload.size], np.int64), f"{base}.size", process_set)
    if (lengths < 0).any():  # every rank sees the same lengths: all raise, none waits for the data
        ranks = [loop.job.global_ranks[int(q)] for q in np.flatnonzero(lengths < 0)]
        raise BlinkflowError(f"allgather_object {shown(base)}: ranks {ranks} could not pickle their objects"
                             f"{f' (here: {failure})' if failure else ''}; gather only picklable objects")
    data = allgather(payload, f"{base}.data", process_set)
    out, at = [], 0
    for n in lengths:
        out.append(pickle.loads(data[at:at + int(n)].tobytes()))
        at += int(n)
    return out


# ---- process sets (Horovod's add_process_set / remove_process_set) ----------------------------------
def add_process_set(process_set) -> ProcessSet:
    """Register ``process_set`` (a :class:`ProcessSet` of ranks, or a list of ranks) and return it
    with its id. Collective over every rank of the job (every rank calls it, with the same ranks),
    negotiated like a collective of the global set; the set's members then plan its collectives
    on their own devices and run them on a thread of their own. A set whose ranks equal another
    registered set's raises ProcessSetError (a ValueError) on every rank."""
    engine = _running("blinkflow.add_process_set")
    if not isinstance(process_set, ProcessSet):
        process_set = ProcessSet(process_set)
    if process_set.ranks is None:
        raise NotImplementedError("add_process_set of a set given by an MPI communicator is not implemented; build "
                                  "the ProcessSet from a list of ranks, or pass it to init(process_sets=[...])")
    name = auto_name("add_process_set")
    try:
        ranks = check_ranks(process_set.ranks, engine.job.size)
    except Exception as e:  # noqa: BLE001 - whatever this rank refuses, every rank must hear of it
        synchronize(_refused(engine.loop, Kind.ADD_PROCESS_SET, name, e))
    request = Request(name, Kind.ADD_PROCESS_SET, "uint8", ranks)
    process_set.process_set_id = synchronize(_submit(engine.loop, [(request, None)], _first))
    return process_set


def remove_process_set(process_set: ProcessSet) -> bool:
    """Unregister ``process_set`` and invalidate the object; False for the global set or a set
    that is not registered (without a collective, as Horovod). Otherwise collective over every
    rank: the set's members finish its collectives in flight (they fail with ProcessSetError)
    and free its communicators."""
    engine = _running("blinkflow.remove_process_set")
    set_id = getattr(process_set, "process_set_id", None)
    if set_id is None or set_id == 0:
        return False
    process_set._invalidate()
    request = Request(auto_name("remove_process_set"), Kind.REMOVE_PROCESS_SET, "uint8", (), root=set_id)
    removed = synchronize(_submit(engine.loop, [(request, None)], _first))
    for key in [k for k in _counters if k[0] == set_id]:  # a later set under this id counts afresh
        del _counters[key]
    return bool(removed)


def process_set_ranks(set_id: int):
    """The ranks of registered process set ``set_id`` (a tuple), or None."""
    engine = _engine
    if engine is None or engine.sets is None:
        return None
    return engine.sets.ranks_of.get(set_id)


def get_process_set_ids_and_ranks() -> Dict[int, List[int]]:
    """Every registered process set: id -> its ranks (Horovod's ``_get_process_set_ids_and_ranks``)."""
    engine = _running("blinkflow.get_process_set_ids_and_ranks")
    return {set_id: list(ranks) for set_id, ranks in sorted(engine.sets.ranks_of.items())}


def comm_process_set_id(comm) -> int:
    """The id of the registered process set whose ranks are ``comm``'s processes."""
    engine = _running("blinkflow.comm_process_set_id")
    ranks = ranks_of_entry(ProcessSet(comm), engine.job.comm)
    for set_id, known in engine.sets.ranks_of.items():
        if known == ranks:
            return set_id
    raise ProcessSetError(f"no registered process set holds the processes of {comm} (ranks {ranks})")


def is_homogeneous() -> bool:
    """Whether every host runs the same number of ranks."""
    return _running("blinkflow.is_homogeneous").job.layout.even


def start_timeline(file_path: str, mark_cycles: bool = False) -> None:
    """Start writing the Chrome-trace timeline to ``file_path`` (rank r > 0: ``.rank<r>`` before
    the suffix), as ``BLINKFLOW_TIMELINE`` does from the start. ``mark_cycles`` is accepted for
    Horovod's signature; negotiation rounds are not marked."""
    _running("blinkflow.start_timeline").start_timeline(file_path)


def stop_timeline() -> None:
    """Stop the timeline started by :func:`start_timeline` (or ``BLINKFLOW_TIMELINE``) and close it."""
    _running("blinkflow.stop_timeline").stop_timeline()
