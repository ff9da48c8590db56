"""The calls that carry no data and only make ranks wait for each other: ``barrier`` and ``join``."""
from __future__ import annotations

from .enqueue import enqueue, synchronize
from .global_state import RUNTIME
from .messages import JOIN_NAME, Kind, Request
from .process_sets import loop_of


def barrier(process_set=None) -> None:
    """Wait until every rank (of ``process_set``) has called ``barrier()``."""
    loop = loop_of(RUNTIME.running("blinkflow.barrier"), process_set, "barrier")
    request = Request(RUNTIME.auto_name("barrier", loop.set_id), Kind.BARRIER, "uint8", ())
    synchronize(enqueue(loop, [(request, None)], lambda results: None))


def join() -> int:
    """Declare that this rank has no more collectives; wait until every rank has joined.

    Meanwhile this rank takes part in the others' all-reduces with zeros (Sum and Average only;
    Average still divides by the full size) and in their all-gathers with no rows. Returns the
    rank that joined last. Only the global set joins (Horovod's rule).
    """
    engine = RUNTIME.running("blinkflow.join")
    request = Request(JOIN_NAME, Kind.JOIN, "uint8", ())
    last = synchronize(enqueue(engine.loop, [(request, None)], lambda results: results[0]))
    # Ranks made different numbers of unnamed calls before joining (that is what join is for):
    # every rank starts the automatic names afresh, or the next unnamed call would not match.
    RUNTIME.forget_names()
    return last
