"""``blinkrun -np N [-H host:slots,... | --hostfile F] [flags] COMMAND ...``: launch a job.

Its options are the rows of the one flag table (flags/table.py), declared in the table's order.
Turns the command line into a :class:`LaunchSpec` (setting flags -> ``BLINKFLOW_*`` by flags/settings.py),
detects the MPI, builds mpirun's argv (job/mpirun_argv.py, pure) and hands it to
:class:`..job.supervise.Job`. Bad usage exits 2 with click's message on one line (one_line.py),
before anything starts.
"""
from __future__ import annotations

import dataclasses
import os
import shlex
import sys
import tempfile

import click
from click.core import ParameterSource

from blinkflow.config import Config, unknown_variables
from blinkflow.errors import ConfigError
from blinkflow.version import __version__

from ..flags import horovod_config_file
from ..elastic.spec import elastic_spec
from ..flags.table import ACCEPTED, ACTION, CLICK_OWN, FLAGS, NATIVE, REFUSED, SETTING_FLAGS, by_name
from ..flags.settings import settings_env
from ..job.hosts import hosts_arg, mpich_hostfile_text, parse_hostfile, parse_hosts_arg
from ..job.mpi_impl import MPICH, detect
from ..job.mpirun_argv import LaunchSpec, build_mpirun_argv, format_argv
from ..one_line import OneLineErrorCommand


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


#: The rows whose values blinkrun checks or acts on as click parses them.
_CALLBACKS = {"hosts": _hosts, "check_build": _check_build}


def _options(func):
    """Every row of the flag table as a click option, in the table's order (``--help``'s)."""
    for row in reversed(FLAGS):
        option = _option(row)
        if option is not None:
            func = option(func)
    return func


def _option(row):
    """The click option of one row of the flag table (None: ``--help``, click's own)."""
    if row.handling != NATIVE:   # taken without effect, or refused: hidden
        def refuse(ctx, _param, value, row=row):
            if value and row.handling == REFUSED and not ctx.resilient_parsing:
                raise click.UsageError(row.refusal())
        kind = dict(is_flag=True) if row.nargs == 0 else dict(nargs=row.nargs, type=click.UNPROCESSED)
        return click.option(*row.names, row.param, expose_value=False, hidden=True, callback=refuse, **kind)
    if row.param == "help":
        return None
    if row.param == "version":
        return click.version_option(__version__, *row.names, prog_name="blinkflow",
                                    message="%(prog)s %(version)s", help=row.help_line())
    spelled = (f"{row.flag}/{row.negation}",) if row.negation else row.names
    kwargs = dict(help=row.help_line(), metavar=row.metavar, multiple=row.multiple)
    if row.nargs == 0 and not row.negation:   # "--autotune/--no-autotune": click makes the pair a switch
        kwargs["is_flag"] = True
    elif row.nargs:
        kwargs.update(type=row.type, nargs=row.nargs)
    if row.click_default is not CLICK_OWN:
        kwargs["default"] = row.click_default
    if row.feeds == ACTION:
        kwargs.update(expose_value=False, is_eager=True)
    callback = _CALLBACKS.get(row.param)
    if callback is not None:
        kwargs["callback"] = callback
    return click.option(*spelled, row.param, **kwargs)


@click.command(cls=OneLineErrorCommand, context_settings={"allow_interspersed_args": False,
                                                          "help_option_names": list(by_name()["--help"].names)})
@_options
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def command(**options):
    """Run COMMAND on N ranks with MPI; every output line is tagged with its rank.

    \b
    blinkrun -np 4 python train.py
    blinkrun -np 8 -H a:4,b:4 --fusion-threshold-mb 32 python train.py
    blinkrun --check-build

    horovodrun's flags are taken as horovodrun means them, or refused with what to use instead
    (docs/launching.md, "From horovodrun"). Tools that launch nothing: blinkrun topo | plan | simulate --help.
    """
    try:
        elastic = elastic_spec(options, options["np"])   # None: a fixed-size job
        if elastic:
            from ..elastic import launch as elastic_launch
            options = elastic_launch.with_elastic_start(options, elastic)
        spec, start_timeout = spec_from_options(click.get_current_context(), options, os.environ)
    except ConfigError as e:
        raise click.UsageError(str(e)) from None
    for line in unknown_variables(dict(os.environ, **spec.settings)):
        click.echo(f"blinkrun: warning: {line}", err=True)
    _check_topology(spec.settings, given_as_flag=options.get("topology") is not None)
    try:
        impl = detect()
        if elastic:
            spec = dataclasses.replace(spec, mpi_args=elastic_launch.mpirun_args(impl, spec.hosts) + spec.mpi_args)
    except ConfigError as e:
        raise click.UsageError(str(e)) from None
    from ..job.reclaim import quietly_reclaim, scratch_prefix
    from ..job.supervise import Job
    quietly_reclaim()  # what killed jobs left on this machine: scratch folders, shared memory
    with tempfile.TemporaryDirectory(prefix=scratch_prefix()) as scratch:
        mpich_hostfile = None
        if spec.hostfile and impl.family == MPICH:
            mpich_hostfile = os.path.join(scratch, "hosts.hydra")
            with open(mpich_hostfile, "w") as f:
                f.write(mpich_hostfile_text(spec.hosts))
        driver = None
        if elastic:
            ranks_environ = dict(os.environ, PATH=interpreter_first_path(os.environ.get("PATH", ""),
                                                                         os.path.dirname(sys.executable)))
            driver, spec = elastic_launch.start_driver(elastic, spec, scratch, ranks_environ,
                                                       say=lambda line: click.echo(f"blinkrun: {line}", err=True))
        try:
            argv = build_mpirun_argv(impl, spec, python=sys.executable, environ=os.environ,
                                     is_root=hasattr(os, "geteuid") and os.geteuid() == 0,
                                     local_cores=local_cores(), mpich_hostfile=mpich_hostfile)
        except ValueError as e:
            raise click.UsageError(str(e)) from None
        if spec.verbose:
            where = hosts_arg(spec.hosts) if spec.hosts else "this machine"
            click.echo(f"blinkrun: {impl.describe()}; {spec.np} rank(s) on {where}", err=True)
            click.echo(format_argv(argv), err=True)
        env = dict(os.environ)
        env.update(spec.settings)
        env["PATH"] = interpreter_first_path(env.get("PATH", ""), os.path.dirname(sys.executable))
        status = Job(argv, env, np=spec.np, start_timeout=start_timeout, elastic=driver).run()
        if driver:
            driver.stop()
    sys.exit(status)


def spec_from_options(ctx: click.Context, options: dict, environ) -> "tuple[LaunchSpec, float]":
    """The LaunchSpec of parsed options (``--config-file`` applied) and the ranks' start timeout."""
    if options["config_file"]:
        apply_config_file(ctx, options, options["config_file"])
    return launch_spec(options, environ)


def apply_config_file(ctx: click.Context, options: dict, path: str) -> None:
    """Set ``options`` from Horovod's YAML file where the command line did not give them."""
    rows = by_name()
    # spelling -> (option, the value a switch spelled so gives: --no-autotune is autotune=False)
    declared = {opt: (param, True) for param in ctx.command.params for opt in param.opts}
    declared.update({opt: (param, False) for param in ctx.command.params for opt in param.secondary_opts})
    for flag, value, where in horovod_config_file.read(path):
        row = rows[flag]
        if row.handling == REFUSED:
            raise ConfigError(f"{where}: {row.refusal()}")
        if row.handling == ACCEPTED:
            continue
        param, switch_value = declared[flag]
        if ctx.get_parameter_source(param.name) == ParameterSource.COMMANDLINE:
            continue   # the command line wins over the file, as in horovodrun
        try:
            options[param.name] = switch_value if value is None else param.type_cast_value(ctx, value)
        except click.BadParameter as e:
            raise ConfigError(f"{where}: {e.format_message()}") from None


def launch_spec(options: dict, environ) -> "tuple[LaunchSpec, float]":
    """The LaunchSpec of the parsed command line, and the ranks' start timeout. Pure but for
    reading a hostfile; bad input raises ConfigError (or click.UsageError)."""
    if options["np"] is None:
        raise click.UsageError("missing option -np (the number of ranks)")
    if not options["command"]:
        raise click.UsageError("missing COMMAND to run on every rank")
    hosts, hostfile = options["hosts"], options["hostfile"]
    if hosts and hostfile:
        raise click.UsageError("give hosts either with -H or with --hostfile, not both")
    if hostfile:
        hosts = parse_hostfile(hostfile)
    setting_values = {s.param: options.get(s.param) for s in SETTING_FLAGS}
    if options.get("no_stall_check"):
        for param in ("stall_check_warning_time_seconds", "stall_check_shutdown_time_seconds"):
            if setting_values[param] is None:
                setting_values[param] = 0.0
    settings = settings_env(setting_values, environ)
    # the ranks' init deadline, and ours for their start (HOROVOD_START_TIMEOUT counts too)
    start_timeout = Config.from_env(dict(environ, **settings)).start_timeout
    extra = _split("--mpi-args", options["mpi_args"])
    binding = _split("--binding-args", options["binding_args"]) if options["binding_args"] is not None else None
    nics = tuple(n.strip() for given in options["network_interfaces"] + options["network_interface"]
                 for n in given.split(",") if n.strip())
    output_filename = options["output_filename"]
    spec = LaunchSpec(np=options["np"], command=tuple(options["command"]), hosts=tuple(hosts or ()),
                      hostfile=hostfile, settings=settings, mpi_args=extra, verbose=options["verbose"],
                      output_dir=os.path.abspath(output_filename) if output_filename else None,
                      nics=tuple(dict.fromkeys(nics)), ssh_port=options["ssh_port"],
                      ssh_identity_file=options["ssh_identity_file"], tcp_only=bool(options["tcp_only"]),
                      binding_args=binding, timestamp_output=bool(options["timestamp_output"]))
    return spec, start_timeout


def _split(flag: str, text: str) -> tuple:
    try:
        return tuple(shlex.split(text or ""))
    except ValueError as e:   # shlex: unbalanced quotes
        raise click.BadParameter(f"{text!r}: {e}", param_hint=f"'{flag}'") from None
