"""Horovod's ``run`` decorator: run the training function, and after a reset run it again.

The loop of :func:`run_fn`, on every rank:

1. ``state.sync()`` (unless the last reset only lost ranks after a commit every rank made:
   ``HostsUpdatedInterrupt(skip_sync=True)``), then the training function;
2. the training function raised :class:`~blinkflow.errors.EpochResumedInterrupt` (its ``fit``
   ran the batches an interrupted epoch had left, then stopped): back to 1 without a reset, a
   sync or a count against ``reset_limit``;
3. a collective raised because the job lost ranks (the runtime failed with
   :class:`~blinkflow.errors.ShutdownError`, Horovod's ``HorovodInternalError``, whatever class
   the framework wrapped it in): ``state.restore()`` rolls back to the last commit;
   :class:`~blinkflow.errors.HostsUpdatedInterrupt`: the state is current;
4. the reset (:func:`blinkflow.elastic.grow.reset`: new ranks in, or
   :func:`blinkflow.elastic.reform` on the ranks left), ``state.on_reset()`` (the reset callbacks), back
   to 1.

Any other error, and TooFewRanksError from the reset, ends the loop. ``reset_limit``
(None: unbounded) bounds the resets.
"""
from __future__ import annotations

import functools
from typing import Callable, Optional

from ..config import get_config
from ..errors import EpochResumedInterrupt, HostsUpdatedInterrupt, ShutdownError
from ..runtime.global_state import RUNTIME
from . import grow, hosts


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


def run_fn(func: Callable, reset: Callable[[], object] = grow.reset, reset_limit: Optional[int] = None) -> Callable:
    """``func(state, *args, **kwargs)`` retried after each reset (the module docstring). The
    default reset adds the ranks blinkrun's host discovery asked for, else re-forms on the ranks
    there are; ``reset_limit`` defaults to ``BLINKFLOW_ELASTIC_RESET_LIMIT`` (``--reset-limit``)."""

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        nonlocal reset_limit
        if reset_limit is None:
            reset_limit = get_config().elastic_reset_limit or None
        hosts.register_listener(state)
        grow.watch_hosts_file()
        skip_sync = False
        resets = 0
        try:
            while True:
                try:
                    if not skip_sync:
                        state.sync()
                    return func(state, *args, **kwargs)
                except EpochResumedInterrupt:
                    skip_sync = True   # every rank committed the same state at the epoch's end
                    continue
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
