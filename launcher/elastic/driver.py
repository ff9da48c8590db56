"""blinkrun's side of an elastic job: where ranks are, which slots are free, and the spawn
requests the ranks act on.

Every rank process has a **slot**: an id blinkrun gives it (ranks started by mpirun have their
first rank as id; each new one the next unused id), the host it runs on, and a state (pending:
asked for, not started yet; running; done: ended with status 0; lost: failed). The driver learns
of starts and ends from the wrappers' events (:mod:`..ranks.events`, the ``rank`` field is the slot id).

Once a second it runs the host discovery script (:mod:`.discovery`), and when the hosts
available (discovered, not blacklisted; a host whose blacklist cooldown ends is available from
that moment) have slots no pending or running rank holds, and the job
has fewer than ``--max-np`` ranks, it appends a **request** to the job's hosts file: the host,
and for each new slot the exact argv of its rank wrapper. The file is rewritten whole (a rename),
so a reader sees one version or the next. The lowest rank reads it at ``check_host_updates()``
and every rank spawns the requests it has not acted on (:mod:`blinkflow.elastic.grow`). The ranks
keep which request they acted on last, so the file is a log that only grows.

The survivors of a reset also name the ranks they went on without (an ``events.LOST`` event from
the new rank 0): a host that went silent sends nothing else, and its slots would stay running.

A rank that fails blacklists its host (Horovod's rule; see :class:`.discovery.HostBook`),
and so does a slot requested but not started within ``--elastic-timeout``. A rank that ended
with status 0 frees nothing: the job is finishing, and a rank spawned now would join no one.
"""
from __future__ import annotations

import dataclasses
import json
import os
import signal
import threading
import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from ..ranks import events
from .discovery import DiscoveryError, HostBook, run_discovery_script
from .spec import ElasticSpec

POLL_INTERVAL_S = 1.0
HOSTS_FILE_SCHEMA = 1
PENDING, RUNNING, DONE, LOST = "pending", "running", "done", "lost"


@dataclasses.dataclass
class Slot:
    host: str
    state: str
    since: float
    spawned: bool = False
    """Started by the ranks (MPI_Comm_spawn), not by mpirun at the job's start."""
    mpi: bool = False
    """Its rank began MPI's initialisation (the wrapper's ``mpi`` event)."""


def initial_slots(np: int, hosts: Sequence[Tuple[str, int]], now: float) -> Dict[int, Slot]:
    """Where mpirun's ``--map-by slot`` puts ranks 0..np-1: each host's slots in turn; ranks
    beyond every slot (an oversubscribed start) count on the last host."""
    slots: Dict[int, Slot] = {}
    places = [name for name, count in hosts for _ in range(count)] or ["localhost"]
    for rank in range(np):
        slots[rank] = Slot(places[min(rank, len(places) - 1)], RUNNING, now)
    return slots


class ElasticDriver:
    """Publishes spawn requests for free slots and books the ranks' starts and ends.

    ``slot_argv(slot)`` is the argv of a new rank's wrapper (no variable's value: those travel
    from the job's rank 0 to the new ranks over MPI, see ``blinkflow/elastic/grow.py``);
    ``forward`` the names of the variables a new rank gets so, written in the hosts file for
    rank 0 (names only, as ``mpirun -x NAME`` takes them); ``wdir`` its working folder; ``say`` prints one line
    on blinkrun's stderr; ``discover`` returns the hosts of one discovery run (raising
    DiscoveryError), None for a job without a discovery script.
    """

    def __init__(self, spec: ElasticSpec, hosts_file: str, hosts: Sequence[Tuple[str, int]], np: int,
                 slot_argv: Callable[[int], List[str]], wdir: str,
                 say: Callable[[str], None], discover: Optional[Callable[[], Dict[str, int]]] = None,
                 clock: Callable[[], float] = time.time, forward: Sequence[str] = ()):
        self.spec, self.hosts_file, self.slot_argv = spec, hosts_file, slot_argv
        self.forward = sorted(forward)
        self.wdir, self.say, self.clock = wdir, say, clock
        self.discover = discover
        self.book = HostBook(spec.blacklist_cooldown_range)
        self.book.update(dict(hosts))
        self.allocated = {name for name, _ in hosts}   # hosts mpirun knows of (a new one needs add-host)
        self.slots = initial_slots(np, hosts, clock())
        self.requests: List[dict] = []
        self._said_discovery: Optional[str] = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self.write()

    @classmethod
    def for_script(cls, spec: ElasticSpec, **kw) -> "ElasticDriver":
        script, slots = spec.host_discovery_script, spec.slots_per_host
        return cls(spec, discover=(lambda: run_discovery_script(script, slots)) if script else None, **kw)

    # -- the loop ----------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="blinkrun-elastic", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)

    def _loop(self) -> None:
        """Discovery once a second (Horovod's frequency); in between, a host whose blacklist
        cooldown ends is offered again at that moment, with the slots of the last discovery,
        rather than at the next discovery."""
        next_discovery = self.clock() + POLL_INTERVAL_S
        while True:
            with self._lock:
                release = self.book.next_release(self.clock())
            wake = next_discovery if release is None else min(next_discovery, release)
            if self._stop.wait(max(0.0, wake - self.clock())):
                return
            if self.clock() >= next_discovery:
                self.poll()
                next_discovery = self.clock() + POLL_INTERVAL_S
            else:
                self.publish()

    def poll(self) -> None:
        """One round: discover, then :meth:`publish`."""
        if self.discover is not None:
            try:
                found = self.discover()
            except DiscoveryError as e:
                if str(e) != self._said_discovery:   # one line per new failure, not one a second
                    self._said_discovery = str(e)
                    self.say(f"{e}; keeping the hosts of its last good run")
            else:
                self._said_discovery = None
                with self._lock:
                    self.book.update(found)
        self.publish()

    def publish(self) -> None:
        """Expire late slots, publish requests for free slots."""
        with self._lock:
            self._expire_pending()
            if self._plan_requests():
                self.write()

    # -- what the ranks report ---------------------------------------------------------------
    def on_event(self, event: dict) -> bool:
        """Book one event of a rank's wrapper; True when the job must be stopped: a new rank
        ended before it began MPI's initialisation, and the ranks spawning it would wait for it
        forever inside ``MPI_Comm_spawn``."""
        kind, slot_id = event.get("event"), event.get("rank")
        if kind == events.LOST:
            self._lost_by_peers(event.get("ranks"))
            return False
        if not isinstance(slot_id, int):
            return False
        with self._lock:
            slot = self.slots.get(slot_id)
            if slot is None:
                return False
            now = self.clock()
            if kind == events.STARTED and slot.state == PENDING:
                slot.state, slot.since = RUNNING, now
            elif kind == events.MPI_STARTING:
                slot.mpi = True
            elif kind == events.FAILED or (kind == events.EXITED and event.get("status")):
                if slot.state != LOST:
                    slot.state, slot.since = LOST, now
                    self.book.blacklist(slot.host, now)
                    how = _how_it_ended(event)
                    if slot.spawned and not slot.mpi:
                        self.say(f"new rank {slot_id} (host {slot.host}) {how} before it began MPI's start-up; "
                                 "the ranks starting it cannot go on (MPI_Comm_spawn waits for it): stopping the job")
                        return True
                    if event.get("declared_dead"):
                        how = (f"no heartbeat from it reached the other ranks in time; Open MPI's failure detector "
                               f"declared it dead and ended it ({how}) once it ran again")
                    self.say(f"rank {slot_id} (host {slot.host}) lost: {how}; host blacklisted")
            elif kind == events.EXITED and slot.state != LOST:
                slot.state, slot.since = DONE, now
            if kind in (events.FAILED, events.EXITED):
                return self._orphans_spawning()
        return False

    def _lost_by_peers(self, ranks) -> None:
        """The survivors went on without ``ranks``: the ones not already known lost (their
        wrapper said so) went with their host, wrapper and all, and will never report."""
        if not isinstance(ranks, list):
            return
        with self._lock:
            now = self.clock()
            for slot_id in ranks:
                slot = self.slots.get(slot_id) if isinstance(slot_id, int) else None
                if slot is None or slot.state not in (PENDING, RUNNING):
                    continue
                slot.state, slot.since = LOST, now
                self.book.blacklist(slot.host, now)
                self.say(f"rank {slot_id} (host {slot.host}) lost: no heartbeat from it reached the other ranks, "
                         "which went on without it; host blacklisted")

    def _orphans_spawning(self) -> bool:
        """Whether new ranks that have not begun MPI are all that runs: the ranks starting them
        are gone (their spawn timed out: ``BLINKFLOW_ELASTIC_JOIN_TIMEOUT_SECONDS``), and nothing
        else would ever end them. Says so; the job must be stopped."""
        waiting = [i for i, s in self.slots.items() if s.state == RUNNING and s.spawned and not s.mpi]
        if not waiting or any(s.state == RUNNING and not (s.spawned and not s.mpi) for s in self.slots.values()):
            return False
        self.say(f"new rank{'s' if len(waiting) > 1 else ''} {', '.join(map(str, waiting))} did not begin MPI's "
                 "start-up and no rank of the job is left to start it: stopping the job")
        return True

    # -- bookkeeping -------------------------------------------------------------------------
    def finished(self) -> bool:
        """Whether the job ended well: no rank pending or running, and the last to end ended
        with status 0 (ranks lost before them were an elastic job's ordinary losses)."""
        with self._lock:
            if self.active() or not self.slots:
                return False
            last = max(self.slots.values(), key=lambda s: s.since)
            return last.state == DONE

    def active(self) -> int:
        return sum(1 for s in self.slots.values() if s.state in (PENDING, RUNNING))

    def _expire_pending(self) -> None:
        now = self.clock()
        for slot_id, slot in self.slots.items():
            if slot.state == PENDING and now - slot.since > self.spec.elastic_timeout:
                slot.state, slot.since = LOST, now
                self.book.blacklist(slot.host, now)
                self.say(f"new rank (slot {slot_id}) on host {slot.host} did not start within "
                         f"{self.spec.elastic_timeout} s (--elastic-timeout); host blacklisted")

    def _plan_requests(self) -> bool:
        """Appends a request per host with free slots, up to ``--max-np``; whether any was added."""
        if any(s.state == DONE for s in self.slots.values()):
            return False    # the job is finishing
        now = self.clock()
        room = None if self.spec.max_np is None else self.spec.max_np - self.active()
        added = False
        for host, count in self.book.available(now):
            used = sum(1 for s in self.slots.values() if s.host == host and s.state in (PENDING, RUNNING))
            free = count - used
            if room is not None:
                free = min(free, room)
            if free <= 0:
                continue
            ids = list(range(max(self.slots) + 1, max(self.slots) + 1 + free))
            for slot_id in ids:
                self.slots[slot_id] = Slot(host, PENDING, now, spawned=True)
            self.requests.append({"id": len(self.requests) + 1, "host": host,
                                  "info_key": "host" if host in self.allocated else "add-host",
                                  "procs": [{"slot": i, "argv": self.slot_argv(i)} for i in ids]})
            self.allocated.add(host)
            added = True
            if room is not None:
                room -= free
        return added

    def write(self) -> None:
        """The hosts file, replaced whole."""
        body = {"schema": HOSTS_FILE_SCHEMA, "wdir": self.wdir, "forward": self.forward, "requests": self.requests}
        temporary = f"{self.hosts_file}.{os.getpid()}.tmp"
        with open(temporary, "w") as f:
            json.dump(body, f)
        os.replace(temporary, self.hosts_file)


def _how_it_ended(event: dict) -> str:
    status = event.get("status")
    name = event.get("signal")
    if not name and isinstance(status, int) and 128 < status < 128 + 65:
        try:
            name = signal.Signals(status - 128).name
        except ValueError:
            name = None
    return f"killed by {name}" if name else f"exited with status {status}"


__all__ = ["ElasticDriver", "Slot", "initial_slots", "POLL_INTERVAL_S"]
