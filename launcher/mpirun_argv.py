"""Build the ``mpirun`` argument list — a pure function of its inputs, unit-tested without MPI
(tests/unit/test_launcher_argv.py). Nothing here reads the environment, the clock or the file system.

Every rank runs ``python -m blinkflow.launcher.rank_exec -- COMMAND ...``: the wrapper tags the
rank's output lines, records how it failed and takes the job down (see rank_exec.py).
"""
from __future__ import annotations

import dataclasses
from typing import List, Mapping, Optional, Sequence, Tuple

from blinkflow.config import MPI_DEFAULTS

from .hosts import Host, hosts_arg, total_slots
from .mpi_impl import MPICH, OPEN_MPI, MpiImpl

# Variables every rank needs even on a remote host (Open MPI only forwards what -x names).
INHERITED_VARS = ("PATH", "PYTHONPATH", "LD_LIBRARY_PATH")
RANK_EXEC_MODULE = "blinkflow.launcher.rank_exec"


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


def rank_command(python: str, spec: LaunchSpec) -> List[str]:
    """What mpirun starts on every rank: the wrapper module, then the user's command."""
    if not spec.wrapped:
        return list(spec.command)
    argv = [python, "-m", RANK_EXEC_MODULE]
    if spec.output_dir:
        argv += ["--output-dir", spec.output_dir]
    if spec.verbose:
        argv.append("--verbose")
    return argv + ["--", *spec.command]


def needs_oversubscribe(spec: LaunchSpec, local_cores: int) -> bool:
    slots = total_slots(spec.hosts) if spec.hosts else local_cores
    return spec.np > slots


def build_mpirun_argv(impl: MpiImpl, spec: LaunchSpec, *, python: str, environ: Mapping[str, str],
                      is_root: bool, local_cores: int, mpich_hostfile: Optional[str] = None) -> List[str]:
    """The full argv for ``impl``'s launcher.

    ``environ`` is the environment mpirun will run with: of :data:`INHERITED_VARS`, those set there
    are forwarded. ``mpich_hostfile`` is the Hydra-format copy of ``spec.hostfile`` (Hydra reads
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
    # No binding: the runtime's background thread and TensorFlow's pools need more than one core.
    argv = [impl.mpirun, "-np", str(spec.np), "--bind-to", "none", "--map-by", "slot"]
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
    for name in INHERITED_VARS:
        if name in environ:
            argv += ["-x", name]
    for name, value in MPI_DEFAULTS.items():   # blinkflow's Open MPI defaults; the user's value wins
        if name.startswith("OMPI_MCA_") and name not in environ:
            argv += ["--mca", name[len("OMPI_MCA_"):], value]
    return argv


def _hydra(impl: MpiImpl, spec: LaunchSpec, environ: Mapping[str, str], mpich_hostfile: Optional[str]) -> List[str]:
    argv = [impl.mpirun, "-np", str(spec.np)]
    if spec.hostfile:
        if not mpich_hostfile:
            raise ValueError("Hydra needs the hostfile converted to host:N lines (mpich_hostfile)")
        argv += ["-f", mpich_hostfile]
    elif spec.hosts:
        argv += ["-hosts", hosts_arg(spec.hosts)]
    for name in sorted(spec.settings):
        argv += ["-genv", name, spec.settings[name]]
    for name in INHERITED_VARS:
        if name in environ:
            argv += ["-genv", name, environ[name]]
    return argv


def format_argv(argv: Sequence[str]) -> str:
    """The argv as one shell-quoted line (what ``--verbose`` prints)."""
    import shlex
    return " ".join(shlex.quote(a) for a in argv)
