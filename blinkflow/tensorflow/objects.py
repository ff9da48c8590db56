"""Horovod's object collectives for TensorFlow programs: ``broadcast_object``,
``broadcast_object_fn``, ``allgather_object``.

The runtime's object collectives (:mod:`blinkflow.runtime.objects`: pickled, travelling as
numpy bytes) need no TensorFlow session, so the same calls work eagerly, inside a TF1 program
and before any graph exists. ``session`` is accepted for Horovod's signatures (its versions ran
TF ops in that session).
"""
from __future__ import annotations

from typing import Any, Callable, List, Optional

from ..runtime import objects


def broadcast_object(obj: Any, root_rank: int = 0, session=None, name: Optional[str] = None,
                     process_set=None) -> Any:
    """``root_rank``'s ``obj`` on every rank of ``process_set``."""
    return objects.broadcast_object(obj, root_rank, name=name, process_set=process_set)


def broadcast_object_fn(root_rank: int = 0, session=None, name: Optional[str] = None,
                        process_set=None) -> Callable[[Any], Any]:
    """A function that broadcasts its argument from ``root_rank`` (Horovod built placeholders and
    ran them in ``session``); each call is one collective, named after ``name`` and the call's
    number when ``name`` is given."""
    calls = [0]

    def broadcast(obj: Any) -> Any:
        call_name = None if name is None else f"{name}.{calls[0]}"
        calls[0] += 1
        return broadcast_object(obj, root_rank, name=call_name, process_set=process_set)

    return broadcast


def allgather_object(obj: Any, session=None, name: Optional[str] = None, process_set=None) -> List[Any]:
    """Every rank's ``obj``, in rank order (of ``process_set``)."""
    return objects.allgather_object(obj, name=name, process_set=process_set)
