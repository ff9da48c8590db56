"""Requests into a process set's queue, and handles out: what every public call ends in.

* :func:`call_name`: the name a call travels under (drawn before its arguments are checked);
* :func:`enqueue`: requests and their arrays onto a loop's queue (:meth:`.state.SharedState.queue`);
  returns an integer handle;
* :func:`enqueue_refusal`: a call this rank refuses, still sent under its name;
* :func:`poll` / :func:`synchronize`: a handle's state, and its result or error;
* :func:`wait`: a synchronous call's result from its unregistered handle (nobody else can hold
  it, so it never enters the handle table: no id, no lock, no ownership to give up).
"""
from __future__ import annotations

from typing import Any, Callable, List, Tuple

from ..errors import BlinkflowError, InvalidArgumentError, ShutdownError
from . import arguments
from .global_state import RUNTIME
from .handles import Handle
from .messages import Kind, Request, clipped


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
    return loop.state.handles.add(loop.state.queue(requests_arrays, finish, loop.timeline))


def enqueue_refusal(loop, kind: Kind, name: str, error: Exception) -> int:
    """Submit a call this rank refuses (bad arguments) under its name, carrying the reason: the
    coordinator answers every rank with one InvalidArgumentError naming this rank and reason,
    so no rank waits for it and the next collective pairs as it should."""
    return loop.state.handles.add(queue_refusal(loop, kind, name, error))


def queue_refusal(loop, kind: Kind, name: str, error: Exception) -> Handle:
    """:func:`enqueue_refusal`, returning the handle itself, not entered in the handle table."""
    reason = str(error) if isinstance(error, BlinkflowError) else f"{type(error).__name__}: {error}"
    request = Request(name, kind, "", (), rejected=clipped(reason or type(error).__name__))
    return loop.state.queue([(request, None)], _refusals_never_finish, loop.timeline)


def _refusals_never_finish(results):
    raise AssertionError("a refused call completed")  # its response is always an error


def first(results):
    """The result of a handle's only request."""
    return results[0]


def poll(handle: int) -> bool:
    """True when ``synchronize(handle)`` would not block."""
    return _known(handle, "poll").done()


def synchronize(handle: int):
    """Wait for ``handle`` and return its result (or raise its error); the handle is then spent.
    A call that completed before ``shutdown()`` still returns its result after it; one that did
    not raised ShutdownError there, and raises it here."""
    h = _known(handle, "synchronize")
    try:
        return wait(h)
    finally:
        RUNTIME.handles.pop(handle)


def wait(handle: Handle):
    """Wait for ``handle`` (a :class:`Handle`, not an id) and return its result or raise its error."""
    engine = RUNTIME.engine
    return handle.wait(engine.state.abort_check if engine is not None and engine.state is not None else _stopped)


def _known(handle, what: str) -> Handle:
    """The handle's entry; before ``init`` (nothing was ever submitted) NotInitializedError."""
    try:
        return RUNTIME.handles.get(handle, what)
    except InvalidArgumentError:
        raise
    except BlinkflowError:
        RUNTIME.running(f"blinkflow.{what}")  # not running: say so rather than "unknown handle"
        raise


def _stopped():
    """The abort check of a handle whose runtime has stopped (its calls all ended when it did)."""
    return ShutdownError("blinkflow was shut down before this call completed")
