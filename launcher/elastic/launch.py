"""What an elastic job changes in ``blinkrun``'s launch (``commands/run.py`` calls these few entries).

- :func:`with_elastic_start` / :func:`starting_hosts`: the first run of the discovery script
  decides where the job starts (it must succeed: Horovod's rule);
- :func:`mpirun_args`: ``--with-ft ulfm`` (a lost rank must not end the job),
  ``--oversubscribe`` (blinkrun's discovery, not Open MPI's slot count, bounds where new ranks
  go, and ``MPI_Comm_spawn`` refuses ranks beyond the slots otherwise), and on more than one
  host what lets a job outlive a host that goes silent (:data:`HOST_LOSS_ARGS`);
- :func:`start_driver`: the :class:`.driver.ElasticDriver` that polls discovery and
  writes the job's hosts file (the argv of each new rank, and the names, never the values, of
  the variables it gets from the job), and the ``BLINKFLOW_ELASTIC_*`` settings the ranks get.
"""
from __future__ import annotations

import dataclasses
import os
import sys
from typing import List, Mapping, Optional, Sequence, Tuple

from blinkflow.errors import ConfigError

from .discovery import run_discovery_script
from .driver import ElasticDriver
from .spec import ElasticSpec
from ..job.hosts import Host, parse_hostfile
from ..job.mpi_impl import OPEN_MPI, MpiImpl
from ..job.env_forwarding import forwarded_variables
from ..job.mpirun_argv import LaunchSpec, rank_command

HOSTS_FILE_NAME = "elastic-hosts.json"
ULFM_ARGS = ("--with-ft", "ulfm")
HOST_LOSS_ARGS = (
    # ULFM's heartbeat detector: a rank whose host stops answering (powered off, network gone)
    # sends no FIN, so without it the survivors wait inside their next collective forever; with
    # it they get MPI_ERR_PROC_FAILED within about the timeout and re-form. Not in its own
    # thread: that thread starts its ring while MPI_Init still runs, and under load a rank then
    # died with SIGSEGV inside MPI_Init (Open MPI 5.0.11; docs/elastic.md has the counts).
    # Without it heartbeats go out whenever MPI progresses, which blinkflow's background
    # thread makes it do every cycle, idle or not.
    "--mca", "mpi_ft_detector", "true", "--mca", "mpi_ft_detector_thread", "false",
    # Open MPI 5's runtime ends the whole job when it notices that one of its daemons is gone;
    # its TCP keepalive would notice a silent host after 480 s and end a job that went on.
    # blinkrun stops mpirun itself once the ranks the survivors did not lose have ended.
    "--prtemca", "oob_tcp_keepalive_time", "0",
)
#: The detector's heartbeat period and timeout (seconds): a live rank whose heartbeats are later
#: than the timeout (a process stopped, or a loaded host) is declared dead, and Open MPI 5.0 then
#: kills ranks with SIGSEGV instead of reporting it; a silent host's ranks are noticed one after
#: another, each about the timeout after the last (8 ranks in about 2 minutes).
#: OMPI_MCA_mpi_ft_detector_{period,timeout} in the environment replace them (the timeout must
#: exceed three periods).
DETECTOR_SETTINGS = (("mpi_ft_detector_period", "3"), ("mpi_ft_detector_timeout", "15"))


def starting_hosts(spec: ElasticSpec, hosts: Optional[Sequence[Host]]) -> Optional[List[Host]]:
    """The hosts the job starts on: the discovery script's first run (ConfigError, one line, when
    it fails), or the ``-H``/hostfile hosts given (None: this machine)."""
    if spec.host_discovery_script is None:
        return list(hosts) if hosts else None
    if hosts:
        raise ConfigError("give the hosts of an elastic job either with --host-discovery-script or with "
                          "-H/--hostfile, not both")
    found = run_discovery_script(spec.host_discovery_script, spec.slots_per_host)
    if not found:
        raise ConfigError(f"host discovery script {spec.host_discovery_script!r} found no hosts to start on")
    return [Host(name, slots) for name, slots in found.items()]


def with_elastic_start(options: Mapping[str, object], spec: ElasticSpec) -> dict:
    """blinkrun's parsed ``options`` with what an elastic job starts with: ``-np`` defaults to
    ``--min-np``, and the hosts are the discovery script's first answer (as ``-H``)."""
    hosts = options.get("hosts")
    if options.get("hostfile"):
        if hosts:
            raise ConfigError("give hosts either with -H or with --hostfile, not both")
        hosts = parse_hostfile(str(options["hostfile"]))
    return dict(options, np=options.get("np") or spec.min_np, hosts=starting_hosts(spec, hosts), hostfile=None)


def mpirun_args(impl: MpiImpl, hosts: Sequence[Host] = (), environ: Optional[Mapping[str, str]] = None) -> Tuple[str, ...]:
    """mpirun's options for an elastic job on ``hosts`` (none: this machine). The host-loss
    options only where the job starts on more than one host: on one host a lost rank's
    connections close (or its pid goes), and the detector costs a thread per rank."""
    if impl.family != OPEN_MPI:
        raise ConfigError(f"elastic jobs need Open MPI 5 with ULFM (mpirun --with-ft ulfm); this is {impl.describe()}")
    if len({host.name for host in hosts}) <= 1:
        return ULFM_ARGS + ("--oversubscribe",)
    environ = os.environ if environ is None else environ
    detector = tuple(arg for name, value in DETECTOR_SETTINGS if "OMPI_MCA_" + name not in environ
                     for arg in ("--mca", name, value))
    return ULFM_ARGS + ("--oversubscribe",) + HOST_LOSS_ARGS + detector


def slot_argv(python: str, launch: LaunchSpec, slot: int) -> List[str]:
    """A new rank's wrapper, as mpirun starts the others, with its slot as its rank tag. It holds
    no variable's value: a command line is readable by every user of the host (``ps``,
    ``/proc/PID/cmdline``), and this one is also written to the hosts file and handed to
    ``MPI_Comm_spawn``. The job's rank 0 gives the new rank the variables of :func:`forwarded_names`
    over MPI (``blinkflow/elastic/grow.py``)."""
    wrapper = rank_command(python, dataclasses.replace(launch, wrapped=True))   # [python, -m, module, ...]
    return [*wrapper[:3], "--rank", str(slot), *wrapper[3:]]


def forwarded_names(environ: Mapping[str, str], settings: Mapping[str, str]) -> List[str]:
    """The variables a new rank gets from the job, as mpirun's ``-x`` gives them to the others:
    blinkrun's forwarded ones (:mod:`..job.env_forwarding`) and the ranks' ``BLINKFLOW_*`` settings."""
    return sorted(set(forwarded_variables(environ)) | set(settings))


def start_driver(spec: ElasticSpec, launch: LaunchSpec, scratch: str, environ: Mapping[str, str],
                 say) -> Tuple[ElasticDriver, LaunchSpec]:
    """The driver, started, and the launch with the ``BLINKFLOW_ELASTIC_*`` settings every rank
    gets. ``environ``: the environment the ranks run with. A job without a discovery script
    keeps the slots it started with: ``-H``'s, or ``-np`` on this machine."""
    hosts_file = os.path.join(scratch, HOSTS_FILE_NAME)
    settings = dict(launch.settings)
    settings.update(spec.settings_env(hosts_file))
    hosts = [(h.name, h.slots) for h in launch.hosts] or [("localhost", launch.np)]
    driver = ElasticDriver.for_script(spec, hosts_file=hosts_file, hosts=hosts, np=launch.np,
                                      slot_argv=lambda slot: slot_argv(sys.executable, launch, slot),
                                      forward=forwarded_names(environ, settings), wdir=os.getcwd(), say=say)
    driver.start()
    return driver, dataclasses.replace(launch, settings=settings)


__all__ = ["DETECTOR_SETTINGS", "HOST_LOSS_ARGS", "HOSTS_FILE_NAME", "forwarded_names", "mpirun_args", "slot_argv", "start_driver", "starting_hosts", "with_elastic_start"]
