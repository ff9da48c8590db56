"""Gaining ranks: new processes join a running elastic job.

``blinkrun``'s host discovery appends spawn requests to the job's hosts file
(``BLINKFLOW_ELASTIC_HOSTS_FILE``; see ``launcher/elastic/driver.py``): a host, and for each new
rank the argv of its wrapper. The ranks act on them in three steps:

1. :func:`watch_hosts_file`: a thread on the job's rank 0 reads the file when it changes and, for
   requests the job has not acted on, tells the elastic states that hosts were added
   (:func:`blinkflow.elastic.hosts.notify_hosts_updated`, the request id as timestamp); at the
   next ``commit()`` / ``check_host_updates()`` every rank raises ``HostsUpdatedInterrupt``.
2. :func:`reset` (the reset of ``blinkflow.elastic.run``, collective): rank 0 reads the requests
   again and tells the others over the job's communicator; the ranks start the new ones together
   with ``MPI_Comm_spawn_multiple`` under the ``mpirun`` that started the job, merge the
   intercommunicator into one communicator (old ranks first, in their order:
   ``Intercomm_merge(high=False)``), and start the runtime again on it
   (:func:`blinkflow.elastic.reform.reform_on`: fresh trees for the larger set). Without
   requests, or after a loss, it is :func:`blinkflow.elastic.reform.reform`. A new rank that
   does not call ``init()`` within ``BLINKFLOW_ELASTIC_JOIN_TIMEOUT_SECONDS`` ends the job with
   InitError naming it (:func:`_spawn_within`).
3. :func:`join_running_job` (``blinkflow.init()`` in a new rank, which ``BLINKFLOW_ELASTIC_JOINING``
   tells it is one): merges with its parents (``high=True``) and starts the runtime with them.

Why spawn and not ``MPI_Open_port``/``Comm_accept``/``Comm_connect``: under Open MPI 5 a
process that the job's ``mpirun`` did not start cannot connect to it (``MPI_ERR_INTERN``: the
two are not in one PMIx universe without a separate PRRTE DVM), while ``Comm_spawn`` under
``mpirun --with-ft ulfm`` starts the ranks through the job's own launcher, also after ranks were
lost and the job shrank, and places them with the ``host``/``add-host`` info keys. Spawned ranks
do not inherit ``mpirun -x`` variables, and their values must not travel on a command line
(readable by every user of the host) nor in the hosts file: the spawn's info sets
``BLINKFLOW_ELASTIC_JOINING=1`` in their environment (Open MPI's ``PMIX_ENVAR`` key: one value
of at most ``MPI_MAX_INFO_VAL``, 256 characters, too few for a whole environment), and the job's
rank 0 sends each new rank the variables blinkrun forwards (the hosts file names them, as
``mpirun -x NAME`` does) over the spawn's intercommunicator, before the merge. A new rank
(:func:`join_running_job`) sets those its own environment lacks (its host's Open MPI daemon
gave it the others: on blinkrun's host, all of them) and reads its settings again. Variables a
process reads only when it starts (``LD_LIBRARY_PATH``, ``PYTHONPATH``) therefore come from
the new rank's host.
"""
from __future__ import annotations

import json
import os
import threading
import time
from typing import List, Optional

from ..config import Config, get_config
from ..errors import ConfigError, InitError
from ..runtime.global_state import RUNTIME
from ..runtime.log import logger

#: How often rank 0 looks at the hosts file (a ``stat``; it reads the file only when blinkrun
#: replaced it): the job hears of a request at most this much after blinkrun wrote it.
WATCH_INTERVAL_S = 0.05
#: How often rank 0 tells the states of a request again while the job has not acted on it.
RETELL_INTERVAL_S = 0.25
#: The tag of rank 0's message of forwarded variables to each new rank (on the spawn's
#: intercommunicator, where no other point-to-point message travels).
ENVIRONMENT_TAG = 38

_applied = 0
"""The id of the last request this job acted on (the same on every rank; newcomers receive it)."""
_watcher: Optional[threading.Thread] = None
_watch_lock = threading.Lock()


def read_requests(path: Optional[str], after: int) -> List[dict]:
    """The requests of the hosts file at ``path`` with an id above ``after``, oldest first,
    each with the file's ``wdir``; [] without a file. A file that cannot be read
    as blinkrun writes it is said in the log and counts as no request."""
    if not path:
        return []
    try:
        with open(path) as f:
            body = json.load(f)
        return [dict(r, wdir=body.get("wdir"), forward=list(body.get("forward", ()))) for r in body.get("requests", ())
                if int(r["id"]) > after]
    except FileNotFoundError:
        return []
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        logger.warning("elastic: cannot read the hosts file %s (%s: %s); no ranks added", path, type(e).__name__, e)
        return []


def watch_hosts_file() -> None:
    """Start, once per process, the thread that tells the elastic states of new requests (it
    reads the file only while this process is rank 0 of the job). Nothing without a hosts file
    (a job not started by ``blinkrun`` with elastic flags)."""
    global _watcher
    path = get_config().elastic_hosts_file
    with _watch_lock:
        if not path or _watcher is not None:
            return
        _watcher = threading.Thread(target=_watch, args=(path,), name="blinkflow-elastic-hosts", daemon=True)
        _watcher.start()


def _watch(path: str) -> None:
    from . import hosts

    # Told again until acted on (RETELL_INTERVAL_S): a reset clears the news the states hold, and a
    # request that came during one must not be lost (the same timestamp twice is one change).
    stop = threading.Event()
    seen, newest, told, told_at = None, 0, 0, 0.0
    while not stop.wait(WATCH_INTERVAL_S):
        engine = RUNTIME.engine
        if engine is None or engine.job is None or engine.job.rank != 0:
            continue
        version = _file_version(path)
        if version != seen:
            seen = version
            newest = max((int(r["id"]) for r in read_requests(path, 0)), default=0)
        now = time.monotonic()
        if newest > _applied and (newest != told or now - told_at >= RETELL_INTERVAL_S):
            hosts.notify_hosts_updated(float(newest), hosts.HostUpdateResult.added)
            told, told_at = newest, now


def _file_version(path: str):
    """What changes whenever blinkrun replaces the hosts file (a rename: a new inode); None
    while there is none."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


def reset():
    """``blinkflow.elastic.run``'s reset: spawn the ranks blinkrun asked for and start the
    runtime on the larger set; after a loss (or with nothing asked for), re-form on the ranks
    there are (:func:`~blinkflow.elastic.reform.reform`). Collective over the job's ranks.
    Returns the :class:`~blinkflow.elastic.reform.Reset`, or None when nothing changed (the
    request was acted on already, or its spawn failed: said in the log, and blinkrun blacklists
    the host when its ranks never start)."""
    global _applied
    from mpi4py import MPI

    from .reform import members, reform, reform_on

    engine = RUNTIME.engine
    if engine is None or engine.job is None or engine.peer_failed or engine.broken or not engine.alive:
        return reform()
    comm = members(engine)
    mine = read_requests(get_config().elastic_hosts_file, _applied) if comm.Get_rank() == 0 else None
    requests = _within(comm.bcast(mine, root=0), comm.Get_size())
    if not requests:
        return None
    _applied = max(int(r["id"]) for r in requests)
    commands, argvs, counts, infos = _spawn_arguments(requests, comm.Get_rank() == 0)
    try:
        inter = _spawn_within(comm, commands, argvs, counts, infos, requests)
    except MPI.Exception as e:
        logger.warning("elastic: starting %d new rank(s) failed (%s); going on with %d ranks",
                       sum(counts), e.Get_error_string(), comm.Get_size())
        return None
    finally:
        for info in infos:
            info.Free()
    sends = _send_environment(inter, requests) if comm.Get_rank() == 0 else []
    merged = inter.Merge(high=False)
    MPI.Request.Waitall(sends)
    inter.Free()
    merged.bcast(_applied, root=0)   # the newcomers learn which requests the job acted on
    return reform_on(merged)


def _spawn_within(comm, commands, argvs, counts, infos, requests):
    """``MPI_Comm_spawn_multiple``, which returns once every new rank has started MPI (its
    ``init()``), waited for at most ``BLINKFLOW_ELASTIC_JOIN_TIMEOUT_SECONDS``. MPI cannot take
    back a spawn that is under way, nor can these ranks take part in any other reset while it is,
    so past the timeout the job ends: InitError on every rank, naming the new ranks (blinkrun's
    slots) and their hosts, and this process leaves without ``MPI_Finalize`` (it would wait for
    the spawn), which ends the job and the new ranks with it."""
    done: dict = {}

    def spawn() -> None:
        try:
            done["inter"] = comm.Spawn_multiple(commands, argvs, counts, infos, root=0)
        except BaseException as e:  # noqa: BLE001 - raised in the calling thread
            done["error"] = e

    thread = threading.Thread(target=spawn, name="blinkflow-elastic-spawn", daemon=True)
    thread.start()
    timeout = get_config().elastic_join_timeout_seconds
    thread.join(timeout)
    if thread.is_alive():
        slots = [int(p["slot"]) for r in requests for p in r["procs"] if "slot" in p]
        hosts = sorted({str(r["host"]) for r in requests})
        count = sum(counts)
        many = count > 1
        error = InitError(
            f"blinkflow elastic: {count} new rank{'s' if many else ''} (blinkrun slot{'s' if len(slots) > 1 else ''} "
            f"{', '.join(map(str, slots))} on {', '.join(hosts)}) did not call init() within {timeout:g} s "
            f"({Config.env_name('elastic_join_timeout_seconds')}, blinkrun --elastic-timeout); the ranks starting "
            f"{'them' if many else 'it'} wait inside MPI_Comm_spawn until {'they do' if many else 'it does'}, "
            "so the job ends. Find what holds the new rank's script before hvd.init(), or raise the timeout",
            ranks=slots)
        RUNTIME.remember_broken(None, error)  # leave at exit without MPI_Finalize: the spawn never ends
        raise error
    if "error" in done:
        raise done["error"]
    return done["inter"]


def _send_environment(inter, requests: List[dict]) -> list:
    """Rank 0: the forwarded variables (names from blinkrun's hosts file, values from this
    process's environment, which ``mpirun -x`` gave it) to every new rank, without waiting."""
    names = sorted({name for request in requests for name in request.get("forward", ())})
    environment = {name: os.environ[name] for name in names if name in os.environ}
    return [inter.isend(environment, dest=rank, tag=ENVIRONMENT_TAG) for rank in range(inter.Get_remote_size())]


def _adopt_environment(environment: dict) -> None:
    """A new rank: set the forwarded variables its environment lacks, then read the settings again."""
    from ..config import forget_config

    for name, value in environment.items():
        os.environ.setdefault(name, value)
    forget_config()


def join_running_job():
    """In a rank an elastic job spawned (``BLINKFLOW_ELASTIC_JOINING=1``): merge with the job and
    start the runtime with it; collective with the job's :func:`reset`."""
    global _applied
    from ..config import apply_mpi_defaults

    apply_mpi_defaults()   # before MPI starts in this process (importing mpi4py.MPI starts it)
    from mpi4py import MPI

    from .reform import reform_on

    parent = MPI.Comm.Get_parent()
    if parent == MPI.COMM_NULL:
        raise ConfigError(f"{Config.env_name('elastic_joining')}=1, but no running job started this process "
                          "(MPI_Comm_get_parent is null); unset it: only ranks an elastic job spawns join one")
    _adopt_environment(parent.recv(source=0, tag=ENVIRONMENT_TAG))
    merged = parent.Merge(high=True)
    parent.Free()
    _applied = merged.bcast(None, root=0)
    return reform_on(merged)


def _within(requests: List[dict], size: int) -> List[dict]:
    """The requests cut to ``BLINKFLOW_ELASTIC_MAX_NP`` (blinkrun keeps to ``--max-np`` too;
    this guards a job whose ranks blinkrun counted differently)."""
    most = get_config().elastic_max_np
    if not most:
        return requests
    room, kept = most - size, []
    for request in requests:
        procs = request["procs"][:max(0, room)]
        room -= len(procs)
        if procs:
            kept.append(dict(request, procs=procs))
    return kept


def _spawn_arguments(requests: List[dict], root: bool):
    """``Spawn_multiple``'s per-process commands, argvs, counts and infos (only the root's
    are read; the others pass placeholders of the same length)."""
    from mpi4py import MPI

    commands, argvs, counts, infos = [], [], [], []
    for request in requests:
        for proc in request["procs"]:
            argv = [str(a) for a in proc["argv"]]
            commands.append(argv[0])
            argvs.append(argv[1:])
            counts.append(1)
            info = MPI.Info.Create()
            if root:
                info.Set(request.get("info_key") or "host", str(request["host"]))
                info.Set("PMIX_ENVAR", f"{Config.env_name('elastic_joining')}=1")
                if request.get("wdir"):
                    info.Set("wdir", str(request["wdir"]))
            infos.append(info)
    return commands, argvs, counts, infos


__all__ = ["join_running_job", "read_requests", "reset", "watch_hosts_file"]
