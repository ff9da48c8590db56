"""The one table of ``blinkrun`` flags that set runtime settings (docs/configuration.md).

Each flag names the :class:`blinkflow.config.Config` field it sets; the variable name derives
from the field (``Config.env_name``), so nothing here spells a ``BLINKFLOW_*`` name by hand.
Precedence, written down once: a flag given on the command line wins over the variable already
in blinkrun's environment, which wins over the Config default.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Dict, Mapping, Optional

import click

from blinkflow.config import BACKENDS, LOG_LEVELS, Config, ENV_PREFIX
from blinkflow.errors import ConfigError
from blinkflow.setting_text import COUNT, MEBIBYTES, NUMBER, SWITCH


@dataclasses.dataclass(frozen=True)
class SettingFlag:
    flag: str                      # "--fusion-threshold-mb"
    field: str                     # Config field it sets
    type: object                   # click parameter type (blinkflow.setting_text's, which reads the
                                   # setting's text as the environment and the config file do)
    help: str
    to_env: Callable[[object], str] = str   # flag value -> variable text in the field's unit
    negation: str = ""             # "--no-autotune": the flag is a switch, this spelling turns it off

    @property
    def param(self) -> str:
        """click's Python name for the flag (``fusion_threshold_mb``)."""
        return self.flag.lstrip("-").replace("-", "_")

    @property
    def env_name(self) -> str:
        return Config.env_name(self.field)


def _switch(on) -> str:
    return "1" if on else "0"


SETTING_FLAGS = (
    SettingFlag("--fusion-threshold-mb", "fusion_threshold", MEBIBYTES,
                "Fuse up to this many MiB of tensors into one collective."),
    SettingFlag("--cycle-time-ms", "cycle_time", NUMBER, "Milliseconds between the negotiation rounds of an idle runtime."),
    SettingFlag("--cache-capacity", "cache_capacity", COUNT, "Entries of the response cache (0 disables it)."),
    SettingFlag("--timeline-filename", "timeline", click.STRING, "Write a Chrome-trace timeline to this file."),
    SettingFlag("--stall-check-warning-time-seconds", "stall_check_time_seconds", NUMBER,
                "Warn about tensors missing on some ranks after this long (0 disables)."),
    SettingFlag("--stall-check-shutdown-time-seconds", "stall_shutdown_time_seconds", NUMBER,
                "Stop the job after a stall this long (0 = never)."),
    SettingFlag("--start-timeout", "start_timeout", NUMBER,
                "Seconds for every rank to start and reach init() (and again for init's set-up); "
                "past it the job stops, naming the ranks missing."),
    SettingFlag("--topology", "topology", click.STRING, "Topology preset or file (skips probing)."),
    SettingFlag("--backend", "backend", click.Choice(BACKENDS, case_sensitive=False), "Collective backend."),
    SettingFlag("--log-level", "log_level", click.Choice(LOG_LEVELS, case_sensitive=False), "Runtime log level."),
    SettingFlag("--autotune", "autotune", SWITCH, "Search the fusion threshold and cycle time while the job "
                "runs and keep the best.", _switch, negation="--no-autotune"),
    SettingFlag("--autotune-log-file", "autotune_log_file", click.STRING, "CSV file of every autotune sample."),
    SettingFlag("--autotune-warmup-samples", "autotune_warmup_samples", COUNT,
                "Autotune samples discarded before scoring starts."),
    SettingFlag("--autotune-steps-per-sample", "autotune_steps_per_sample", COUNT,
                "Cycles that ran all-reduces per autotune sample."),
    SettingFlag("--autotune-bayes-opt-max-samples", "autotune_bayes_opt_max_samples", COUNT,
                "Scored autotune samples before the best setting is kept."),
    SettingFlag("--autotune-gaussian-process-noise", "autotune_gaussian_process_noise", NUMBER,
                "Observation noise of autotune's Gaussian process."),
)

_FIELDS = {f.name for f in dataclasses.fields(Config)}
assert all(s.field in _FIELDS for s in SETTING_FLAGS), "SETTING_FLAGS names a field Config lacks"


def settings_env(flag_values: Mapping[str, Optional[object]], environ: Mapping[str, str]) -> Dict[str, str]:
    """The ``BLINKFLOW_*`` variables every rank gets: those in ``environ``, overridden by flags given.

    ``flag_values`` maps click parameter names to values (None = flag not given). The result is
    validated by building a Config from it and ``environ``'s ``HOROVOD_*`` twins, so a bad value
    fails here with ConfigError, before anything is launched.
    """
    env = {k: v for k, v in environ.items() if k.startswith(ENV_PREFIX)}
    for setting in SETTING_FLAGS:
        value = flag_values.get(setting.param)
        if value is not None:
            env[setting.env_name] = setting.to_env(value)
    Config.from_env(dict(environ, **env))  # raises ConfigError naming the variable
    return env


__all__ = ["SETTING_FLAGS", "SettingFlag", "settings_env", "ConfigError"]
