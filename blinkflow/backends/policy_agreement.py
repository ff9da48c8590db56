"""Every rank must feed the call-shape policy the same inputs, or ranks would choose different
algorithms or chunks for one call and wait for each other forever. A backend compares them once,
at construction, in one collective: the settings the policy reads and the backend's
:class:`~blinkflow.schedule.policy.Capabilities` with the layout."""
from __future__ import annotations

from typing import Dict, List

from ..errors import ConfigError
from ..schedule.policy import Capabilities


def policy_inputs(config, caps: Capabilities, layout) -> tuple:
    """What the policy decides from, besides each call's own (agreed) collective and size."""
    settings = () if config is None else (("chunk_bytes", config.chunk_bytes), ("algorithm", config.algorithm))
    return settings + (("capabilities", caps.digest(layout)),)


def agree_policy(comm, config, caps: Capabilities, layout) -> None:
    """Collective over ``comm``: raise :class:`ConfigError` on every rank unless every rank's
    policy inputs are the same, naming the ranks of each variant."""
    every: List[tuple] = comm.allgather(policy_inputs(config, caps, layout))
    if all(x == every[0] for x in every):
        return
    groups: Dict[tuple, List[int]] = {}
    for r, x in enumerate(every):
        groups.setdefault(x, []).append(r)
    described = "; ".join(f"ranks {ranks}: {', '.join(f'{k}={v}' for k, v in inputs)}" for inputs, ranks in groups.items())
    raise ConfigError(f"ranks would choose collective algorithms differently ({described}). Set "
                      "BLINKFLOW_CHUNK_BYTES and BLINKFLOW_ALGORITHM alike on every rank, and run ranks whose "
                      "backend finds the same capabilities (cross-memory attach, L2 size, device executor, NCCL, receive arena).")
