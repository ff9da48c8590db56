"""Requests into a process set's queue, and handles out: what every public call ends in.

* :func:`call_name`: the name a call travels under (drawn before its arguments are checked);
* :func:`enqueue`: requests and their arrays onto a loop's queue; returns an integer handle;
* :func:`enqueue_refusal`: a call this rank refuses, still sent under its name;
* :func:`poll` / :func:`synchronize`: a handle's state, and its result or error.
"""
from __future__ import annotations

from typing import Any, Callable, List, Tuple

from ..errors import BlinkflowError, InvalidArgumentError
from . import arguments
from .global_state import RUNTIME
from .handles import Handle, Slot
from .messages import Kind, Request, clipped
from .state import Entry


def call_name(name, op: str, set_id: int = 0) -> str:
    """The name a call travels under, drawn before its arguments are looked at: a call this rank
    refuses must use up its automatic name like the others' accepted calls do, or its next
    call would pair with theirs (a silently wrong result)."""
    if name is None:
        return RUNTIME.auto_name(op, set_id)
    reserved = arguments.reserved_name(name)
    if reserved is not None:  # the others cannot have used this name: nothing to pair with
        raise InvalidArgumentError(reserved)
    return name


def enqueue(loop, requests_arrays: List[Tuple[Request, Any]], finish: Callable[[List[Any]], Any]) -> int:
    """Queue ``(request, arrays)`` pairs on ``loop`` (a process set's); the handle's result is
    ``finish`` of the requests' results."""
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


def enqueue_refusal(loop, kind: Kind, name: str, error: Exception) -> int:
    """Submit a call this rank refuses (bad arguments) under its name, carrying the reason: the
    coordinator answers every rank with one InvalidArgumentError naming this rank and reason,
    so no rank waits for it and the next collective pairs as it should."""
    reason = str(error) if isinstance(error, BlinkflowError) else f"{type(error).__name__}: {error}"
    request = Request(name, kind, "", (), rejected=clipped(reason or type(error).__name__))
    return enqueue(loop, [(request, None)], _refusals_never_finish)


def _refusals_never_finish(results):
    raise AssertionError("a refused call completed")  # its response is always an error


def first(results):
    """The result of a handle's only request."""
    return results[0]


def poll(handle: int) -> bool:
    """True when ``synchronize(handle)`` would not block."""
    return RUNTIME.running("blinkflow.poll").state.handles.get(handle).done()


def synchronize(handle: int):
    """Wait for ``handle`` and return its result (or raise its error); the handle is then spent."""
    engine = RUNTIME.running("blinkflow.synchronize")
    table = engine.state.handles
    h = table.get(handle)
    try:
        return h.wait(engine.state.abort_check)
    finally:
        table.pop(handle)
