"""Horovod's object collectives: any picklable object, pickled into bytes that travel as numpy
uint8 arrays through two named collectives (its length, then its bytes).

Shared by ``blinkflow.broadcast_object`` / ``allgather_object`` and the TensorFlow binding's,
which need no TensorFlow session for them. A rank whose object cannot be pickled sends a
length of -1, so every rank of the call raises the same error instead of waiting for its bytes.
"""
from __future__ import annotations

import pickle
from typing import Any, List, Optional

import numpy as np

from ..errors import BlinkflowError
from .collectives import submit
from .enqueue import synchronize
from .global_state import RUNTIME
from .messages import shown
from .process_sets import loop_of


def broadcast_object(obj: Any, root_rank: int = 0, name: Optional[str] = None, process_set=None) -> Any:
    """``root_rank``'s ``obj`` (pickled) on every rank (of ``process_set``)."""
    engine = RUNTIME.running("blinkflow.broadcast_object")
    loop = loop_of(engine, process_set, "broadcast_object")
    base = name if name is not None else RUNTIME.auto_name("broadcast_object", loop.set_id)
    payload, failure = None, None
    if engine.job.rank == root_rank:
        payload, failure = _pickled(obj)
    size = -1 if failure is not None else (0 if payload is None else payload.size)
    length = int(_broadcast(np.array([size], np.int64), root_rank, f"{base}.size", process_set)[0])
    if length < 0:
        raise BlinkflowError(f"broadcast_object {shown(base)}: root rank {root_rank} could not pickle its object"
                             f"{f' ({failure})' if failure else ''}; broadcast only picklable objects")
    data = _broadcast(payload if payload is not None else np.empty(length, np.uint8), root_rank, f"{base}.data",
                      process_set)
    return pickle.loads(data.tobytes())


def allgather_object(obj: Any, name: Optional[str] = None, process_set=None) -> List[Any]:
    """Every rank's ``obj`` (pickled), in rank order (of ``process_set``)."""
    loop = loop_of(RUNTIME.running("blinkflow.allgather_object"), process_set, "allgather_object")
    base = name if name is not None else RUNTIME.auto_name("allgather_object", loop.set_id)
    payload, failure = _pickled(obj)
    lengths = _allgather(np.array([-1 if payload is None else payload.size], np.int64), f"{base}.size", process_set)
    if (lengths < 0).any():  # every rank sees the same lengths: all raise, none waits for the data
        ranks = [loop.job.global_ranks[int(q)] for q in np.flatnonzero(lengths < 0)]
        raise BlinkflowError(f"allgather_object {shown(base)}: ranks {ranks} could not pickle their objects"
                             f"{f' (here: {failure})' if failure else ''}; gather only picklable objects")
    data = _allgather(payload, f"{base}.data", process_set)
    out, at = [], 0
    for n in lengths:
        out.append(pickle.loads(data[at:at + int(n)].tobytes()))
        at += int(n)
    return out


def _pickled(obj: Any):
    """(bytes of ``obj`` as uint8, None), or (None, why) when it cannot be pickled."""
    try:
        return np.frombuffer(pickle.dumps(obj), np.uint8), None
    except Exception as e:  # noqa: BLE001 - pickling raises many types (PicklingError, TypeError, ...)
        return None, f"{type(e).__name__}: {e}"


def _broadcast(array, root_rank: int, name: str, process_set):
    return synchronize(submit("broadcast", name, process_set, tensor=array, root_rank=root_rank))


def _allgather(array, name: str, process_set):
    return synchronize(submit("allgather", name, process_set, tensor=array))
