"""The collectives of the runtime API (``allreduce_async`` & co. and their synchronous twins,
served by :mod:`.api`): every one is submitted the same way, and one table says how each one's
arguments become a request.

:func:`submit` (and :func:`run`, which waits) does, for any entry of :data:`COLLECTIVES`:

1. the loop of the call's process set (a set this rank cannot use raises here, on this rank alone);
2. the call's name, drawn before its arguments are looked at (:func:`.enqueue.call_name`);
3. the entry's ``prepare``: the arguments checked and turned into the request's fields, the arrays
   it moves and ``finish`` (the handle's result from the request's result), or refused: whatever
   a rank refuses is still sent under the call's name, so every rank of the call raises the same
   InvalidArgumentError and the next collective pairs as it should;
4. the request onto the loop's queue (:meth:`.state.SharedState.queue`); the handle comes back.

A single tensor travels as itself (its dtype and shape); a group (``grouped_*``) as one request
whose ``parts`` are its members, negotiated, fused and completed as one unit.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict, List, Tuple

from ..backends import adasum
from ..compression import Compression
from ..errors import InvalidArgumentError
from ..ops import Adasum, Average, as_reduce_op
from . import arguments
from .enqueue import call_name, enqueue_refusal, first, queue_refusal, wait
from .global_state import RUNTIME
from .handles import Handle
from .messages import Kind, Request
from .process_sets import loop_of

Prepared = Tuple[Dict[str, Any], Any, Callable[[List[Any]], Any]]
"""(the request's fields besides name and kind, the arrays it moves, finish)."""


@dataclasses.dataclass(frozen=True)
class Collective:
    kind: Kind
    prepare: Callable[..., Prepared]
    """``prepare(loop, **arguments)``; raises whatever this rank refuses."""


def submit(what: str, name, process_set, /, **call) -> int:
    """Submit collective ``what`` (a key of :data:`COLLECTIVES`) with its ``call`` arguments;
    returns a handle for :func:`.enqueue.synchronize`."""
    return RUNTIME.handles.add(_queued(what, name, process_set, call))


def run(what: str, name, process_set, /, **call):
    """Collective ``what`` as a synchronous call: submitted, waited for, its result returned
    (or its error raised), without an integer handle in between."""
    return wait(_queued(what, name, process_set, call))


def _queued(what: str, name, process_set, call) -> Handle:
    collective = COLLECTIVES[what]
    loop = loop_of(RUNTIME.running(f"blinkflow.{what}"), process_set, what)
    name = call_name(name, what, loop.set_id)
    try:
        fields, arrays, finish = collective.prepare(loop, **call)
        if fields.get("device") == "cuda":
            _on_rank_gpu(arrays, loop, name)
    except Exception as e:  # noqa: BLE001 - whatever this rank refuses, every rank must hear of it
        return queue_refusal(loop, collective.kind, name, e)
    return loop.state.queue([(Request(name, collective.kind, **fields), arrays)], finish, loop.timeline)


def refuse(op: str, name: str, error: Exception, process_set=None) -> int:
    """Submit a call that bindings (TensorFlow) refused before reaching the runtime, under
    ``name``; ``synchronize`` raises the error every rank of the call gets."""
    what = f"blinkflow.{op}"
    return enqueue_refusal(loop_of(RUNTIME.running(what), process_set, what), Kind[op.upper()], name, error)


# ---- how a single tensor and a group travel ------------------------------------------------------
def _single(array, device: str, **fields) -> Dict[str, Any]:
    return dict(dtype=arguments.dtype_name(array), shape=tuple(array.shape), device=device, **fields)


def _group(parts, device: str, **fields) -> Dict[str, Any]:
    dtypes = {d for d, _ in parts}
    return dict(dtype=dtypes.pop() if len(dtypes) == 1 else "mixed", shape=(len(parts),), device=device,
                parts=parts, **fields)


def _on_rank_gpu(arrays, loop, name: str) -> None:
    """GPU arrays must live on the GPU this rank drives: the backend packs and reduces there, and
    another GPU's memory may not even be reachable from it (no peer access)."""
    from ..backends.cuda.device import rank_device

    mine = rank_device(RUNTIME.running("blinkflow").job.layout)
    elsewhere = sorted({a.device.id for a in (arrays if isinstance(arrays, (list, tuple)) else [arrays])} - {mine})
    if elsewhere:
        raise InvalidArgumentError(
            f"{name!r}: the tensor lives on GPU {elsewhere[0]}, but this rank drives GPU {mine}; make it there "
            f"(init() makes GPU {mine} current in the thread that called it; in another thread, "
            f"cupy.cuda.Device({mine}).use() or torch.cuda.set_device({mine}))")


def _one_device(devices: List[str]) -> str:
    if len(set(devices)) > 1:
        raise InvalidArgumentError("the tensors mix numpy and cupy arrays; group tensors of one device together")
    return devices[0] if devices else "cpu"


def _members(tensors, check=None):
    """(arrays, device, parts) of a group of tensors, each checked (member by member)."""
    pairs = [arguments.member(i, arguments.as_array, t) for i, t in enumerate(tensors)]
    if check is not None:
        for i, (array, _) in enumerate(pairs):
            arguments.member(i, check, array)
    arrays = [a for a, _ in pairs]
    return arrays, _one_device([d for _, d in pairs]), tuple((arguments.dtype_name(a), tuple(a.shape))
                                                             for a in arrays)


def _scales(prescale_factor, postscale_factor) -> Dict[str, float]:
    return dict(prescale=arguments.scale_factor(prescale_factor, "prescale"),
                postscale=arguments.scale_factor(postscale_factor, "postscale"))


# ---- the collectives -----------------------------------------------------------------------------
def _allreduce(loop, tensor, op, prescale_factor, postscale_factor, compression) -> Prepared:
    op = as_reduce_op(op)
    ctx = None
    if compression is not Compression.none:
        tensor, ctx = compression.compress(tensor)
    array, device = arguments.as_array(tensor)
    arguments.no_bool_average(array, op)
    _adasum_allowed(loop, op, [arguments.dtype_name(array)])
    fields = _single(array, device, op=int(op), **_scales(prescale_factor, postscale_factor))
    if ctx is None:
        return fields, array, first
    return fields, array, lambda results: compression.decompress(results[0], ctx)


def _grouped_allreduce(loop, tensors, op, prescale_factor, postscale_factor, compression) -> Prepared:
    op = as_reduce_op(op)
    tensors = list(tensors)
    members = arguments.numpy_members(tensors) if compression is Compression.none else None
    if members is not None:  # a training step's gradients: hundreds of plain numpy arrays
        names, shapes = members
        if op is Average and "bool" in names:
            arguments.member(names.index("bool"), arguments.no_bool_average, tensors[names.index("bool")], op)
        arrays, device, parts = tensors, "cpu", tuple(zip(names, shapes))
    else:
        ctxs: List[Any] = []

        def compressed():  # member by member, so the first bad member is the one refused
            for tensor in tensors:
                tensor, ctx = compression.compress(tensor)
                ctxs.append(ctx)
                yield tensor

        no_bool = (lambda array: arguments.no_bool_average(array, op)) if op is Average else None
        arrays, device, parts = _members(compressed(), no_bool)
    _adasum_allowed(loop, op, [d for d, _ in parts])
    fields = _group(parts, device, op=int(op), **_scales(prescale_factor, postscale_factor))
    if compression is Compression.none:
        return fields, arrays, first
    return fields, arrays, lambda results: [compression.decompress(r, c) for r, c in zip(results[0], ctxs)]


def _adasum_allowed(loop, op, dtype_names) -> None:
    """Refuse an Adasum all-reduce that cannot run (see :func:`.adasum.refusal`)."""
    if op is Adasum:
        reason = adasum.refusal(dtype_names, loop.job.size)
        if reason is not None:
            raise InvalidArgumentError(reason)


def _not_adasum(op) -> None:
    if op is Adasum:
        raise InvalidArgumentError("Adasum is an all-reduce; reduce-scatter with Sum or Average, or all-reduce with "
                                   "Adasum")


def _allgather(loop, tensor) -> Prepared:
    array, device = arguments.as_array(tensor)
    arguments.need_dims(array)
    return _single(array, device), array, first


def _grouped_allgather(loop, tensors) -> Prepared:
    arrays, device, parts = _members(list(tensors), arguments.need_dims)
    return _group(parts, device), arrays, first


def _broadcast(loop, tensor, root_rank) -> Prepared:
    root = arguments.root_rank(root_rank, loop.job.global_ranks, loop.label)
    array, device = arguments.as_array(tensor)
    return _single(array, device, root=root), array, first


def _grouped_broadcast(loop, tensors, root_rank) -> Prepared:
    root = arguments.root_rank(root_rank, loop.job.global_ranks, loop.label)
    arrays, device, parts = _members(list(tensors))
    return _group(parts, device, root=root), arrays, first


def _reducescatter(loop, tensor, op, prescale_factor, postscale_factor) -> Prepared:
    op = as_reduce_op(op)
    _not_adasum(op)
    array, device = arguments.as_array(tensor)
    arguments.need_dims(array)
    arguments.no_bool_average(array, op)
    return _single(array, device, op=int(op), **_scales(prescale_factor, postscale_factor)), array, first


def _grouped_reducescatter(loop, tensors, op, prescale_factor, postscale_factor) -> Prepared:
    op = as_reduce_op(op)
    _not_adasum(op)
    arrays, device, parts = _members(list(tensors), arguments.need_dims)
    if op is Average:
        for i, array in enumerate(arrays):
            arguments.member(i, arguments.no_bool_average, array, op)
    return _group(parts, device, op=int(op), **_scales(prescale_factor, postscale_factor)), arrays, first


def _alltoall(loop, tensor, splits) -> Prepared:
    array, device = arguments.as_array(tensor)
    arguments.need_dims(array)
    fields = _single(array, device, splits=arguments.alltoall_splits(splits, array.shape[0], loop.job.size))
    if splits is not None:
        return fields, array, first  # (output, received splits)
    return fields, array, lambda results: results[0][0]


COLLECTIVES: Dict[str, Collective] = {
    "allreduce": Collective(Kind.ALLREDUCE, _allreduce),
    "grouped_allreduce": Collective(Kind.ALLREDUCE, _grouped_allreduce),
    "allgather": Collective(Kind.ALLGATHER, _allgather),
    "grouped_allgather": Collective(Kind.ALLGATHER, _grouped_allgather),
    "broadcast": Collective(Kind.BROADCAST, _broadcast),
    "grouped_broadcast": Collective(Kind.BROADCAST, _grouped_broadcast),
    "reducescatter": Collective(Kind.REDUCESCATTER, _reducescatter),
    "grouped_reducescatter": Collective(Kind.REDUCESCATTER, _grouped_reducescatter),
    "alltoall": Collective(Kind.ALLTOALL, _alltoall),
}
"""Every collective the runtime takes, by the name its automatic names and errors use."""


# ---- asynchronous collectives --------------------------------------------------------------------
def allreduce_async(tensor, op=Average, name=None, prescale_factor=1.0, postscale_factor=1.0,
                    compression=Compression.none, process_set=None) -> int:
    """Submit an all-reduce; returns a handle for :func:`synchronize`."""
    return submit("allreduce", name, process_set, tensor=tensor, op=op, prescale_factor=prescale_factor,
                  postscale_factor=postscale_factor, compression=compression)


def grouped_allreduce_async(tensors, op=Average, name=None, prescale_factor=1.0, postscale_factor=1.0,
                            compression=Compression.none, process_set=None) -> int:
    """Submit all-reduces of ``tensors`` (dtypes may differ) negotiated as one unit and fused
    where they fit; the handle returns a list. The group travels under one name: every rank must
    pass the same number of tensors with the same shapes and dtypes, in the same order."""
    return submit("grouped_allreduce", name, process_set, tensors=tensors, op=op, prescale_factor=prescale_factor,
                  postscale_factor=postscale_factor, compression=compression)


def allgather_async(tensor, name=None, process_set=None) -> int:
    """Concatenate every rank's ``tensor`` along the first dimension (which may differ per rank)."""
    return submit("allgather", name, process_set, tensor=tensor)


def grouped_allgather_async(tensors, name=None, process_set=None) -> int:
    """All-gather each of ``tensors``; the handle returns a list. The group is one request (one
    name): a rank that passes a different number of tensors gets the same TensorMismatchError
    as the others, instead of the ranks with fewer returning while the others wait."""
    return submit("grouped_allgather", name, process_set, tensors=tensors)


def broadcast_async(tensor, root_rank, name=None, process_set=None) -> int:
    """Every rank of the set gets ``root_rank``'s tensor; ``root_rank`` is a global rank (in the set)."""
    return submit("broadcast", name, process_set, tensor=tensor, root_rank=root_rank)


def grouped_broadcast_async(tensors, root_rank, name=None, process_set=None) -> int:
    """Broadcast each of ``tensors`` from ``root_rank`` as one request (one name); the handle
    returns a list. Every rank must pass the same number of tensors, shapes and dtypes."""
    return submit("grouped_broadcast", name, process_set, tensors=tensors, root_rank=root_rank)


def reducescatter_async(tensor, op=Average, name=None, prescale_factor=1.0, postscale_factor=1.0,
                        process_set=None) -> int:
    """Reduce over the set's ranks; rank i of the set keeps block i of the first dimension (the
    first ``n % size`` ranks one row more). Scale factors as in all-reduce."""
    return submit("reducescatter", name, process_set, tensor=tensor, op=op, prescale_factor=prescale_factor,
                  postscale_factor=postscale_factor)


def grouped_reducescatter_async(tensors, op=Average, name=None, prescale_factor=1.0, postscale_factor=1.0,
                                process_set=None) -> int:
    """Reduce-scatter each of ``tensors`` as one request (one name, Horovod's
    ``grouped_reducescatter``); the handle returns a list."""
    return submit("grouped_reducescatter", name, process_set, tensors=tensors, op=op,
                  prescale_factor=prescale_factor, postscale_factor=postscale_factor)


def alltoall_async(tensor, splits=None, name=None, process_set=None) -> int:
    """With ``splits`` the handle returns ``(output, received_splits)``, else the output."""
    return submit("alltoall", name, process_set, tensor=tensor, splits=splits)


def refused_async(kind: str, name: str, error: Exception, process_set=None) -> int:
    """Submit a call that bindings (TensorFlow) refused before reaching the runtime, under
    ``name``; ``synchronize`` raises the error every rank of the call gets."""
    return refuse(kind, name, error, process_set)


# ---- synchronous collectives ---------------------------------------------------------------------
# Submitted and waited for without an integer handle: nothing else can hold the call.
def allreduce(tensor, op=Average, name=None, prescale_factor=1.0, postscale_factor=1.0,
              compression=Compression.none, process_set=None):
    return run("allreduce", name, process_set, tensor=tensor, op=op, prescale_factor=prescale_factor,
               postscale_factor=postscale_factor, compression=compression)


def grouped_allreduce(tensors, op=Average, name=None, prescale_factor=1.0, postscale_factor=1.0,
                      compression=Compression.none, process_set=None):
    return run("grouped_allreduce", name, process_set, tensors=tensors, op=op, prescale_factor=prescale_factor,
               postscale_factor=postscale_factor, compression=compression)


def allgather(tensor, name=None, process_set=None):
    return run("allgather", name, process_set, tensor=tensor)


def grouped_allgather(tensors, name=None, process_set=None):
    return run("grouped_allgather", name, process_set, tensors=tensors)


def broadcast(tensor, root_rank, name=None, process_set=None):
    return run("broadcast", name, process_set, tensor=tensor, root_rank=root_rank)


def grouped_broadcast(tensors, root_rank, name=None, process_set=None):
    return run("grouped_broadcast", name, process_set, tensors=tensors, root_rank=root_rank)


def reducescatter(tensor, op=Average, name=None, prescale_factor=1.0, postscale_factor=1.0, process_set=None):
    return run("reducescatter", name, process_set, tensor=tensor, op=op, prescale_factor=prescale_factor,
               postscale_factor=postscale_factor)


def grouped_reducescatter(tensors, op=Average, name=None, prescale_factor=1.0, postscale_factor=1.0,
                          process_set=None):
    return run("grouped_reducescatter", name, process_set, tensors=tensors, op=op, prescale_factor=prescale_factor,
               postscale_factor=postscale_factor)


def alltoall(tensor, splits=None, name=None, process_set=None):
    return run("alltoall", name, process_set, tensor=tensor, splits=splits)
