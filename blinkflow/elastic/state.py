"""Horovod's elastic state: what a training function keeps in memory and rolls back to.

``commit()`` saves the state (in this process's memory, never on disk) and checks for host
changes; after a rank is lost every survivor ``restore()``-s its last commit, and once the job
re-formed ``sync()`` broadcasts the state from the new rank 0 (the lowest surviving rank), so
every rank resumes from the same state even when some had committed one step more than others.
Subclasses say what the state is: :class:`ObjectState` holds plain attributes; the TensorFlow
states (``blinkflow.tensorflow.elastic``) hold variables too.
"""
from __future__ import annotations

import queue
from typing import Any, Callable, Dict, List

from ..errors import HostsUpdatedInterrupt
from .hosts import HostUpdateResult


class State:
    """Horovod's ``State``: ``commit``, ``check_host_updates``, ``register_reset_callbacks``;
    subclasses implement ``save``, ``restore``, ``sync`` and ``reset``.

    ``bcast_object(obj)`` broadcasts a picklable object from rank 0; ``get_rank()`` is this
    process's rank (both default to blinkflow's)."""

    def __init__(self, bcast_object: Callable[[Any], Any] = None, get_rank: Callable[[], int] = None):
        if bcast_object is None:
            from ..runtime.objects import broadcast_object as bcast_object
        if get_rank is None:
            from ..runtime.api import rank as get_rank
        self._bcast_object = bcast_object
        self._rank = get_rank
        self._host_messages: "queue.Queue" = queue.Queue()
        self._last_updated_timestamp = 0.0
        self._reset_callbacks: List[Callable[[], None]] = []

    def register_reset_callbacks(self, callbacks: List[Callable[[], None]]) -> None:
        """Call each of ``callbacks`` (no arguments) after every reset, once the job re-formed and
        before the training function runs again: the place to rescale a learning rate by the new
        ``size()``."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self) -> None:
        self._host_messages = queue.Queue()
        self.reset()
        for callback in self._reset_callbacks:
            callback()

    def on_hosts_updated(self, timestamp: float, update: HostUpdateResult) -> None:
        self._host_messages.put((timestamp, update))

    def commit(self) -> None:
        """Save the state, then raise HostsUpdatedInterrupt on every rank if hosts changed."""
        self.save()
        self.check_host_updates()

    def check_host_updates(self) -> None:
        """Raise HostsUpdatedInterrupt (on every rank alike) when any rank heard of a host change
        newer than the last one acted on. Collective: rank 0's news is broadcast, so every rank
        decides the same at the same step."""
        previous = self._last_updated_timestamp
        update = HostUpdateResult.no_update
        while not self._host_messages.empty():
            timestamp, news = self._host_messages.get()
            if timestamp > self._last_updated_timestamp:
                self._last_updated_timestamp = timestamp
                update |= news
        previous, self._last_updated_timestamp, update = self._bcast_object(
            (previous, self._last_updated_timestamp, int(update)))
        if self._last_updated_timestamp > previous:
            # Only hosts removed: the survivors' states are equal already, no broadcast needed.
            raise HostsUpdatedInterrupt(skip_sync=HostUpdateResult(update) == HostUpdateResult.removed)

    def save(self) -> None:
        raise NotImplementedError(f"{type(self).__name__}.save: a State subclass says how it saves itself")

    def restore(self) -> None:
        raise NotImplementedError(f"{type(self).__name__}.restore: a State subclass says how it restores itself")

    def sync(self) -> None:
        raise NotImplementedError(f"{type(self).__name__}.sync: a State subclass says how it syncs itself")

    def reset(self) -> None:
        """After the job re-formed (before the reset callbacks); nothing by default."""


class ObjectState(State):
    """Horovod's ``ObjectState``: the keyword arguments become attributes (``state.epoch``),
    saved by ``commit()``, restored by ``restore()``, broadcast from rank 0 by ``sync()``; they
    must be picklable."""

    def __init__(self, bcast_object: Callable[[Any], Any] = None, get_rank: Callable[[], int] = None, **kwargs):
        self._saved_state: Dict[str, Any] = kwargs
        self._set_attrs()
        super().__init__(bcast_object=bcast_object, get_rank=get_rank)

    def save(self) -> None:
        self._saved_state = {attr: getattr(self, attr) for attr in self._saved_state}

    def restore(self) -> None:
        self._set_attrs()

    def sync(self) -> None:
        if self._saved_state:
            self._saved_state = self._bcast_object(self._saved_state)
            self._set_attrs()

    def _set_attrs(self) -> None:
        for attr, value in self._saved_state.items():
            setattr(self, attr, value)
