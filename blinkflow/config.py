"""The one configuration object: every ``BLINKFLOW_*`` variable is read here, once.

Precedence is written down once: a ``blinkrun`` flag sets the variable for every rank, so
CLI > environment > the defaults below. No other module reads ``os.environ`` for blinkflow
settings (STYLE habit 9); they receive a :class:`Config`.

The environment name of a field is ``BLINKFLOW_`` + the field name upper-cased, following
mpi4py's ``Rc``.
"""
from __future__ import annotations

import dataclasses
import math
import os
from typing import Mapping, Optional

from .errors import ConfigError

ENV_PREFIX = "BLINKFLOW_"
#: Settings that must be equal on every rank (checked at init).
AGREED_FIELDS = ("fusion_threshold", "cache_capacity", "backend", "chunk_bytes", "cpu_single_copy", "split_hosts",
                 "bucket_bytes")
BACKENDS = ("auto", "cpu", "cuda")
LOG_LEVELS = ("trace", "debug", "info", "warning", "error", "fatal")


@dataclasses.dataclass(frozen=True)
class Config:
    """Runtime settings. Field ``x`` is read from ``BLINKFLOW_X``."""

    fusion_threshold: int = 64 * 1024 * 1024
    """Bytes of tensors fused into one collective (Horovod's default, 64 MiB)."""
    cycle_time: float = 20.0
    """Milliseconds between the negotiation rounds of a runtime with nothing to negotiate (stall
    checks, join and shutdown travel on them). Submitted tensors are negotiated at once, so unlike
    Horovod's cycle this is no latency; short cycles only cost idle CPU."""
    cache_capacity: int = 1024
    """Entries of the response cache (0 disables the fast path)."""
    timeline: Optional[str] = None
    """Path of a Chrome-trace JSON timeline, or None."""
    stall_check_time_seconds: float = 60.0
    """Warn about tensors some ranks have not submitted after this long (0 disables)."""
    stall_shutdown_time_seconds: float = 0.0
    """Shut the job down after a stall this long (0 = never)."""
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
    bucket_bytes: int = 25 * 1024 * 1024
    """Bytes of gradients per bucket: DistributedOptimizer and DistributedGradientTape submit each
    bucket as soon as backprop has produced it, last layer first, so its all-reduce overlaps the
    rest of backprop (PyTorch DDP's ``bucket_cap_mb``, and its default); 0 = one bucket."""
    split_hosts: int = 0
    """For tests of the multi-host path on one machine: treat the job's ranks as this many hosts
    (consecutive blocks of ranks, no shared memory between blocks). 0 = real host names."""

    def __post_init__(self):
        if self.fusion_threshold < 0:
            raise ConfigError(f"{ENV_PREFIX}FUSION_THRESHOLD must be >= 0 bytes, got {self.fusion_threshold}")
        if self.cycle_time <= 0:
            raise ConfigError(f"{ENV_PREFIX}CYCLE_TIME must be > 0 ms, got {self.cycle_time}")
        if self.cache_capacity < 0:
            raise ConfigError(f"{ENV_PREFIX}CACHE_CAPACITY must be >= 0, got {self.cache_capacity}")
        if self.stall_check_time_seconds < 0 or self.stall_shutdown_time_seconds < 0:
            raise ConfigError("stall check times must be >= 0 seconds")
        if self.backend not in BACKENDS:
            raise ConfigError(f"{ENV_PREFIX}BACKEND must be one of {', '.join(BACKENDS)}, got {self.backend!r}")
        if self.log_level not in LOG_LEVELS:
            raise ConfigError(f"{ENV_PREFIX}LOG_LEVEL must be one of {', '.join(LOG_LEVELS)}, got {self.log_level!r}")
        if self.split_hosts < 0:
            raise ConfigError(f"{ENV_PREFIX}SPLIT_HOSTS must be >= 0, got {self.split_hosts}")
        if self.cpu_single_copy not in (0, 1):
            raise ConfigError(f"{ENV_PREFIX}CPU_SINGLE_COPY must be 0 or 1, got {self.cpu_single_copy}")
        if self.chunk_bytes < 0:
            raise ConfigError(f"{ENV_PREFIX}CHUNK_BYTES must be >= 0, got {self.chunk_bytes}")
        if self.bucket_bytes < 0:
            raise ConfigError(f"{ENV_PREFIX}BUCKET_BYTES must be >= 0, got {self.bucket_bytes}")

    def agreed(self) -> tuple:
        """The settings every rank of a job must share, as ((field, value), ...): ranks that
        disagree would fuse, cache or choose data paths differently and wait for each other."""
        return tuple((name, getattr(self, name)) for name in AGREED_FIELDS)

    @staticmethod
    def env_name(field: str) -> str:
        return ENV_PREFIX + field.upper()

    @classmethod
    def from_env(cls, environ: Optional[Mapping[str, str]] = None) -> "Config":
        """Build a Config from ``environ`` (default ``os.environ``); unknown values raise ConfigError."""
        environ = os.environ if environ is None else environ
        values = {}
        for field in dataclasses.fields(cls):
            raw = environ.get(cls.env_name(field.name))
            if raw is None or raw == "":
                continue
            values[field.name] = _parse(field, raw.strip())
        return cls(**values)

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


def _parse(field: dataclasses.Field, raw: str):
    name = Config.env_name(field.name)
    kind = field.type if isinstance(field.type, str) else getattr(field.type, "__name__", str(field.type))
    try:
        if kind == "int":
            return int(float(raw)) if raw.replace(".", "", 1).isdigit() else int(raw)
        if kind == "float":
            value = float(raw)
            if not math.isfinite(value):  # nan slips through every "< 0" check
                raise OverflowError
            return value
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not a number") from None
    except OverflowError:
        raise ConfigError(f"{name}={raw!r} is not a finite number") from None
    if field.name in ("backend", "log_level"):
        return raw.lower()
    return raw


_CONFIG: Optional[Config] = None


def get_config() -> Config:
    """The process-wide Config, read from the environment on first use."""
    global _CONFIG
    if _CONFIG is None:
        _CONFIG = Config.from_env()
    return _CONFIG


def set_config(config: Optional[Config]) -> None:
    """Replace the process-wide Config (tests, or ``init`` re-reading after a change)."""
    global _CONFIG
    _CONFIG = config


#: Open MPI settings blinkflow needs before MPI starts; a value the user set wins.
#: ``osc=^ucx``: blinkflow's one-sided windows are shared memory only, and Open MPI 5's UCX
#: one-sided component prints a spurious error for them on machines without RDMA hardware.
MPI_DEFAULTS = {"OMPI_MCA_osc": "^ucx"}


def apply_mpi_defaults(environ=None) -> None:
    """Put :data:`MPI_DEFAULTS` into the environment unless already set. Call before mpi4py
    initialises MPI (``blinkflow.init`` does); once MPI is running it has no effect."""
    environ = os.environ if environ is None else environ
    for key, value in MPI_DEFAULTS.items():
        environ.setdefault(key, value)
