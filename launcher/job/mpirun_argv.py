"""Build the ``mpirun`` argument list — a pure function of its inputs, unit-tested without MPI
(tests/unit/test_launcher_argv.py). Nothing here reads the environment, the clock or the file system.

Every rank runs ``python -m blinkflow.launcher.ranks.rank_exec -- COMMAND ...``: the wrapper tags the
rank's output lines, records how it failed and takes the job down (see rank_exec.py).
"""
from __future__ import annotations

import dataclasses
import shlex
from typing import List, Mapping, Optional, Sequence, Tuple

from blinkflow.config import MPI_DEFAULTS

from .env_forwarding import forwarded_variables
from .hosts import Host, hosts_arg, total_slots
from .mpi_impl import MPICH, OPEN_MPI, MpiImpl

RANK_EXEC_MODULE = "blinkflow.launcher.ranks.rank_exec"
#: Open MPI's MCA settings for horovodrun's ``--tcp``: the ob1 messaging layer over the TCP,
#: shared-memory and self transports only (no UCX, libfabric or InfiniBand verbs).
TCP_ONLY_MCA = (("pml", "ob1"), ("btl", "self,sm,tcp"))


@dataclasses.dataclass(frozen=True)
class LaunchSpec:
    """What to launch, as decided from the command line (CLI > env > default already applied)."""

    np: int
    command: Tuple[str, ...]
    hosts: Tuple[Host, ...] = ()              # empty: every rank on this machine
    hostfile: Optional[str] = None            # the user's hostfile (hosts then holds its parse)
    settings: Mapping[str, str] = dataclasses.field(default_factory=dict)  # BLINKFLOW_* for every rank
    mpi_args: Tuple[str, ...] = ()            # passed to mpirun verbatim, before the command
    output_dir: Optional[str] = None          # per-rank logs
    wrapped: bool = True                      # False: mpirun starts the command itself, whose raw
                                              # output the test harness and the benchmarks read
    verbose: bool = False                     # each rank says which GPU it drives
    nics: Tuple[str, ...] = ()                # network interfaces MPI's traffic may use (empty: any)
    ssh_port: Optional[int] = None            # port of every host's sshd
    ssh_identity_file: Optional[str] = None   # private key for ssh to every host
    tcp_only: bool = False                    # MPI's traffic over TCP only (horovodrun --tcp)
    binding_args: Optional[Tuple[str, ...]] = None   # mpirun's binding arguments (None: no binding)
    timestamp_output: bool = False            # every output line starts with the time


def rank_command(python: str, spec: LaunchSpec) -> List[str]:
    """What mpirun starts on every rank: the wrapper module, then the user's command."""
    if not spec.wrapped:
        return list(spec.command)
    argv = [python, "-m", RANK_EXEC_MODULE]
    if spec.output_dir:
        argv += ["--output-dir", spec.output_dir]
    if spec.verbose:
        argv.append("--verbose")
    if spec.timestamp_output:
        argv.append("--timestamp")
    return argv + ["--", *spec.command]


def needs_oversubscribe(spec: LaunchSpec, local_cores: int) -> bool:
    slots = total_slots(spec.hosts) if spec.hosts else local_cores
    return spec.np > slots


def build_mpirun_argv(impl: MpiImpl, spec: LaunchSpec, *, python: str, environ: Mapping[str, str],
                      is_root: bool, local_cores: int, mpich_hostfile: Optional[str] = None) -> List[str]:
    """The full argv for ``impl``'s launcher.

    ``environ`` is the environment mpirun will run with: every variable in it reaches every rank,
    on every host, except those :func:`env_forwarding.forwarded_variables` leaves out (as
    horovodrun does). ``mpich_hostfile`` is the Hydra-format copy of ``spec.hostfile`` (Hydra reads
    ``host:N`` lines, not Open MPI's ``host slots=N``); the caller writes it.
    """
    if impl.family == OPEN_MPI:
        argv = _openmpi(impl, spec, environ, is_root, local_cores)
    elif impl.family == MPICH:
        argv = _hydra(impl, spec, environ, mpich_hostfile)
    else:
        raise ValueError(f"unknown MPI family {impl.family!r}")
    return argv + list(spec.mpi_args) + rank_command(python, spec)


def _openmpi(impl: MpiImpl, spec: LaunchSpec, environ: Mapping[str, str], is_root: bool,
             local_cores: int) -> List[str]:
    # No binding by default: the runtime's background thread and TensorFlow's pools need more
    # than one core.
    binding = list(spec.binding_args) if spec.binding_args is not None else ["--bind-to", "none"]
    argv = [impl.mpirun, "-np", str(spec.np), *binding, "--map-by", "slot"]
    if is_root:
        argv.append("--allow-run-as-root")
    if needs_oversubscribe(spec, local_cores):
        argv.append("--oversubscribe")
    if spec.hostfile:
        argv += ["--hostfile", spec.hostfile]
    elif spec.hosts:
        argv += ["--host", hosts_arg(spec.hosts)]
    for name in sorted(spec.settings):
        argv += ["-x", f"{name}={spec.settings[name]}"]
    for name in forwarded_variables(environ):
        if name not in spec.settings:
            argv += ["-x", name]
    for name, value in _mca_defaults(spec, environ):
        argv += ["--mca", name, value]
    if spec.nics:   # MPI's messages (btl) and the launcher's own control channel (PRRTE's oob)
        nics = ",".join(spec.nics)
        argv += ["--mca", "btl_tcp_if_include", nics, "--prtemca", "oob_tcp_if_include", nics]
    if spec.tcp_only:
        for name, value in TCP_ONLY_MCA:
            argv += ["--mca", name, value]
    ssh_args = _ssh_args(spec)
    if ssh_args:
        argv += ["--prtemca", "plm_ssh_args", ssh_args]
    return argv


def _mca_defaults(spec: LaunchSpec, environ: Mapping[str, str]) -> List[Tuple[str, str]]:
    """blinkflow's Open MPI defaults (``MPI_DEFAULTS``) the user left unset: not in the
    environment, not in ``--mpi-args`` and not by ``--tcp`` (mpirun refuses a parameter given
    twice)."""
    given = {name for name, _ in TCP_ONLY_MCA} if spec.tcp_only else set()
    args = list(spec.mpi_args)
    given |= {args[i + 1] for i, a in enumerate(args[:-1]) if a in ("--mca", "-mca", "--omca")}
    return [(name[len("OMPI_MCA_"):], value) for name, value in MPI_DEFAULTS.items()
            if name.startswith("OMPI_MCA_") and name not in environ and name[len("OMPI_MCA_"):] not in given]


def _ssh_args(spec: LaunchSpec) -> str:
    """What ``-p``/``-i`` add to every ssh command the launcher runs."""
    args = []
    if spec.ssh_port is not None:
        args += ["-p", str(spec.ssh_port)]
    if spec.ssh_identity_file:
        args += ["-i", spec.ssh_identity_file]
    return " ".join(shlex.quote(a) for a in args)


def _hydra(impl: MpiImpl, spec: LaunchSpec, environ: Mapping[str, str], mpich_hostfile: Optional[str]) -> List[str]:
    if spec.tcp_only or spec.binding_args is not None:
        flag = "--tcp" if spec.tcp_only else "--binding-args"
        raise ValueError(f"{flag} sets Open MPI's options, and this MPI is {impl.describe()}: give MPICH's own "
                         "in --mpi-args (e.g. '-bind-to core')")
    argv = [impl.mpirun, "-np", str(spec.np)]
    if spec.hostfile:
        if not mpich_hostfile:
            raise ValueError("Hydra needs the hostfile converted to host:N lines (mpich_hostfile)")
        argv += ["-f", mpich_hostfile]
    elif spec.hosts:
        argv += ["-hosts", hosts_arg(spec.hosts)]
    for name in sorted(spec.settings):
        argv += ["-genv", name, spec.settings[name]]
    # Hydra would hand every rank mpiexec's whole environment; name the forwarded ones instead.
    forwarded = [name for name in forwarded_variables(environ) if name not in spec.settings]
    if forwarded:
        argv += ["-genvnone", "-genvlist", ",".join(forwarded)]
    if spec.nics:
        if len(spec.nics) > 1:
            raise ValueError(f"MPICH's Hydra uses one network interface (-iface), got {', '.join(spec.nics)}; "
                             "give one --network-interface")
        argv += ["-iface", spec.nics[0]]
    ssh_args = _ssh_args(spec)
    if ssh_args:
        argv += ["-bootstrap", "ssh", "-bootstrap-exec-args", ssh_args]
    return argv


def format_argv(argv: Sequence[str]) -> str:
    """The argv as one shell-quoted line (what ``--verbose`` prints)."""
    import shlex
    return " ".join(shlex.quote(a) for a in argv)
