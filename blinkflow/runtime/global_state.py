"""This process's runtime as one object: the running engine, whether MPI can still be trusted,
and the counters of automatic names (Horovod keeps the same in its ``horovod_global`` state).

Every public call reads :data:`RUNTIME`; ``init`` and ``shutdown`` (:mod:`.lifecycle`) are the
only writers of its engine.
"""
from __future__ import annotations

import itertools
import threading
from typing import TYPE_CHECKING, Callable, Dict, List, Optional

from ..errors import NotInitializedError, ShutdownError
from .handles import HandleTable

if TYPE_CHECKING:
    from .background import Engine


class Runtime:
    """The engine ``init`` started (None before ``init`` and after ``shutdown``), the failure that
    made MPI untrustworthy, and the automatic-name counters."""

    def __init__(self):
        self.lock = threading.Lock()
        """Held while ``init`` or ``shutdown`` replaces the engine."""
        self.engine: Optional[Engine] = None
        self.broken_by: Optional[BaseException] = None
        """Set when an engine stopped after a peer died or its own loop broke, or init failed with
        ranks left inside a collective: MPI on the world communicator cannot be trusted any more
        (MPI_Finalize, or a new init on it, would wait forever)."""
        self.ranks_lost = False
        """Set once an elastic reset went on without ranks that are gone: MPI_Finalize may then
        wait for them (see ``lifecycle._exit_hook``)."""
        self.broken_engine: Optional[Engine] = None
        """The engine that ``broken_by`` stopped (the exit hook tells its peers why this rank leaves)."""
        self.handles = HandleTable()
        """Every handle this process's calls returned and nobody synchronized yet, of this
        engine and the ones before it: a call that completed stays readable after
        ``shutdown()`` (its result is the user's, not the engine's)."""
        self._names: Dict[tuple, "itertools.count"] = {}
        """Automatic names per (process set id, op): a set's members draw theirs together."""
        self.name_guards: List[Callable[[str], None]] = []
        """Checks every automatic name is drawn past (a binding's: blinkflow.tensorflow raises where
        a name drawn now could not agree across ranks, while a tf.function is traced)."""

    def running(self, what: str) -> "Engine":
        """The running engine, or NotInitializedError naming ``what`` the user called."""
        engine = self.engine
        if engine is None:
            raise NotInitializedError(what)
        return engine

    def auto_name(self, op: str, set_id: int = 0) -> str:
        """The next automatic name of ``op`` (``<op>.noname.<n>``) in process set ``set_id`` (each
        set's members count their own calls, Horovod's rule), so ranks must issue unnamed calls
        in the same order. A registered guard may refuse the call first (:attr:`name_guards`)."""
        for guard in self.name_guards:
            guard(op)
        counter = self._names.get((set_id, op))
        if counter is None:
            counter = self._names[(set_id, op)] = itertools.count()
        return f"{op}.noname.{next(counter)}"

    def forget_names(self, set_id: Optional[int] = None) -> None:
        """Start the automatic names afresh: of every set (a new engine, or after ``join``, when
        ranks made different numbers of unnamed calls), or of ``set_id`` (a removed set: a later
        set under its id counts from zero)."""
        for key in [k for k in self._names if set_id is None or k[0] == set_id]:
            del self._names[key]

    def remember_broken(self, engine: "Engine", error: BaseException) -> None:
        if self.broken_by is None:
            self.broken_by, self.broken_engine = error, engine

    def remember_if_broken(self, engine: "Engine") -> None:
        if engine.peer_failed or engine.broken:
            self.remember_broken(engine, engine.state.failure or ShutdownError("a peer rank failed"))


RUNTIME = Runtime()
"""The one runtime of this process."""
