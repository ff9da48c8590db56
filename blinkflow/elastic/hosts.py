"""News of hosts added or removed, as Horovod's elastic driver sends it to the workers.

The process that learns of a change (host discovery, in the launcher's elastic mode) calls
:func:`notify_hosts_updated`; every :class:`~.state.State` registered while
``blinkflow.elastic.run`` runs receives it and raises
:class:`~blinkflow.errors.HostsUpdatedInterrupt` at its next ``commit()`` /
``check_host_updates()``, on every rank at the same step.
"""
from __future__ import annotations

import enum
import threading
from typing import List


class HostUpdateResult(enum.IntFlag):
    """What changed (Horovod's ``HostUpdateResult``): hosts removed, added, or both."""

    no_update = 0
    removed = 1
    added = 2
    mixed = removed | added


_lock = threading.Lock()
_listeners: List[object] = []


def register_listener(state) -> None:
    with _lock:
        if state not in _listeners:
            _listeners.append(state)


def remove_listener(state) -> None:
    with _lock:
        if state in _listeners:
            _listeners.remove(state)


def notify_hosts_updated(timestamp: float, update: HostUpdateResult) -> None:
    """Tell every registered state that the hosts changed at ``timestamp`` (any clock that only
    grows, the same for every rank's news: ranks compare the newest timestamps they heard)."""
    with _lock:
        listeners = list(_listeners)
    for state in listeners:
        state.on_hosts_updated(timestamp, update)
