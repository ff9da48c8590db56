"""What an elastic job changes in ``blinkrun``'s launch (``run_cmd.py`` calls these few entries).

- :func:`starting_hosts`: the first run of the discovery script decides where the job starts
  (it must succeed: Horovod's rule);
- :func:`mpirun_args`: ``--with-ft ulfm`` (a lost rank must not end the job) and
  ``--oversubscribe`` (blinkrun's discovery, not Open MPI's slot count, bounds where new ranks
  go, and ``MPI_Comm_spawn`` refuses ranks beyond the slots otherwise);
- :func:`start_driver`: the :class:`.elastic_driver.ElasticDriver` that polls discovery and
  writes the job's hosts file, and the ``BLINKFLOW_ELASTIC_*`` settings the ranks get.
"""
from __future__ import annotations

import dataclasses
import os
import sys
from typing import List, Mapping, Optional, Sequence, Tuple

from blinkflow.config import Config
from blinkflow.errors import ConfigError

from .elastic_discovery import run_discovery_script
from .elastic_driver import ElasticDriver
from .elastic_flags import ElasticSpec
from .hosts import Host
from .mpi_impl import OPEN_MPI, MpiImpl
from .mpirun_argv import INHERITED_VARS, RANK_EXEC_MODULE, LaunchSpec

HOSTS_FILE_NAME = "elastic-hosts.json"
ULFM_ARGS = ("--with-ft", "ulfm")


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


def mpirun_args(impl: MpiImpl) -> Tuple[str, ...]:
    if impl.family != OPEN_MPI:
        raise ConfigError(f"elastic jobs need Open MPI 5 with ULFM (mpirun --with-ft ulfm); this is {impl.describe()}")
    return ULFM_ARGS + ("--oversubscribe",)


def slot_argv(python: str, launch: LaunchSpec, slot: int, env: Mapping[str, str]) -> List[str]:
    """A new rank's wrapper, as mpirun starts the others, with its slot as its rank tag; run
    through ``env`` with the variables mpirun's ``-x`` gives the others (a spawned process does
    not inherit them), and ``BLINKFLOW_ELASTIC_JOINING=1``, which makes its ``init()`` join."""
    variables = dict(env, **{Config.env_name("elastic_joining"): "1"})
    argv = ["env", *(f"{k}={v}" for k, v in sorted(variables.items())), python, "-m", RANK_EXEC_MODULE,
            "--rank", str(slot)]
    if launch.output_dir:
        argv += ["--output-dir", launch.output_dir]
    if launch.verbose:
        argv.append("--verbose")
    return argv + ["--", *launch.command]


def start_driver(spec: ElasticSpec, launch: LaunchSpec, scratch: str, environ: Mapping[str, str],
                 say) -> Tuple[ElasticDriver, LaunchSpec]:
    """The driver, started, and the launch with the ``BLINKFLOW_ELASTIC_*`` settings every rank
    gets. ``environ``: the environment the ranks run with. A job without a discovery script
    keeps the slots it started with: ``-H``'s, or ``-np`` on this machine."""
    hosts_file = os.path.join(scratch, HOSTS_FILE_NAME)
    settings = dict(launch.settings)
    settings.update(spec.settings_env(hosts_file))
    spawn_env = dict(settings)
    spawn_env.update({name: environ[name] for name in INHERITED_VARS if name in environ})
    hosts = [(h.name, h.slots) for h in launch.hosts] or [("localhost", launch.np)]
    driver = ElasticDriver.for_script(spec, hosts_file=hosts_file, hosts=hosts, np=launch.np,
                                      slot_argv=lambda slot: slot_argv(sys.executable, launch, slot, spawn_env),
                                      wdir=os.getcwd(), say=say)
    driver.start()
    return driver, dataclasses.replace(launch, settings=settings)


__all__ = ["HOSTS_FILE_NAME", "mpirun_args", "slot_argv", "start_driver", "starting_hosts"]
