"""Horovod's ``run`` decorator: run the training function, and after a reset run it again.

The loop of :func:`run_fn`, on every rank:

1. ``state.sync()`` (unless the last reset only lost ranks after a commit every rank made:
   ``HostsUpdatedInterrupt(skip_sync=True)``), then the training function;
2. a collective raised because the job lost ranks (the runtime failed with
   :class:`~blinkflow.errors.ShutdownError`, Horovod's ``HorovodInternalError``, whatever class
   the framework wrapped it in): ``state.restore()`` rolls back to the last commit;
   :class:`~blinkflow.errors.HostsUpdatedInterrupt`: the state is current;
3. the reset (:func:`blinkflow.elastic.reform`), ``state.on_reset()`` (the reset callbacks), back
   to 1.

Any other error, and TooFewRanksError from the reset, ends the loop. ``reset_limit``
(None: unbounded) bounds the resets.
"""
from __future__ import annotations

import functools
from typing import Callable, Optional

from ..errors import HostsUpdatedInterrupt, ShutdownError
from ..runtime.global_state import RUNTIME
from . import hosts
from .reform import reform


def lost_ranks_failure(error: BaseException) -> Optional[ShutdownError]:
    """The runtime's failure when ``error`` is how a collective ended because the job broke (the
    runtime's own ShutdownError, or a framework's error wrapping it: TensorFlow reports it as
    ``tf.errors.AbortedError`` from inside a graph); None for the user's own errors. A
    ``shutdown()`` the user called is not a failure to recover from."""
    engine = RUNTIME.engine or RUNTIME.broken_engine
    if engine is None or engine.state is None or not (engine.peer_failed or engine.broken):
        return None
    failure = engine.state.failure
    return failure if isinstance(failure, ShutdownError) else None


def run_fn(func: Callable, reset: Callable[[], object] = reform, reset_limit: Optional[int] = None) -> Callable:
    """``func(state, *args, **kwargs)`` retried after each reset (the module docstring)."""

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        hosts.register_listener(state)
        skip_sync = False
        resets = 0
        try:
            while True:
                try:
                    if not skip_sync:
                        state.sync()
                    return func(state, *args, **kwargs)
                except HostsUpdatedInterrupt as interrupt:
                    skip_sync = interrupt.skip_sync
                except Exception as error:  # noqa: BLE001 - sorted below: only a broken job is retried
                    if lost_ranks_failure(error) is None:
                        raise
                    state.restore()
                    skip_sync = False
                resets += 1
                if reset_limit is not None and resets > reset_limit:
                    raise ShutdownError(f"blinkflow elastic: the job re-formed {reset_limit} times, the limit "
                                        "(blinkrun --reset-limit); it ends")
                reset()
                state.on_reset()
        finally:
            hosts.remove_listener(state)

    return wrapper
