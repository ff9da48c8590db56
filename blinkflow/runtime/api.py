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
from ..errors import BlinkflowError, InvalidArgumentError, NotInitializedError, ShutdownError
from ..ops import Average, as_reduce_op
from . import arguments, startup
from .background import SHUTDOWN_CALLED, Engine
from .handles import Handle, Slot
from .messages import JOIN_NAME, Kind, Request, clipped, shown
from .state import Entry

_lock = threading.Lock()
_engine: Optional[Engine] = None
_counters: Dict[str, "itertools.count"] = {}
_broken_by: Optional[BaseException] = None
"""Set when an engine stopped after a peer died or its own loop broke, or init failed with ranks
left inside a collective: MPI on the world communicator cannot be trusted any more
(MPI_Finalize, or a new init on it, would wait forever)."""
_broken_engine: Optional[Engine] = None



# ---- lifecycle -----------------------------------------------------------------------------------
def init(comm=None) -> None:
    """Start the runtime on ``comm`` (default ``MPI.COMM_WORLD``); collective over it.

    Discovers the hosts and topology, makes the all-reduce plan, checks that every rank made the
    same one (PlanError naming the ranks otherwise) and starts the background thread. Calling it
    again while running does nothing; after ``shutdown()`` (on every rank) it starts afresh.
    Every rank must call it within ``BLINKFLOW_START_TIMEOUT`` seconds (60) of the others, and a
    rank whose set-up fails tells the others: InitError names the ranks missing or failed.
    """
    global _engine
    with _lock:
        if _engine is not None and _engine.alive:
            if comm is not None and not _same_processes(comm, _engine.job.comm):
                raise BlinkflowError("blinkflow.init(comm): blinkflow is already running on another communicator "
                                     f"({_engine.job.size} ranks); call blinkflow.shutdown() on every rank first")
            return
        if _engine is not None:  # stopped because a peer shut the job down: clean up first
            _engine.stop("re-init")
            _remember_if_broken(_engine)
            _engine = None
        if _broken_by is not None and comm is None:
            raise ShutdownError(f"blinkflow cannot start again on a job whose rank failed ({_broken_by}); restart "
                                "the job", rank=getattr(_broken_by, "rank", None))
        if comm is None and "mpi4py.MPI" not in sys.modules:
            apply_mpi_defaults()  # before MPI_Init, which importing mpi4py.MPI performs
        engine = Engine(get_config(), comm)
        try:
            engine.start()
        except BaseException as error:
            if engine.broken or startup.leaves_peers_waiting(error):
                _remember_broken(engine, error)  # MPI may be inside a collective that cannot finish
            raise
        _engine = engine
        _counters.clear()


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


def auto_name(op: str) -> str:
    """The next automatic name of ``op`` (``<op>.noname.<n>``); the TensorFlow bindings draw theirs
    here too when eager."""
    counter = _counters.setdefault(op, itertools.count())
    return f"{op}.noname.{next(counter)}"


def _call_name(name, op: str) -> str:
    """The name a call travels under, drawn before its arguments are looked at: a call this rank
    refuses must use up its automatic name like the others' accepted calls do, or its next
    call would pair with theirs (a silently wrong result)."""
    if name is None:
        return auto_name(op)
    reserved = arguments.reserved_name(name)
    if reserved is not None:  # the others cannot have used this name: nothing to pair with
        raise InvalidArgumentError(reserved)
    return name


def _submit(engine: Engine, requests_arrays, finish) -> int:
    slots = [Slot() for _ in requests_arrays]
    entries = [Entry(request, array, slot) for (request, array), slot in zip(requests_arrays, slots)]
    timeline = engine._timeline
    if timeline is not None:
        for entry in entries:
            timeline.start(entry.name, "QUEUED")  # before submit: the background may drain at once
    try:
        engine.state.submit(entries)
    except BlinkflowError:
        if timeline is not None:
            for entry in entries:
                timeline.end(entry.name, "QUEUED")
        raise
    return engine.state.handles.add(Handle(slots, finish))


def _refused(engine: Engine, kind: Kind, name: str, error: Exception) -> int:
    """Submit a call this rank refuses (bad arguments) under its name, carrying the reason: the
    coordinator answers every rank with one InvalidArgumentError naming this rank and reason,
    so no rank waits for it and the next collective pairs as it should."""
    reason = str(error) if isinstance(error, BlinkflowError) else f"{type(error).__name__}: {error}"
    request = Request(name, kind, "", (), rejected=clipped(reason or type(error).__name__))
    return _submit(engine, [(request, None)], _refusals_never_finish)


def _refusals_never_finish(results):
    raise AssertionError("a refused call completed")  # its response is always an error


def refused_async(kind: str, name: str, error: Exception) -> int:
    """Submit a call that bindings (TensorFlow) refused before reaching the runtime, under
    ``name``; ``synchronize`` raises the error every rank of the call gets."""
    return _refused(_running(f"blinkflow.{kind}"), Kind[kind.upper()], name, error)


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
                    compression=Compression.none) -> int:
    """Submit an all-reduce; returns a handle for :func:`synchronize`."""
    engine = _running("blinkflow.allreduce")
    name = _call_name(name, "allreduce")
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
        return _refused(engine, Kind.ALLREDUCE, name, e)
    request = Request(name, Kind.ALLREDUCE, arguments.dtype_name(array), tuple(array.shape), int(op), -1,
                      prescale, postscale, None, device)
    if ctx is None:
        return _submit(engine, [(request, array)], _first)
    return _submit(engine, [(request, array)], lambda results: compression.decompress(results[0], ctx))


def _first(results):
    return results[0]


def grouped_allreduce_async(tensors, op=Average, name=None, prescale_factor=1.0, postscale_factor=1.0,
                            compression=Compression.none) -> int:
    """Submit all-reduces of ``tensors`` (dtypes may differ) negotiated as one unit and fused
    where they fit; the handle returns a list. The group travels under one name: every rank must
    pass the same number of tensors with the same shapes and dtypes, in the same order."""
    engine = _running("blinkflow.grouped_allreduce")
    name = _call_name(name, "grouped_allreduce")
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
        return _refused(engine, Kind.ALLREDUCE, name, e)
    request = Request(name, Kind.ALLREDUCE, _common_dtype(parts), (len(parts),), int(op),
                      -1, prescale, postscale, None, device, parts=parts)
    if compression is Compression.none:
        return _submit(engine, [(request, arrays)], _first)
    return _submit(engine, [(request, arrays)],
                   lambda results: [compression.decompress(r, c) for r, c in zip(results[0], ctxs)])


def _one_device(devices: List[str]) -> str:
    if len(set(devices)) > 1:
        raise InvalidArgumentError("the tensors mix numpy and cupy arrays; group tensors of one device together")
    return devices[0] if devices else "cpu"


def _common_dtype(parts) -> str:
    dtypes = {d for d, _ in parts}
    return dtypes.pop() if len(dtypes) == 1 else "mixed"


def allgather_async(tensor, name=None) -> int:
    engine = _running("blinkflow.allgather")
    name = _call_name(name, "allgather")
    try:
        array, device = arguments.as_array(tensor)
        arguments.need_dims(array)
    except Exception as e:  # noqa: BLE001 - whatever this rank refuses, every rank must hear of it
        return _refused(engine, Kind.ALLGATHER, name, e)
    request = Request(name, Kind.ALLGATHER, arguments.dtype_name(array), tuple(array.shape), device=device)
    return _submit(engine, [(request, array)], _first)


def _group_members(tensors, check=None):
    """(arrays, device, parts) of a group of tensors, each checked (member by member)."""
    pairs = [arguments.member(i, arguments.as_array, t) for i, t in enumerate(tensors)]
    if check is not None:
        for i, (array, _) in enumerate(pairs):
            arguments.member(i, check, array)
    arrays = [a for a, _ in pairs]
    return arrays, _one_device([d for _, d in pairs]), tuple((arguments.dtype_name(a), tuple(a.shape))
                                                             for a in arrays)


def grouped_allgather_async(tensors, name=None) -> int:
    """All-gather each of ``tensors``; the handle returns a list. The group is one request (one
    name): a rank that passes a different number of tensors gets the same TensorMismatchError
    as the others, instead of the ranks with fewer returning while the others wait."""
    engine = _running("blinkflow.grouped_allgather")
    name = _call_name(name, "grouped_allgather")
    try:
        arrays, device, parts = _group_members(list(tensors), arguments.need_dims)
    except Exception as e:  # noqa: BLE001 - whatever this rank refuses, every rank must hear of it
        return _refused(engine, Kind.ALLGATHER, name, e)
    request = Request(name, Kind.ALLGATHER, _common_dtype(parts), (len(parts),), device=device, parts=parts)
    return _submit(engine, [(request, arrays)], _first)


def broadcast_async(tensor, root_rank, name=None) -> int:
    engine = _running("blinkflow.broadcast")
    name = _call_name(name, "broadcast")
    try:
        root_rank = arguments.root_rank(root_rank, engine.job.size)
        array, device = arguments.as_array(tensor)
    except Exception as e:  # noqa: BLE001 - whatever this rank refuses, every rank must hear of it
        return _refused(engine, Kind.BROADCAST, name, e)
    request = Request(name, Kind.BROADCAST, arguments.dtype_name(array), tuple(array.shape), root=root_rank,
                      device=device)
    return _submit(engine, [(request, array)], _first)


def grouped_broadcast_async(tensors, root_rank, name=None) -> int:
    """Broadcast each of ``tensors`` from ``root_rank`` as one request (one name); the handle
    returns a list. Every rank must pass the same number of tensors, shapes and dtypes."""
    engine = _running("blinkflow.grouped_broadcast")
    name = _call_name(name, "grouped_broadcast")
    try:
        root_rank = arguments.root_rank(root_rank, engine.job.size)
        arrays, device, parts = _group_members(list(tensors))
    except Exception as e:  # noqa: BLE001 - whatever this rank refuses, every rank must hear of it
        return _refused(engine, Kind.BROADCAST, name, e)
    request = Request(name, Kind.BROADCAST, _common_dtype(parts), (len(parts),), root=root_rank, device=device,
                      parts=parts)
    return _submit(engine, [(request, arrays)], _first)


def reducescatter_async(tensor, op=Average, name=None) -> int:
    engine = _running("blinkflow.reducescatter")
    name = _call_name(name, "reducescatter")
    try:
        op = as_reduce_op(op)
        array, device = arguments.as_array(tensor)
        arguments.need_dims(array)
        arguments.no_bool_average(array, op)
    except Exception as e:  # noqa: BLE001 - whatever this rank refuses, every rank must hear of it
        return _refused(engine, Kind.REDUCESCATTER, name, e)
    request = Request(name, Kind.REDUCESCATTER, arguments.dtype_name(array), tuple(array.shape), op=int(op),
                      device=device)
    return _submit(engine, [(request, array)], _first)


def alltoall_async(tensor, splits=None, name=None) -> int:
    """With ``splits`` the handle returns ``(output, received_splits)``, else the output."""
    engine = _running("blinkflow.alltoall")
    name = _call_name(name, "alltoall")
    try:
        array, device = arguments.as_array(tensor)
        arguments.need_dims(array)
        parts = arguments.alltoall_splits(splits, array.shape[0], engine.job.size)
    except Exception as e:  # noqa: BLE001 - whatever this rank refuses, every rank must hear of it
        return _refused(engine, Kind.ALLTOALL, name, e)
    request = Request(name, Kind.ALLTOALL, arguments.dtype_name(array), tuple(array.shape), splits=parts,
                      device=device)
    with_splits = splits is not None
    return _submit(engine, [(request, array)], lambda results: results[0] if with_splits else results[0][0])


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
              compression=Compression.none):
    return synchronize(allreduce_async(tensor, op, name, prescale_factor, postscale_factor, compression))


def grouped_allreduce(tensors, op=Average, name=None, prescale_factor=1.0, postscale_factor=1.0,
                      compression=Compression.none):
    return synchronize(grouped_allreduce_async(tensors, op, name, prescale_factor, postscale_factor, compression))


def allgather(tensor, name=None):
    return synchronize(allgather_async(tensor, name))


def grouped_allgather(tensors, name=None):
    return synchronize(grouped_allgather_async(tensors, name))


def broadcast(tensor, root_rank, name=None):
    return synchronize(broadcast_async(tensor, root_rank, name))


def reducescatter(tensor, op=Average, name=None):
    return synchronize(reducescatter_async(tensor, op, name))


def alltoall(tensor, splits=None, name=None):
    return synchronize(alltoall_async(tensor, splits, name))


def barrier() -> None:
    """Wait until every rank has called ``barrier()``."""
    engine = _running("blinkflow.barrier")
    request = Request(auto_name("barrier"), Kind.BARRIER, "uint8", ())
    synchronize(_submit(engine, [(request, None)], lambda results: None))


def join() -> int:
    """Declare that this rank has no more collectives; wait until every rank has joined.

    Meanwhile this rank takes part in the others' all-reduces with zeros (Sum and Average only;
    Average still divides by the full size) and in their all-gathers with no rows. Returns the
    rank that joined last.
    """
    engine = _running("blinkflow.join")
    request = Request(JOIN_NAME, Kind.JOIN, "uint8", ())
    last = synchronize(_submit(engine, [(request, None)], lambda results: results[0]))
    # Ranks made different numbers of unnamed calls before joining (that is what join is for):
    # every rank starts the automatic names afresh, or the next unnamed call would not match.
    _counters.clear()
    return last


def broadcast_object(obj: Any, root_rank: int = 0, name: Optional[str] = None) -> Any:
    """``root_rank``'s ``obj`` (pickled) on every rank."""
    engine = _running("blinkflow.broadcast_object")
    base = name if name is not None else auto_name("broadcast_object")
    payload, failure = None, None
    if engine.job.rank == root_rank:
        payload, failure = _pickled(obj)
    # A length of -1 tells every rank that the root could not pickle its object.
    size = -1 if failure is not None else (0 if payload is None else payload.size)
    length = int(broadcast(np.array([size], np.int64), root_rank, f"{base}.size")[0])
    if length < 0:
        raise BlinkflowError(f"broadcast_object {shown(base)}: root rank {root_rank} could not pickle its object"
                             f"{f' ({failure})' if failure else ''}; broadcast only picklable objects")
    data = broadcast(payload if payload is not None else np.empty(length, np.uint8), root_rank, f"{base}.data")
    return pickle.loads(data.tobytes())


def _pickled(obj: Any):
    """(bytes of ``obj`` as uint8, None), or (None, why) when it cannot be pickled."""
    try:
        return np.frombuffer(pickle.dumps(obj), np.uint8), None
    except Exception as e:  # noqa: BLE001 - pickling raises many types (PicklingError, TypeError, ...)
        return None, f"{type(e).__name__}: {e}"


def allgather_object(obj: Any, name: Optional[str] = None) -> List[Any]:
    """Every rank's ``obj`` (pickled), in rank order."""
    _running("blinkflow.allgather_object")
    base = name if name is not None else auto_name("allgather_object")
    payload, failure = _pickled(obj)
    lengths = allgather(np.array([-1 if payload is None else payload.size], np.int64), f"{base}.size")
    if (lengths < 0).any():  # every rank sees the same lengths: all raise, none waits for the data
        ranks = [int(q) for q in np.flatnonzero(lengths < 0)]
        raise BlinkflowError(f"allgather_object {shown(base)}: ranks {ranks} could not pickle their objects"
                             f"{f' (here: {failure})' if failure else ''}; gather only picklable objects")
    data = allgather(payload, f"{base}.data")
    out, at = [], 0
    for n in lengths:
        out.append(pickle.loads(data[at:at + int(n)].tobytes()))
        at += int(n)
    return out
