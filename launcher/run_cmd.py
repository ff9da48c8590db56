"""``blinkrun -np N [-H host:slots,... | --hostfile F] [flags] COMMAND ...``: launch a job.

Turns the command line into a :class:`LaunchSpec` (flags -> ``BLINKFLOW_*`` through the one
table in flags.py), detects the MPI, builds mpirun's argv (mpirun_argv.py, pure) and hands it to
:class:`supervise.Job`. Bad usage exits 2 with click's message on one line (one_line.py), before
anything starts.
"""
from __future__ import annotations

import os
import shlex
import sys
import tempfile

import click

from blinkflow.config import Config, unknown_variables
from blinkflow.errors import ConfigError
from blinkflow.version import __version__

from .elastic_flags import elastic_options, elastic_spec
from .flags import SETTING_FLAGS, settings_env
from .hosts import hosts_arg, mpich_hostfile_text, parse_hostfile, parse_hosts_arg
from .mpi_impl import MPICH, detect
from .mpirun_argv import LaunchSpec, build_mpirun_argv, format_argv
from .one_line import OneLineErrorCommand


def interpreter_first_path(path: str, interpreter_dir: str) -> str:
    """PATH for the ranks with blinkrun's own interpreter directory first.

    ``.venv/bin/blinkrun -np 2 python train.py`` must run the venv's ``python`` (which has
    blinkflow) even when the venv is not activated, as a user of a venv expects.
    """
    parts = [p for p in path.split(os.pathsep) if p and p != interpreter_dir]
    return os.pathsep.join([interpreter_dir] + parts)


def local_cores() -> int:
    """Physical cores this process may use: Open MPI's default slot count on a host."""
    try:
        allowed = os.sched_getaffinity(0)
    except AttributeError:
        return os.cpu_count() or 1
    cores = set()
    for cpu in allowed:
        base = f"/sys/devices/system/cpu/cpu{cpu}/topology/"
        try:
            with open(base + "physical_package_id") as pkg, open(base + "core_id") as core:
                cores.add((pkg.read().strip(), core.read().strip()))
        except OSError:
            return len(allowed)
    return len(cores) or len(allowed)


def _check_topology(settings, given_as_flag: bool) -> None:
    """A topology every rank would reject fails here, before anything starts (exit 2). A
    topology file must therefore be readable where blinkrun runs, at the same path as on the
    hosts (a shared file system, or a copy)."""
    spec = settings.get(Config.env_name("topology"))
    if spec:
        from blinkflow.topology.resolve import resolve_topology
        resolve_topology(spec, "--topology" if given_as_flag else Config.env_name("topology"))


def _check_build(ctx, _param, value):
    if value and not ctx.resilient_parsing:
        from .check_build import report
        click.echo(report(), nl=False)
        ctx.exit(0)


def _hosts(ctx, param, value):
    if value is None:
        return None
    try:
        return parse_hosts_arg(value)
    except ConfigError as e:
        raise click.BadParameter(str(e), ctx=ctx, param=param) from None


def _setting_options(func):
    for setting in reversed(SETTING_FLAGS):
        func = click.option(setting.flag, setting.param, type=setting.type, default=None,
                            help=f"{setting.help} [{setting.env_name}]")(func)
    return func


@click.command(cls=OneLineErrorCommand,
               context_settings={"allow_interspersed_args": False, "help_option_names": ["-h", "--help"]})
@click.option("-np", "--num-proc", "np", type=click.IntRange(min=1), help="Number of ranks to start.")
@click.option("-H", "--hosts", "hosts", callback=_hosts, metavar="HOST:SLOTS,...",
              help="Hosts and their slots, e.g. a:4,b:4 (default: this machine only).")
@click.option("--hostfile", type=click.Path(dir_okay=False), help="File of 'host slots=N' lines.")
@_setting_options
@elastic_options
@click.option("--mpi-args", default="", metavar="'ARGS'", help="Extra arguments for mpirun, as one quoted string.")
@click.option("--output-filename", type=click.Path(file_okay=False), metavar="DIR",
              help="Also write each rank's output to DIR/rank.N/stdout and stderr.")
@click.option("--verbose", is_flag=True, help="Print the exact mpirun command before running it, and the GPU each rank drives.")
@click.option("--check-build", is_flag=True, expose_value=False, is_eager=True, callback=_check_build,
              help="Show what this installation can use (frameworks, MPI, GPU support) and exit.")
@click.version_option(__version__, "--version", prog_name="blinkflow", message="%(prog)s %(version)s")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def command(np, hosts, hostfile, mpi_args, output_filename, verbose, command, **setting_values):
    """Run COMMAND on N ranks with MPI; every output line is tagged with its rank.

    \b
    blinkrun -np 4 python train.py
    blinkrun -np 8 -H a:4,b:4 --fusion-threshold-mb 32 python train.py
    blinkrun --check-build

    Tools that launch nothing: blinkrun topo | plan | simulate --help.
    """
    try:
        elastic = elastic_spec(setting_values, np)   # None: a fixed-size job
    except ConfigError as e:
        raise click.UsageError(str(e)) from None
    np = np or (elastic.min_np if elastic else None)
    if np is None:
        raise click.UsageError("missing option -np (the number of ranks)")
    if not command:
        raise click.UsageError("missing COMMAND to run on every rank")
    if hosts and hostfile:
        raise click.UsageError("give hosts either with -H or with --hostfile, not both")
    try:
        if hostfile:
            hosts = parse_hostfile(hostfile)
        if elastic:
            from . import elastic_launch
            hosts, hostfile = elastic_launch.starting_hosts(elastic, hosts), None
        settings = settings_env(setting_values, os.environ)
        start_timeout = Config.from_env(settings).start_timeout  # the ranks' init deadline, and ours for their start
        extra = tuple(shlex.split(mpi_args))
    except ConfigError as e:
        raise click.UsageError(str(e)) from None
    except ValueError as e:   # shlex: unbalanced quotes
        raise click.BadParameter(f"{mpi_args!r}: {e}", param_hint="'--mpi-args'") from None
    for line in unknown_variables(settings):
        click.echo(f"blinkrun: warning: {line}", err=True)
    _check_topology(settings, given_as_flag=setting_values.get("topology") is not None)
    try:
        impl = detect()
        if elastic:
            extra = elastic_launch.mpirun_args(impl) + extra
    except ConfigError as e:
        raise click.UsageError(str(e)) from None
    spec = LaunchSpec(np=np, command=tuple(command), hosts=tuple(hosts or ()), hostfile=hostfile,
                      settings=settings, mpi_args=extra, verbose=verbose,
                      output_dir=os.path.abspath(output_filename) if output_filename else None)
    from .reclaim import quietly_reclaim, scratch_prefix
    from .supervise import Job
    quietly_reclaim()  # what killed jobs left on this machine: scratch folders, shared memory
    with tempfile.TemporaryDirectory(prefix=scratch_prefix()) as scratch:
        mpich_hostfile = None
        if hostfile and impl.family == MPICH:
            mpich_hostfile = os.path.join(scratch, "hosts.hydra")
            with open(mpich_hostfile, "w") as f:
                f.write(mpich_hostfile_text(spec.hosts))
        driver = None
        if elastic:
            ranks_environ = dict(os.environ, PATH=interpreter_first_path(os.environ.get("PATH", ""),
                                                                         os.path.dirname(sys.executable)))
            driver, spec = elastic_launch.start_driver(elastic, spec, scratch, ranks_environ,
                                                       say=lambda line: click.echo(f"blinkrun: {line}", err=True))
        argv = build_mpirun_argv(impl, spec, python=sys.executable, environ=os.environ,
                                 is_root=hasattr(os, "geteuid") and os.geteuid() == 0,
                                 local_cores=local_cores(), mpich_hostfile=mpich_hostfile)
        if verbose:
            where = hosts_arg(spec.hosts) if spec.hosts else "this machine"
            click.echo(f"blinkrun: {impl.describe()}; {np} rank(s) on {where}", err=True)
            click.echo(format_argv(argv), err=True)
        env = dict(os.environ)
        env.update(settings)
        env["PATH"] = interpreter_first_path(env.get("PATH", ""), os.path.dirname(sys.executable))
        status = Job(argv, env, np=np, start_timeout=start_timeout, elastic=driver).run()
        if driver:
            driver.stop()
    sys.exit(status)
