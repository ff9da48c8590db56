"""Every collective is submitted the same way; one table says how each one's arguments become
a request.

:func:`submit` does, for any entry of :data:`COLLECTIVES`:

1. the loop of the call's process set (a set this rank cannot use raises here, on this rank alone);
2. the call's name, drawn before its arguments are looked at (:func:`.enqueue.call_name`);
3. the entry's ``prepare``: the arguments checked and turned into the request's fields, the arrays
   it moves and ``finish`` (the handle's result from the request's result), or refused: whatever
   a rank refuses is still sent under the call's name, so every rank of the call raises the same
   InvalidArgumentError and the next collective pairs as it should;
4. the request onto the loop's queue; the handle comes back.

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
from .enqueue import call_name, enqueue, enqueue_refusal, first
from .global_state import RUNTIME
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
    collective = COLLECTIVES[what]
    loop = loop_of(RUNTIME.running(f"blinkflow.{what}"), process_set, what)
    name = call_name(name, what, loop.set_id)
    try:
        fields, arrays, finish = collective.prepare(loop, **call)
        if fields.get("device") == "cuda":
            _on_rank_gpu(arrays, loop, name)
    except Exception as e:  # noqa: BLE001 - whatever this rank refuses, every rank must hear of it
        return enqueue_refusal(loop, collective.kind, name, e)
    return enqueue(loop, [(Request(name, collective.kind, **fields), arrays)], finish)


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
