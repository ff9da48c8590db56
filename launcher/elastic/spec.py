"""An elastic job's bounds from ``blinkrun``'s elastic flags (``horovodrun``'s "elastic arguments"
and ``--host-discovery-script``; their spellings, types and defaults are rows of flags/table.py).

A job is elastic when ``--host-discovery-script`` or ``--min-np`` is given (Horovod's rule);
without them it is fixed-size exactly as before. An elastic job runs under ULFM
(``mpirun --with-ft ulfm``) so that a lost rank does not end it, and its ranks learn the bounds
from ``BLINKFLOW_ELASTIC_*`` (the Config fields named here).
"""
from __future__ import annotations

import dataclasses
from typing import Dict, Mapping, Optional, Tuple

from blinkflow.config import Config
from blinkflow.errors import ConfigError

from ..flags.table import ELASTIC_FLAGS, ELASTIC_TIMEOUT_DEFAULT_S

#: Horovod's bounds on a blacklisted host's cooldown (horovod/runner/elastic/discovery.py).
COOLDOWN_LOWEST_S = 1
COOLDOWN_HIGHEST_S = 3600


@dataclasses.dataclass(frozen=True)
class ElasticSpec:
    """An elastic job's bounds, decided from the command line."""

    min_np: int
    max_np: Optional[int] = None
    slots_per_host: Optional[int] = None
    host_discovery_script: Optional[str] = None
    elastic_timeout: int = ELASTIC_TIMEOUT_DEFAULT_S
    reset_limit: Optional[int] = None
    blacklist_cooldown_range: Optional[Tuple[int, int]] = None

    def settings_env(self, hosts_file: Optional[str]) -> Dict[str, str]:
        """The ``BLINKFLOW_ELASTIC_*`` variables every rank gets (``--elastic-timeout``: how long
        a new rank may take to start, blinkrun's bound, and to call ``init()``, the ranks')."""
        env = {Config.env_name("elastic_min_np"): str(self.min_np),
               Config.env_name("elastic_max_np"): str(self.max_np or 0),
               Config.env_name("elastic_reset_limit"): str(self.reset_limit or 0),
               Config.env_name("elastic_join_timeout_seconds"): str(self.elastic_timeout)}
        if hosts_file:
            env[Config.env_name("elastic_hosts_file")] = hosts_file
        return env


def elastic_spec(values: Mapping[str, object], np: Optional[int]) -> Optional[ElasticSpec]:
    """The job's :class:`ElasticSpec`, or None for a fixed-size job; ConfigError on bounds that
    contradict each other. ``values`` maps each flag's ``param`` to its value (None: not given)."""
    given = {f.param: values.get(f.param) for f in ELASTIC_FLAGS}
    if given["host_discovery_script"] is None and given["min_np"] is None:
        others = [f.flag for f in ELASTIC_FLAGS if given[f.param] is not None]
        if others:
            raise ConfigError(f"{', '.join(others)} only apply to an elastic job; add --min-np N or "
                              "--host-discovery-script SCRIPT")
        return None
    min_np = given["min_np"] or np
    if min_np is None:
        raise ConfigError("an elastic job needs -np N (the ranks to start with) or --min-np N")
    max_np = given["max_np"]
    start = np or min_np
    if start < min_np:
        raise ConfigError(f"-np {start} is below --min-np {min_np}; start with at least the fewest ranks")
    if max_np is not None and start > max_np:
        raise ConfigError(f"-np {start} is above --max-np {max_np}")
    cooldown = given["blacklist_cooldown_range"]
    if cooldown is not None:
        low, high = cooldown
        if low < COOLDOWN_LOWEST_S or high > COOLDOWN_HIGHEST_S or low > high:
            raise ConfigError(f"--blacklist-cooldown-range {low} {high}: expected MIN MAX with "
                              f"{COOLDOWN_LOWEST_S} <= MIN <= MAX <= {COOLDOWN_HIGHEST_S} seconds")
        cooldown = (int(low), int(high))
    timeout = given["elastic_timeout"]
    return ElasticSpec(min_np=min_np, max_np=max_np, slots_per_host=given["slots_per_host"],
                       host_discovery_script=given["host_discovery_script"],
                       elastic_timeout=ELASTIC_TIMEOUT_DEFAULT_S if timeout is None else timeout,
                       reset_limit=given["reset_limit"], blacklist_cooldown_range=cooldown)


__all__ = ["ELASTIC_FLAGS", "ElasticSpec", "elastic_spec"]
