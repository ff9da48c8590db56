"""The ranks' ``BLINKFLOW_*`` variables from ``blinkrun``'s setting flags (the SETTING rows of
table.py, docs/configuration.md).

Each such flag names the :class:`blinkflow.config.Config` field it sets; the variable name derives
from the field (``Config.env_name``), so nothing here spells a ``BLINKFLOW_*`` name by hand.
Precedence, written down once: a flag given on the command line wins over the variable already
in blinkrun's environment, which wins over the Config default.
"""
from __future__ import annotations

from typing import Dict, Mapping, Optional

from blinkflow.config import Config, ENV_PREFIX
from blinkflow.errors import ConfigError

from .table import SETTING_FLAGS


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


__all__ = ["SETTING_FLAGS", "settings_env", "ConfigError"]
