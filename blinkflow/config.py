"""The one configuration object: every ``BLINKFLOW_*`` variable is read here, once.

Precedence is written down once: a ``blinkrun`` flag sets the variable for every rank, so
CLI > environment > the defaults below. No other module reads ``os.environ`` for blinkflow
settings; they receive a :class:`Config`.

The environment name of a field is ``BLINKFLOW_`` + the field name upper-cased, following
mpi4py's ``Rc``. Horovod's ``HOROVOD_*`` variables are read where a field has a twin
(:data:`HOROVOD_TWINS`), the ``BLINKFLOW_*`` one winning when both are set; the others are named
with what to use instead (:data:`HOROVOD_WITHOUT_TWIN`, reported by :func:`unknown_variables`).
"""
from __future__ import annotations

import dataclasses
import difflib
import math
import os
from typing import List, Mapping, Optional

from .errors import ConfigError
from .setting_text import parse_bytes, parse_count, parse_number, parse_switch

ENV_PREFIX = "BLINKFLOW_"
#: Settings that must be equal on every rank (checked at init): ranks that disagree would fuse,
#: cache, plan or choose data paths differently and wait for each other. The topology is one:
#: rank 0 alone reads it, so one set on another rank only would be silently ignored.
AGREED_FIELDS = ("fusion_threshold", "cache_capacity", "backend", "chunk_bytes", "cpu_single_copy", "cpu_control",
                 "split_hosts", "topology", "bucket_bytes", "algorithm", "check_schedules", "autotune", "link_probe")
BACKENDS = ("auto", "cpu", "cuda")
ALGORITHMS = ("auto", "runner", "device", "nccl", "single_copy", "mpi")
CPU_CONTROLS = ("auto", "shm", "mpi")
LOG_LEVELS = ("trace", "debug", "info", "warning", "error", "fatal")
_DAY_S = 86400.0


@dataclasses.dataclass(frozen=True)
class Config:
    """Runtime settings. Field ``x`` is read from ``BLINKFLOW_X``; numbers must lie in
    :data:`BOUNDS` (a value that passed would otherwise fail later, far from its cause)."""

    fusion_threshold: int = 64 * 1024 * 1024
    """Bytes of tensors fused into one collective: 64 MiB. Horovod's default is 128 MiB
    (``--fusion-threshold-mb 128`` or ``HOROVOD_FUSION_THRESHOLD=134217728`` matches it)."""
    cycle_time: float = 20.0
    """Milliseconds between the negotiation rounds of a runtime with nothing to negotiate (stall
    checks, join and shutdown travel on them). Submitted tensors are negotiated at once, so unlike
    Horovod's cycle this is no latency; short cycles only cost idle CPU."""
    cache_capacity: int = 1024
    """Entries of the response cache (0 disables the fast path)."""
    timeline: Optional[str] = None
    """Path of a Chrome-trace JSON timeline, or None."""
    stall_check_time_seconds: float = 60.0
    """Warn about tensors some ranks have not submitted, and about ranks not heard from (stopped,
    or blocked holding the GIL), after this long (0 disables)."""
    stall_shutdown_time_seconds: float = 300.0
    """Shut the job down after such a stall this long (0 = never): every rank's waiting calls
    raise ShutdownError naming the ranks missing. Five minutes by default, so that nothing waits
    forever while a slow step (a long evaluation, a checkpoint on one rank) still fits."""
    start_timeout: float = 60.0
    """Seconds for every rank to reach ``init()`` (counted on each rank from its own call), and
    again for the set-up after they all did; past it ``init()`` raises InitError naming the ranks
    missing or failed. ``blinkrun --start-timeout`` sets it."""
    topology: Optional[str] = None
    """A preset name or a topology file that overrides probing."""
    backend: str = "auto"
    """auto | cpu | cuda."""
    log_level: str = "warning"
    """trace | debug | info | warning | error | fatal."""
    chunk_bytes: int = 0
    """Pipeline chunk size of the executors in bytes (0 = tuned automatically)."""
    cpu_single_copy: int = 1
    """1: on a host where ranks may read each other's memory (Linux cross-memory attach), large
    all-reduces read peers' tensors in place instead of first copying them into shared memory;
    0: always copy through shared memory."""
    cpu_control: str = "auto"
    """How the cpu backend's ranks of one host tell each other that a chunk is ready or free:
    shm (rings in shared memory, :mod:`blinkflow.backends.cpu.mailbox`), mpi (MPI messages), or
    auto: shm on CPUs with total store order (x86-64), which the rings need, mpi elsewhere."""
    bucket_bytes: int = 25 * 1024 * 1024
    """Bytes of gradients per bucket: DistributedOptimizer and DistributedGradientTape submit each
    bucket as soon as backprop has produced it, last layer first, so its all-reduce overlaps the
    rest of backprop (PyTorch DDP's ``bucket_cap_mb``, and its default); 0 = one bucket."""
    elastic_min_np: int = 0
    """The fewest ranks an elastic job (``blinkflow.elastic.run``) goes on with after losing some
    (``blinkrun --min-np``); below it the job ends on every survivor with TooFewRanksError naming
    the ranks lost. 0: any number, down to one."""
    pin_gpus: int = 1
    """1: ``blinkrun`` names, before CUDA starts in a rank, the GPUs of the rank's host by uuid in
    ``CUDA_VISIBLE_DEVICES`` (the same list for every local rank; local rank k drives device k;
    one MIG instance per rank); 0: leave CUDA_VISIBLE_DEVICES as the user set it."""
    tf_memory_growth: int = 1
    """1: with the cuda backend, ``blinkflow.tensorflow``'s ``init()`` makes TensorFlow grow its
    GPU memory as needed instead of taking nearly all of it at start, which would leave none for
    the receive arena and CuPy's pool; 0: leave TensorFlow's allocator as it is."""
    algorithm: str = "auto"
    """Which registered algorithm runs the collectives (``blinkflow.schedule.policy``): auto (the
    policy decides per call), runner (the host-driven schedule runner), device (the cuda
    backend's device executor), nccl (the cuda backend's all-reduces by NCCL, where every rank
    drives its own GPU), single_copy (cpu all-reduces that read peers' tensors in place, where
    they can) or mpi (cpu all-reduces of MPI's dtypes by MPI's own all-reduce). A setting for
    one backend's algorithm leaves the other backend's calls, and calls its algorithm cannot
    run, to auto."""
    check_schedules: int = 0
    """1: prove every new call shape's schedule before it first runs (its collective's
    postcondition by symbolic execution, and that the device executor's tables cannot
    deadlock); on in the test suite. 0: only the structural checks."""
    check_cache: Optional[str] = None
    """A folder where ``check_schedules`` remembers, by digest, the schedules it proved, so the
    processes that share it prove each schedule once (the test suite names a temporary folder
    per session); None: every process proves every new call shape."""
    autotune: int = 0
    """1: search the fusion threshold and the cycle time online while the job runs and keep the
    best (:mod:`blinkflow.runtime.autotune`; Horovod's ``HOROVOD_AUTOTUNE``); 0: use the values set."""
    autotune_log_file: Optional[str] = None
    """CSV file rank 0 writes every autotune sample to (setting, score), or None."""
    autotune_warmup_samples: int = 3
    """Samples discarded before scoring starts (the first steps compile, fill caches, allocate)."""
    autotune_steps_per_sample: int = 10
    """Cycles that ran all-reduces per sample."""
    autotune_bayes_opt_max_samples: int = 20
    """Scored samples before the best setting is kept for good."""
    autotune_gaussian_process_noise: float = 0.8
    """Observation noise of the search's Gaussian process, in units of the scores' spread."""
    link_probe: int = 1
    """1: a job on three or more hosts measures each pair of hosts at start-up (about 60 ms per
    round of pairs, ``H - 1`` rounds) and plans on the measured rates, so that a slow pair
    carries less (:mod:`blinkflow.runtime.link_probe`); 0: plan on the NICs' nominal rates.
    ``blinkrun topo --probe`` prints what it measures."""
    split_hosts: int = 0
    """For tests of the multi-host path on one machine: treat the job's ranks as this many hosts
    (consecutive blocks of ranks, no shared memory between blocks). 0 = real host names."""
    elastic_max_np: int = 0
    """The most ranks an elastic job grows to as hosts appear (``blinkrun --max-np``; 0 = no bound)."""
    elastic_reset_limit: int = 0
    """Resets (ranks lost or gained) after which an elastic job ends (``--reset-limit``; 0 = none)."""
    elastic_hosts_file: Optional[str] = None
    """The file in the job's scratch folder where ``blinkrun`` lists the new ranks its host
    discovery asks for; the lowest rank reads it at ``check_host_updates()``."""
    elastic_join_timeout_seconds: float = 600.0
    """How long the ranks of an elastic job wait for the ranks they start (blinkrun's host
    discovery) to call ``init()``: past it they go on without them and end their processes, and
    blinkrun blacklists the host (Horovod's ``--elastic-timeout``, which sets it)."""
    elastic_joining: int = 0
    """1 in a rank that a running elastic job started to add it (``MPI_Comm_spawn``):
    ``blinkflow.init()`` joins that job instead of starting one. Set by the spawning ranks."""

    def __post_init__(self):
        for field, (low, high, low_open, unit) in BOUNDS.items():
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not _finite(value) \
                    or value < low or (low_open and value == low) or value > high:
                below = f"> {low:g}" if low_open else f">= {low:g}"
                got = repr(value) if len(repr(value)) <= 40 else f"{repr(value)[:20]}... ({len(repr(value))} digits)"
                raise ConfigError(f"{self.env_name(field)} must be {below} and <= {high:g}{unit}, got {got}")
        if self.backend not in BACKENDS:
            raise ConfigError(f"{ENV_PREFIX}BACKEND must be one of {', '.join(BACKENDS)}, got {self.backend!r}")
        if self.log_level not in LOG_LEVELS:
            raise ConfigError(f"{ENV_PREFIX}LOG_LEVEL must be one of {', '.join(LOG_LEVELS)}, got {self.log_level!r}")
        if self.algorithm not in ALGORITHMS:
            raise ConfigError(f"{ENV_PREFIX}ALGORITHM must be one of {', '.join(ALGORITHMS)}, got {self.algorithm!r}")
        for flag in SWITCH_FIELDS:
            if getattr(self, flag) not in (0, 1):
                raise ConfigError(f"{self.env_name(flag)} must be 0 or 1, got {getattr(self, flag)}")
        if self.cpu_control not in CPU_CONTROLS:
            raise ConfigError(f"{ENV_PREFIX}CPU_CONTROL must be one of {', '.join(CPU_CONTROLS)}, "
                              f"got {self.cpu_control!r}")

    def agreed(self) -> tuple:
        """The settings every rank of a job must share, as ((field, value), ...): ranks that
        disagree would fuse, cache or choose data paths differently and wait for each other."""
        return tuple((name, getattr(self, name)) for name in AGREED_FIELDS)

    @staticmethod
    def env_name(field: str) -> str:
        return ENV_PREFIX + field.upper()

    @classmethod
    def from_env(cls, environ: Optional[Mapping[str, str]] = None) -> "Config":
        """Build a Config from ``environ`` (default ``os.environ``); unknown values raise ConfigError.
        Variables no field reads are not errors: see :func:`unknown_variables`."""
        environ = os.environ if environ is None else environ
        values, origins = {}, {}
        horovod = horovod_settings(environ)
        for field in dataclasses.fields(cls):
            name = cls.env_name(field.name)
            raw = environ.get(name)
            if raw is None or raw == "":
                if field.name not in horovod:
                    continue
                name, raw = horovod[field.name]
                origins[field.name] = f"{name}={raw}"
            values[field.name] = _parse(field, raw.strip(), name)
        try:
            return cls(**values)
        except ConfigError as e:
            if not origins:
                raise
            raise ConfigError(f"{e} (read from Horovod's {', '.join(origins.values())})") from None

    def to_env(self) -> dict:
        """The ``BLINKFLOW_*`` variables that reproduce this config (non-default fields only)."""
        default = Config()
        out = {}
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if value != getattr(default, field.name) and value is not None:
                out[self.env_name(field.name)] = str(value)
        return out

    def describe(self) -> str:
        """One line per setting, for rank 0's log."""
        return "\n".join(f"{self.env_name(f.name)}={getattr(self, f.name)}" for f in dataclasses.fields(self))


#: field -> (lowest, highest, lowest excluded, unit) of every numeric setting. The highs are far
#: beyond any use and keep each value inside what its consumer accepts (a lock's timeout, a
#: bit vector sent every cycle, an allocation).
BOUNDS = {
    "elastic_max_np": (0, 1 << 24, False, " ranks"),
    "elastic_reset_limit": (0, 1 << 30, False, " resets"),
    "fusion_threshold": (0, float(1 << 40), False, " bytes"),
    "cycle_time": (0.0, 10_000.0, True, " ms"),
    "cache_capacity": (0, 65536, False, " entries"),
    "stall_check_time_seconds": (0.0, 30 * _DAY_S, False, " s"),
    "stall_shutdown_time_seconds": (0.0, 30 * _DAY_S, False, " s"),
    "start_timeout": (0.0, 30 * _DAY_S, True, " s"),
    "chunk_bytes": (0, float(1 << 30), False, " bytes"),
    "bucket_bytes": (0, float(1 << 40), False, " bytes"),
    "split_hosts": (0, 65536, False, " hosts"),
    "elastic_min_np": (0, 1 << 24, False, " ranks"),
    "elastic_join_timeout_seconds": (0.0, 30 * _DAY_S, True, " s"),
    "autotune_warmup_samples": (0, 1_000_000, False, " samples"),
    "autotune_steps_per_sample": (1, 1_000_000, False, " cycles"),
    "autotune_bayes_opt_max_samples": (1, 10_000, False, " samples"),
    "autotune_gaussian_process_noise": (0.0, 100.0, False, ""),
}


#: Horovod's variables that set a field: name -> ((field, value of the field's variable), ...),
#: the value ``None`` meaning "the Horovod variable's own text".
HOROVOD_TWINS = {
    # first: it wins over the stall times below, as in Horovod
    "HOROVOD_STALL_CHECK_DISABLE": (("stall_check_time_seconds", "0"), ("stall_shutdown_time_seconds", "0")),
    "HOROVOD_FUSION_THRESHOLD": (("fusion_threshold", None),),
    "HOROVOD_CYCLE_TIME": (("cycle_time", None),),
    "HOROVOD_CACHE_CAPACITY": (("cache_capacity", None),),
    "HOROVOD_TIMELINE": (("timeline", None),),
    "HOROVOD_STALL_CHECK_TIME_SECONDS": (("stall_check_time_seconds", None),),
    "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": (("stall_shutdown_time_seconds", None),),
    "HOROVOD_START_TIMEOUT": (("start_timeout", None),),
    "HOROVOD_ELASTIC_TIMEOUT": (("elastic_join_timeout_seconds", None),),
    "HOROVOD_LOG_LEVEL": (("log_level", None),),
    "HOROVOD_AUTOTUNE": (("autotune", None),),
    "HOROVOD_AUTOTUNE_LOG": (("autotune_log_file", None),),
    "HOROVOD_AUTOTUNE_WARMUP_SAMPLES": (("autotune_warmup_samples", None),),
    "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE": (("autotune_steps_per_sample", None),),
    "HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES": (("autotune_bayes_opt_max_samples", None),),
    "HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE": (("autotune_gaussian_process_noise", None),),
}
_THREE_PHASES = "blinkflow's collectives across hosts are always hierarchical (three phases)"
_NO_NCCL = "blinkflow does not use NCCL"
_LAUNCHER = "set by horovodrun for its own launch; blinkrun and mpirun set what blinkflow needs"
_BUILD = "a build-time choice of Horovod's; blinkflow picks the backend per tensor (BLINKFLOW_BACKEND)"
#: Horovod's variables no field reads, and what to do instead.
HOROVOD_WITHOUT_TWIN = {
    "HOROVOD_HIERARCHICAL_ALLREDUCE": _THREE_PHASES,
    "HOROVOD_HIERARCHICAL_ALLGATHER": _THREE_PHASES,
    "HOROVOD_TORUS_ALLREDUCE": _THREE_PHASES,
    "HOROVOD_TIMELINE_MARK_CYCLES": "submissions are negotiated at once, so there are no cycles to mark",
    "HOROVOD_MPI_THREADS_DISABLE": "blinkflow's background thread calls MPI, so MPI's thread support stays on",
    "HOROVOD_NUM_NCCL_STREAMS": _NO_NCCL,
    "HOROVOD_CCL_CACHE": "blinkflow does not use oneCCL",
    "HOROVOD_THREAD_AFFINITY": "the background thread runs where its rank is bound (blinkrun --binding-args)",
    "HOROVOD_GLOO_TIMEOUT_SECONDS": "no Gloo; BLINKFLOW_START_TIMEOUT and BLINKFLOW_STALL_SHUTDOWN_TIME_SECONDS "
                                    "bound the waits",
    "HOROVOD_GLOO_IFACE": "no Gloo; blinkrun --network-interface picks MPI's NIC",
    "HOROVOD_LOG_HIDE_TIME": "blinkflow's log lines carry no time (blinkrun --prefix-output-with-timestamp "
                             "stamps every line)",
    "HOROVOD_CONTROLLER": "blinkflow's controller is always MPI",
    "HOROVOD_CPU_OPERATIONS": _BUILD,
    "HOROVOD_GPU_OPERATIONS": _BUILD,
    "HOROVOD_GPU_ALLREDUCE": _BUILD,
    "HOROVOD_GPU_ALLGATHER": _BUILD,
    "HOROVOD_GPU_BROADCAST": _BUILD,
    "HOROVOD_GPU_ALLTOALL": _BUILD,
    "HOROVOD_GPU_REDUCESCATTER": _BUILD,
    "HOROVOD_BATCH_D2D_MEMCOPIES": "the cuda backend packs a fused buffer with one kernel already",
    "HOROVOD_DISABLE_GROUP_FUSION": "grouped collectives fuse like the others (BLINKFLOW_FUSION_THRESHOLD=0 "
                                    "turns fusion off)",
    "HOROVOD_DISABLE_NVTX_RANGES": "blinkflow emits no NVTX ranges",
    "HOROVOD_ENABLE_XLA_OPS": "blinkflow's collectives run inside XLA-compiled steps without it",
    "HOROVOD_ENABLE_ASYNC_COMPLETION": "a setting of Horovod's GPU operations; blinkflow's have no such switch",
    "HOROVOD_ADASUM_MPI_CHUNK_SIZE": "a setting of Horovod's Adasum over MPI; blinkflow has no such setting",
    "HOROVOD_DYNAMIC_PROCESS_SETS": "process sets can always be added",
    "HOROVOD_ELASTIC": "set by horovodrun for its elastic workers; blinkrun's --min-np or --host-discovery-script "
                       "makes a job elastic",
    **{name: _LAUNCHER for name in ("HOROVOD_RANK", "HOROVOD_SIZE", "HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE",
                                    "HOROVOD_CROSS_RANK", "HOROVOD_CROSS_SIZE", "HOROVOD_HOSTNAME",
                                    "HOROVOD_GLOO_RENDEZVOUS_ADDR", "HOROVOD_GLOO_RENDEZVOUS_PORT",
                                    "HOROVOD_SECRET_KEY")},
}
HOROVOD_PREFIX = "HOROVOD_"


def horovod_settings(environ: Mapping[str, str]) -> dict:
    """field -> (Horovod variable, text) for every field a set ``HOROVOD_*`` twin gives a value."""
    out = {}
    for name, fields in HOROVOD_TWINS.items():
        raw = environ.get(name, "").strip()
        if not raw:
            continue
        if name == "HOROVOD_STALL_CHECK_DISABLE" and not parse_switch(raw, name):
            continue
        if name == "HOROVOD_TIMELINE" and raw.upper() == "DYNAMIC":
            continue   # Horovod's "start it later with start_timeline()": no file until then
        for field, value in fields:
            out.setdefault(field, (name, raw if value is None else value))
    return out


def unknown_variables(environ: Optional[Mapping[str, str]] = None) -> List[str]:
    """One line per variable that does not do what its name suggests: a ``BLINKFLOW_*`` variable
    that no setting reads (a misspelling is silently ignored otherwise), naming the closest
    setting; a ``HOROVOD_*`` twin that its ``BLINKFLOW_*`` twin overrides; a ``HOROVOD_*``
    variable blinkflow has no counterpart for, with what to use instead."""
    environ = os.environ if environ is None else environ
    return _blinkflow_unknown(environ) + _horovod_notes(environ)


def _horovod_notes(environ: Mapping[str, str]) -> List[str]:
    lines = []
    for name in sorted(n for n in environ if n.startswith(HOROVOD_PREFIX) and environ[n] != ""):
        if name in HOROVOD_TWINS:
            won = [Config.env_name(f) for f, _ in HOROVOD_TWINS[name] if environ.get(Config.env_name(f))]
            if won:
                lines.append(f"{name}={environ[name]} is ignored: {', '.join(won)} is set and wins")
        elif name in HOROVOD_WITHOUT_TWIN:
            lines.append(f"{name} has no effect in blinkflow: {HOROVOD_WITHOUT_TWIN[name]}")
        else:
            lines.append(f"{name} is not a Horovod setting blinkflow reads; its settings are "
                         f"{', '.join(sorted(HOROVOD_TWINS))}")
    return lines


def _blinkflow_unknown(environ: Mapping[str, str]) -> List[str]:
    known = [Config.env_name(f.name) for f in dataclasses.fields(Config)]
    lines = []
    for name in sorted(environ):
        if name.startswith(ENV_PREFIX) and name not in known:
            close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]}?" if close else f"; the settings are {', '.join(known)}"
            lines.append(f"{name} is not a blinkflow setting and is ignored{hint}")
    return lines


def _finite(value) -> bool:
    """Whether ``value`` is a finite number; an int of any size is (``math.isfinite`` raises
    OverflowError on one beyond a float's range)."""
    return isinstance(value, int) or math.isfinite(value)


#: Fields holding bytes: their text may carry a unit (``64MiB``); see :mod:`.setting_text`.
SIZE_FIELDS = ("fusion_threshold", "chunk_bytes", "bucket_bytes")
#: Fields that are switches (0 or 1): their text is a switch word (``1``, ``true``, ``off``...).
SWITCH_FIELDS = ("cpu_single_copy", "pin_gpus", "tf_memory_growth", "check_schedules", "autotune", "elastic_joining",
                 "link_probe")


def _parse(field: dataclasses.Field, raw: str, name: str):
    """The value of ``field`` that ``raw`` says exactly, read by :mod:`.setting_text` (the one
    reader of switches, counts, sizes and numbers); ConfigError naming ``name`` otherwise."""
    kind = field.type if isinstance(field.type, str) else getattr(field.type, "__name__", str(field.type))
    if field.name in SWITCH_FIELDS:
        return int(parse_switch(raw, name))
    if field.name in SIZE_FIELDS:
        return parse_bytes(raw, name)
    if kind == "int":
        return parse_count(raw, name)
    if kind == "float":
        return parse_number(raw, name)
    if field.name in ("backend", "log_level", "algorithm"):
        return raw.lower()
    return raw


def cache_dir(environ: Optional[Mapping[str, str]] = None) -> str:
    """blinkflow's folder of built libraries: ``$XDG_CACHE_HOME/blinkflow``, or
    ``~/.cache/blinkflow`` where ``XDG_CACHE_HOME`` is unset or not an absolute path (the XDG
    Base Directory Specification ignores a relative one)."""
    environ = os.environ if environ is None else environ
    base = environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(base):
        base = os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "blinkflow")


_CONFIG: Optional[Config] = None


def get_config() -> Config:
    """The process-wide Config, read from the environment on first use."""
    global _CONFIG
    if _CONFIG is None:
        _CONFIG = Config.from_env()
    return _CONFIG


def forget_config() -> None:
    """Read the environment again at the next :func:`get_config`: a rank an elastic job started
    receives the job's settings from its rank 0 after it began (``blinkflow.elastic.grow``)."""
    global _CONFIG
    _CONFIG = None


#: Open MPI settings blinkflow needs before MPI starts; a value the user set wins.
#: ``osc=^ucx``: blinkflow's one-sided windows are shared memory only, and Open MPI 5's UCX
#: one-sided component prints a spurious error for them on machines without RDMA hardware.
#: ``btl=^ofi``: the libfabric transport serves one-sided RDMA only (``btl_ofi_mode`` 0), which
#: those windows never use, and on a machine without a libfabric NIC it sleeps a whole second
#: in every process's ``MPI_Init`` (a job's start, and each rank an elastic job spawns); MPI's
#: messages keep their transports (ob1 over shared memory and TCP, UCX, or libfabric's mtl).
MPI_DEFAULTS = {"OMPI_MCA_osc": "^ucx", "OMPI_MCA_btl": "^ofi"}


def apply_mpi_defaults(environ=None) -> None:
    """Put :data:`MPI_DEFAULTS` into the environment unless already set. Call before mpi4py
    initialises MPI (``blinkflow.init`` does); once MPI is running it has no effect."""
    environ = os.environ if environ is None else environ
    for key, value in MPI_DEFAULTS.items():
        environ.setdefault(key, value)


#: Variables Open MPI's launcher sets in every process it starts.
OPEN_MPI_RANK_VARS = ("OMPI_COMM_WORLD_RANK", "PMIX_RANK")


def apply_mpi_defaults_in_a_rank(environ=None) -> None:
    """:func:`apply_mpi_defaults` in a process Open MPI's launcher started. ``import blinkflow``
    calls it, so a script run by a plain ``mpirun`` that imports blinkflow and then mpi4py (whose
    import starts MPI) gets them in time; other processes' environments are left alone. A script
    that starts MPI before it imports blinkflow is past helping: Open MPI fixes its components
    when MPI starts (``OMPI_MCA_osc=^ucx`` in the job's environment, or blinkrun, sets it)."""
    environ = os.environ if environ is None else environ
    if any(name in environ for name in OPEN_MPI_RANK_VARS):
        apply_mpi_defaults(environ)
