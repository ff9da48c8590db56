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
import math
import operator
import os
import pickle
import sys
import threading
from typing import Any, Dict, List, Optional

import numpy as np

from ..compression import Compression
from ..config import apply_mpi_defaults, get_config
from ..errors import BlinkflowError, NotInitializedError, ShutdownError
from ..ops import Average, as_reduce_op
from .background import Engine
from .handles import Handle, Slot
from .messages import JOIN_NAME, Kind, Request
from .state import Entry

_lock = threading.Lock()
_engine: Optional[Engine] = None
_counters: Dict[str, "itertools.count"] = {}
_broken_by: Optional[BaseException] = None
"""Set when an engine stopped after a peer died or its own loop broke: MPI on the world
communicator cannot be trusted any more (MPI_Finalize, or a new init on it, would wait forever)."""

_DTYPES = {"bool", "uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64", "int64",
           "float16", "float32", "float64"}
_NAMES = {np.dtype(name): name for name in _DTYPES}  # native byte order only: '>f4' is not a key


# ---- lifecycle -----------------------------------------------------------------------------------
def init(comm=None) -> None:
    """Start the runtime on ``comm`` (default ``MPI.COMM_WORLD``); collective over it.

    Discovers the hosts and topology, makes the all-reduce plan, checks that every rank made the
    same one (PlanError naming the ranks otherwise) and starts the background thread. Calling it
    again while running does nothing; after ``shutdown()`` (on every rank) it starts afresh.
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
        engine.start()
        _engine = engine
        _counters.clear()


def shutdown() -> None:
    """Stop the runtime on every rank (any rank calling it stops the job's collectives; calls still
    in flight elsewhere raise ShutdownError). Safe to call twice or before ``init``."""
    global _engine
    with _lock:
        engine, _engine = _engine, None
    if engine is not None:
        engine.stop("shutdown() was called")
        _remember_if_broken(engine)


def _remember_if_broken(engine: Engine) -> None:
    global _broken_by
    if (engine.peer_failed or engine.broken) and _broken_by is None:
        _broken_by = engine.state.failure or ShutdownError("a peer rank failed")


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
    engine = _engine
    if _broken_by is not None or (engine is not None and (engine.peer_failed or engine.broken)):
        # A peer died, or this rank's loop died mid-collective: MPI_Finalize would wait forever
        # for ranks that cannot arrive (also after the user called shutdown() on the error).
        # Leave now with a failure status; mpirun (or the peers' watchdogs) then end the others.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)
    if engine is not None:
        shutdown()


atexit.register(_exit_hook)  # after mpi4py's own atexit, so it runs before MPI_Finalize


# ---- submission ----------------------------------------------------------------------------------
def _same_processes(comm, running) -> bool:
    """Whether ``comm`` holds the running job's processes in its order (the job runs on a private
    duplicate, which compares as congruent); anything but a communicator is a typed error."""
    from mpi4py import MPI

    if not isinstance(comm, MPI.Comm):
        raise BlinkflowError(f"blinkflow.init(comm): expected an mpi4py communicator, got {type(comm).__name__}")
    return MPI.Comm.Compare(comm, running) in (MPI.IDENT, MPI.CONGRUENT)


def _scale_factor(value, which: str, what: str, name) -> float:
    """A pre/postscale factor as a float: a finite number, or a typed error (before a name is
    drawn: a call that fails on one rank must not shift the others' automatic names)."""
    try:
        factor = float(value)
    except (TypeError, ValueError):
        factor = None
    if factor is None or not math.isfinite(factor):
        raise BlinkflowError(f"{what} {_label(name)}: {which}_factor must be a finite number, got {value!r}")
    return factor


def _auto_name(op: str) -> str:
    counter = _counters.setdefault(op, itertools.count())
    return f"{op}.noname.{next(counter)}"


def _as_array(tensor):
    if type(tensor) is np.ndarray and tensor.dtype in _NAMES:  # the common case, checked cheaply
        return tensor, "cpu"
    array, device = (tensor, "cuda") if type(tensor).__module__.startswith("cupy") else (np.asarray(tensor), "cpu")
    if array.dtype in _NAMES:  # the common case, without numpy's slow dtype.name
        return array, device
    if array.dtype.name not in _DTYPES:
        raise BlinkflowError(f"dtype {array.dtype} is not supported by blinkflow collectives; use one of "
                             f"{', '.join(sorted(_DTYPES))}")
    # '>f4' is named float32 too, but its bytes would travel as they are
    return array.astype(array.dtype.newbyteorder("=")), device


_dtype_of, _shape_of = operator.attrgetter("dtype"), operator.attrgetter("shape")


def _numpy_members(tensors: List[Any]):
    """(dtype names, shapes) of a group whose members are all plain numpy arrays of supported
    native dtypes (a training step's gradients), else None: then each member goes through
    :func:`_as_array`. Built with C-level maps: a step groups hundreds of tensors, and this
    runs right after backprop flushed the caches."""
    if set(map(type, tensors)) != {np.ndarray}:
        return None
    names = list(map(_NAMES.get, map(_dtype_of, tensors)))
    if None in names:
        return None
    return names, list(map(_shape_of, tensors))


def _dtype_name(array) -> str:
    """The name of a (native, supported) dtype; a dict lookup, not numpy's ``dtype.name``."""
    return _NAMES[array.dtype]


def _label(name: Optional[str]) -> str:
    return repr(name) if name is not None else "(unnamed)"


def _no_bool_average(array, op, what: str, name: Optional[str]) -> None:
    if op is Average and array.dtype.kind == "b":
        raise BlinkflowError(f"{what} {_label(name)}: Average is not defined for bool tensors; use Sum or Max "
                             "(logical or) or Min or Product (logical and)")


def _need_dims(array, op: str, name: Optional[str]) -> None:
    if array.ndim == 0:
        raise BlinkflowError(f"{op} {_label(name)}: a 0-d tensor has no first dimension to split or concatenate; "
                             "reshape it to (1,)")


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


def _check_user_name(name: Optional[str]) -> None:
    if name is not None and str(name).startswith("__bf"):
        raise BlinkflowError(f"tensor name {name!r}: names starting with '__bf' are reserved for blinkflow")


def _allreduce_arrays(tensors, op, name, compression):
    """Compressed arrays, devices and decompression contexts of all-reduce inputs, validated before
    an automatic name is drawn (a call that fails locally must not shift later calls' names)."""
    if compression is Compression.none:  # hundreds of gradients per step: skip the identity calls
        pairs = [_as_array(tensor) for tensor in tensors]
        contexts = [None] * len(pairs)
    else:
        contexts = []
        pairs = []
        for tensor in tensors:
            compressed, ctx = compression.compress(tensor)
            pairs.append(_as_array(compressed))
            contexts.append(ctx)
    if op is Average:
        for array, _ in pairs:
            _no_bool_average(array, op, "allreduce", name)
    return [a for a, _ in pairs], [d for _, d in pairs], contexts


def allreduce_async(tensor, op=Average, name=None, prescale_factor=1.0, postscale_factor=1.0,
                    compression=Compression.none) -> int:
    """Submit an all-reduce; returns a handle for :func:`synchronize`."""
    engine = _running("blinkflow.allreduce")
    _check_user_name(name)
    op = as_reduce_op(op)
    (array,), (device,), (ctx,) = _allreduce_arrays([tensor], op, name, compression)
    prescale = _scale_factor(prescale_factor, "prescale", "allreduce", name)
    postscale = _scale_factor(postscale_factor, "postscale", "allreduce", name)
    name = name if name is not None else _auto_name("allreduce")
    request = Request(name, Kind.ALLREDUCE, _dtype_name(array), tuple(array.shape), int(op), -1,
                      prescale, postscale, None, device)
    return _submit(engine, [(request, array)], lambda results: compression.decompress(results[0], ctx))


def grouped_allreduce_async(tensors, op=Average, name=None, prescale_factor=1.0, postscale_factor=1.0,
                            compression=Compression.none) -> int:
    """Submit all-reduces of ``tensors`` (dtypes may differ) negotiated as one unit and fused
    where they fit; the handle returns a list. The group travels under one name: every rank must
    pass the same number of tensors with the same shapes and dtypes, in the same order."""
    engine = _running("blinkflow.grouped_allreduce")
    _check_user_name(name)
    op = as_reduce_op(op)
    tensors = list(tensors)
    members = _numpy_members(tensors) if compression is Compression.none else None
    if members is not None:
        names, shapes = members
        if op is Average and "bool" in names:
            _no_bool_average(tensors[names.index("bool")], op, "allreduce", name)
        arrays, device, parts = tensors, "cpu", tuple(zip(names, shapes))
    else:
        arrays, devices, ctxs = _allreduce_arrays(tensors, op, name, compression)
        if len(set(devices)) > 1:
            raise BlinkflowError(f"grouped_allreduce {_label(name)}: the tensors mix numpy and cupy arrays; "
                                 "group tensors of one device together")
        device = devices[0] if devices else "cpu"
        parts = tuple((_dtype_name(a), tuple(a.shape)) for a in arrays)
    prescale = _scale_factor(prescale_factor, "prescale", "grouped_allreduce", name)
    postscale = _scale_factor(postscale_factor, "postscale", "grouped_allreduce", name)
    name = name if name is not None else _auto_name("grouped_allreduce")
    dtypes = {d for d, _ in parts}
    request = Request(name, Kind.ALLREDUCE, dtypes.pop() if len(dtypes) == 1 else "mixed", (len(parts),), int(op),
                      -1, prescale, postscale, None, device, parts=parts)
    if compression is Compression.none:
        return _submit(engine, [(request, arrays)], lambda results: results[0])
    return _submit(engine, [(request, arrays)],
                   lambda results: [compression.decompress(r, c) for r, c in zip(results[0], ctxs)])


def allgather_async(tensor, name=None) -> int:
    engine = _running("blinkflow.allgather")
    _check_user_name(name)
    array, device = _as_array(tensor)
    _need_dims(array, "allgather", name)
    name = name if name is not None else _auto_name("allgather")
    request = Request(name, Kind.ALLGATHER, _dtype_name(array), tuple(array.shape), device=device)
    return _submit(engine, [(request, array)], lambda results: results[0])


def grouped_allgather_async(tensors, name=None) -> int:
    engine = _running("blinkflow.grouped_allgather")
    _check_user_name(name)
    arrays = [_as_array(tensor) for tensor in tensors]
    for i, (array, _) in enumerate(arrays):
        _need_dims(array, "allgather", f"{name}.{i}" if name is not None else None)
    base = name if name is not None else _auto_name("grouped_allgather")
    reqs = [(Request(f"{base}.{i}", Kind.ALLGATHER, _dtype_name(array), tuple(array.shape), device=device), array)
            for i, (array, device) in enumerate(arrays)]
    return _submit(engine, reqs, list)


def broadcast_async(tensor, root_rank, name=None) -> int:
    engine = _running("blinkflow.broadcast")
    _check_user_name(name)
    root_rank = int(root_rank)
    if not 0 <= root_rank < engine.job.size:
        raise BlinkflowError(f"broadcast root_rank {root_rank} is not a rank of this job (size {engine.job.size})")
    array, device = _as_array(tensor)
    name = name if name is not None else _auto_name("broadcast")
    request = Request(name, Kind.BROADCAST, _dtype_name(array), tuple(array.shape), root=root_rank, device=device)
    return _submit(engine, [(request, array)], lambda results: results[0])


def reducescatter_async(tensor, op=Average, name=None) -> int:
    engine = _running("blinkflow.reducescatter")
    _check_user_name(name)
    op = as_reduce_op(op)
    array, device = _as_array(tensor)
    _need_dims(array, "reducescatter", name)
    _no_bool_average(array, op, "reducescatter", name)
    name = name if name is not None else _auto_name("reducescatter")
    request = Request(name, Kind.REDUCESCATTER, _dtype_name(array), tuple(array.shape), op=int(op), device=device)
    return _submit(engine, [(request, array)], lambda results: results[0])


def alltoall_async(tensor, splits=None, name=None) -> int:
    """With ``splits`` the handle returns ``(output, received_splits)``, else the output."""
    engine = _running("blinkflow.alltoall")
    _check_user_name(name)
    array, device = _as_array(tensor)
    _need_dims(array, "alltoall", name)
    n, world = array.shape[0], engine.job.size
    if splits is None:
        if n % world:
            raise BlinkflowError(f"alltoall {_label(name)}: first dimension {n} is not divisible by the number of "
                                 f"ranks {world}; pass splits= to send uneven slices")
        parts = (n // world,) * world
    else:
        parts = tuple(int(s) for s in np.asarray(splits).reshape(-1))
        if len(parts) != world or any(s < 0 for s in parts) or sum(parts) != n:
            raise BlinkflowError(f"alltoall {_label(name)}: splits {list(parts)} must be {world} non-negative "
                                 f"numbers summing to the first dimension {n}")
    name = name if name is not None else _auto_name("alltoall")
    request = Request(name, Kind.ALLTOALL, _dtype_name(array), tuple(array.shape), splits=parts, device=device)
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
    request = Request(_auto_name("barrier"), Kind.BARRIER, "uint8", ())
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
    base = name if name is not None else _auto_name("broadcast_object")
    payload, failure = None, None
    if engine.job.rank == root_rank:
        payload, failure = _pickled(obj)
    # A length of -1 tells every rank that the root could not pickle its object.
    size = -1 if failure is not None else (0 if payload is None else payload.size)
    length = int(broadcast(np.array([size], np.int64), root_rank, f"{base}.size")[0])
    if length < 0:
        raise BlinkflowError(f"broadcast_object {_label(name)}: root rank {root_rank} could not pickle its object"
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
    base = name if name is not None else _auto_name("allgather_object")
    payload, failure = _pickled(obj)
    lengths = allgather(np.array([-1 if payload is None else payload.size], np.int64), f"{base}.size")
    if (lengths < 0).any():  # every rank sees the same lengths: all raise, none waits for the data
        ranks = [int(q) for q in np.flatnonzero(lengths < 0)]
        raise BlinkflowError(f"allgather_object {_label(name)}: ranks {ranks} could not pickle their objects"
                             f"{f' (here: {failure})' if failure else ''}; gather only picklable objects")
    data = allgather(payload, f"{base}.data")
    out, at = [], 0
    for n in lengths:
        out.append(pickle.loads(data[at:at + int(n)].tobytes()))
        at += int(n)
    return out
