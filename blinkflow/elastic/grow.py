"""Gaining ranks: new processes join a running elastic job.

``blinkrun``'s host discovery appends spawn requests to the job's hosts file
(``BLINKFLOW_ELASTIC_HOSTS_FILE``; see ``launcher/elastic_driver.py``): a host, and for each new
rank the argv of its wrapper. The ranks act on them in three steps:

1. :func:`new_ranks_requested` (``State.check_host_updates()``, collective): the lowest rank
   reads the file and broadcasts the requests not acted on yet, so every rank gets the same
   answer at the same step (Horovod raises ``HostsUpdatedInterrupt`` on every rank then).
2. :func:`add_new_ranks` (the reset of ``blinkflow.elastic.run``, collective): the job's
   ranks start the new ones together with ``MPI_Comm_spawn_multiple`` under the ``mpirun`` that
   started the job, merge the intercommunicator into one communicator (old ranks first, in their
   order: ``Intercomm_merge(high=False)``), and start the runtime again on it
   (:func:`blinkflow.elastic.reform.reform_on`: fresh trees for the larger set).
3. :func:`join_running_job` (``blinkflow.init()`` in a new rank, which ``BLINKFLOW_ELASTIC_JOINING``
   tells it is one): merges with its parents (``high=True``) and starts the runtime with them.

Why spawn and not ``MPI_Open_port``/``Comm_accept``/``Comm_connect``: under Open MPI 5 a
process that the job's ``mpirun`` did not start cannot connect to it (``MPI_ERR_INTERN``: the
two are not in one PMIx universe without a separate PRRTE DVM), while ``Comm_spawn`` under
``mpirun --with-ft ulfm`` starts the ranks through the job's own launcher, also after ranks were
lost and the job shrank, and places them with the ``host``/``add-host`` info keys. Spawned ranks
do not inherit ``mpirun -x`` variables, so the request carries the environment
(``PMIX_ENVAR`` info key).
"""
from __future__ import annotations

import json
from typing import List, Optional

from ..config import Config, get_config
from ..errors import ConfigError, NotInitializedError
from ..runtime.global_state import RUNTIME
from ..runtime.log import logger

HOST_UPDATES_NAME = "blinkflow.elastic.host_updates"
_JOIN_TAG_NAME = "blinkflow.elastic.joined"

_applied = 0
"""The id of the last request this job acted on (the same on every rank; newcomers receive it)."""
_pending: List[dict] = []
"""Requests agreed by :func:`new_ranks_requested`, acted on by :func:`add_new_ranks`."""


def read_requests(path: Optional[str], after: int) -> List[dict]:
    """The requests of the hosts file at ``path`` with an id above ``after``, oldest first,
    each with the file's ``env`` and ``wdir``; [] without a file. A file that cannot be read
    as blinkrun writes it is said once in the log and counts as no request."""
    if not path:
        return []
    try:
        with open(path) as f:
            body = json.load(f)
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as e:
        logger.warning("elastic: cannot read the hosts file %s (%s); no ranks added", path, e)
        return []
    return [dict(r, env=body.get("env", {}), wdir=body.get("wdir")) for r in body.get("requests", ())
            if int(r.get("id", 0)) > after]


def new_ranks_requested() -> bool:
    """Whether blinkrun asked for new ranks since the job last grew; collective (the lowest
    rank reads the file, every rank gets its answer). ``State.check_host_updates()`` raises
    ``HostsUpdatedInterrupt`` on every rank when this is True."""
    global _pending
    from ..runtime.objects import broadcast_object

    config = get_config()
    job = _running_job()
    mine = read_requests(config.elastic_hosts_file, _applied) if job.rank == 0 else None
    requests = broadcast_object(mine, root_rank=0, name=HOST_UPDATES_NAME)
    if config.elastic_max_np:
        room = config.elastic_max_np - job.size
        requests = _within(requests, room)
    _pending = requests
    return bool(requests)


def _running_job():
    engine = RUNTIME.engine
    if engine is None or engine.job is None:
        raise NotInitializedError("checking for new ranks (State.check_host_updates)")
    return engine.job


def _within(requests: List[dict], room: int) -> List[dict]:
    """The requests cut to ``room`` new ranks (blinkrun keeps to ``--max-np`` too; this guards a
    job whose ranks were counted differently, e.g. after a loss it has not seen yet)."""
    kept = []
    for request in requests:
        procs = request["procs"][:max(0, room)]
        room -= len(procs)
        if procs:
            kept.append(dict(request, procs=procs))
    return kept


def add_new_ranks():
    """Spawn the requests :func:`new_ranks_requested` agreed on, merge them into the job and
    start the runtime on the larger set; collective over the job's ranks. Returns the
    :class:`~blinkflow.elastic.reform.Reset`, or None when nothing was pending or the spawn
    failed (said in the log; the job goes on with its ranks, and blinkrun blacklists the host
    when its ranks never start)."""
    global _applied, _pending
    from mpi4py import MPI

    from .reform import reform_on

    requests, _pending = _pending, []
    if not requests:
        return None
    engine = RUNTIME.engine
    members = _members(engine)
    commands, argvs, counts, infos = _spawn_arguments(requests, members.Get_rank() == 0)
    _applied = max(int(r["id"]) for r in requests)
    try:
        inter = members.Spawn_multiple(commands, argvs, counts, infos, root=0)
    except MPI.Exception as e:
        logger.warning("elastic: starting %d new rank(s) failed (%s); going on with %d ranks",
                       sum(counts), e.Get_error_string(), members.Get_size())
        return None
    finally:
        for info in infos:
            info.Free()
    merged = inter.Merge(high=False)
    inter.Free()
    merged.bcast(_applied, root=0)   # the newcomers learn which requests the job acted on
    return reform_on(merged)


def join_running_job():
    """In a rank an elastic job spawned (``BLINKFLOW_ELASTIC_JOINING=1``): merge with the job and
    start the runtime with it; collective with the job's :func:`add_new_ranks`."""
    global _applied
    from mpi4py import MPI

    from .reform import reform_on

    parent = MPI.Comm.Get_parent()
    if parent == MPI.COMM_NULL:
        raise ConfigError(f"{Config.env_name('elastic_joining')}=1, but no running job started this process "
                          "(MPI_Comm_get_parent is null); unset it: only ranks an elastic job spawns join one")
    merged = parent.Merge(high=True)
    parent.Free()
    _applied = merged.bcast(None, root=0)
    return reform_on(merged)


def _members(engine):
    """The communicator of the job's processes that the runtime was started on (it runs on a
    private duplicate, so this one is free for the spawn)."""
    from mpi4py import MPI

    comm = getattr(engine, "_user_comm", None) if engine is not None else None
    return comm if comm is not None else MPI.COMM_WORLD


def _spawn_arguments(requests: List[dict], root: bool):
    """``Spawn_multiple``'s per-process commands, argvs, counts and infos (only the root's
    are read; the others pass placeholders of the same length)."""
    from mpi4py import MPI

    commands, argvs, counts, infos = [], [], [], []
    for request in requests:
        env = dict(request.get("env") or {}, **{Config.env_name("elastic_joining"): "1"})
        for proc in request["procs"]:
            argv = [str(a) for a in proc["argv"]]
            commands.append(argv[0])
            argvs.append(argv[1:])
            counts.append(1)
            info = MPI.Info.Create()
            if root:
                info.Set(request.get("info_key") or "host", str(request["host"]))
                if request.get("wdir"):
                    info.Set("wdir", str(request["wdir"]))
                info.Set("PMIX_ENVAR", "\n".join(f"{k}={v}" for k, v in env.items() if "\n" not in f"{k}{v}"))
            infos.append(info)
    return commands, argvs, counts, infos


__all__ = ["add_new_ranks", "join_running_job", "new_ranks_requested", "read_requests"]
