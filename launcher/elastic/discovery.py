"""Host discovery for elastic jobs: Horovod's ``--host-discovery-script`` contract and its
blacklist with cooldown.

The script prints one available host per line, ``host`` or ``host:slots`` (a line without slots
gets ``--slots-per-host``), read by the one reader of ``-H`` entries (``hosts.parse_host_entry``):
a host name is checked as a host name, so a line such as ``-oProxyCommand=...`` is refused. It is run again every second; a run that fails (non-zero exit, a
timeout, a line that is not ``host[:slots]``) is one line on blinkrun's stderr and changes
nothing: the hosts of the last good run stay. Only the first run must succeed (Horovod's rule),
because the job starts on what it finds.

A host whose rank failed is blacklisted: no new rank goes there. Without
``--blacklist-cooldown-range`` it stays so for the rest of the job; with ``MIN MAX`` its n-th
blacklisting lasts ``MIN * 2**n + U(0, MIN)`` seconds, clamped to [MIN, MAX], after which the
host is offered again (Horovod's cooldown semantics).
"""
from __future__ import annotations

import dataclasses
import random
import subprocess
from typing import Callable, Dict, List, Optional, Tuple

from blinkflow.errors import ConfigError

from ..job.hosts import HostSpecError, parse_host_entry

SCRIPT_TIMEOUT_S = 30.0


class DiscoveryError(ConfigError):
    """A run of the host discovery script failed or printed something that is not host lines."""


def parse_discovery_output(text: str, default_slots: Optional[int], script: str = "discovery script") -> Dict[str, int]:
    """``"a:4\\nb\\n"`` -> ``{"a": 4, "b": default_slots}``, in the order printed; blank lines are
    skipped; a repeated host keeps its last line. DiscoveryError names the first bad line."""
    hosts: Dict[str, int] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        try:
            host = parse_host_entry(line, f"{script} line {number}: {line[:80]!r}", default_slots)
        except HostSpecError as e:
            hint = " or pass --slots-per-host N" if default_slots is None and "gives no slots" in str(e) else ""
            raise DiscoveryError(f"{e}{hint}") from None
        hosts.pop(host.name, None)
        hosts[host.name] = host.slots
    return hosts


def run_discovery_script(script: str, default_slots: Optional[int], timeout: float = SCRIPT_TIMEOUT_S) -> Dict[str, int]:
    """One run of ``script`` (a shell command line, as Horovod runs it); its parsed hosts."""
    try:
        done = subprocess.run(script, shell=True, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise DiscoveryError(f"host discovery script {script!r} ran past {timeout:g} s") from None
    if done.returncode != 0:
        said = done.stderr.decode(errors="replace").strip().splitlines()
        why = f": {said[-1][:200]}" if said else ""
        raise DiscoveryError(f"host discovery script {script!r} exited with status {done.returncode}{why}")
    return parse_discovery_output(done.stdout.decode(errors="replace"), default_slots, f"host discovery script {script!r}")


@dataclasses.dataclass
class HostCooldown:
    """One host's blacklist state (Horovod's ``HostState``)."""

    cooldown_range: Optional[Tuple[int, int]] = None
    blacklisted: bool = False
    times_blacklisted: int = 0
    until: float = 0.0

    def blacklist(self, now: float, uniform: Callable[[], float] = random.random) -> None:
        self.blacklisted = True
        if self.cooldown_range is None or self.until > now:
            return
        low, high = self.cooldown_range
        self.times_blacklisted += 1
        delay = low * (1 << self.times_blacklisted) + uniform() * low
        self.until = now + max(low, min(high, delay))

    def available(self, now: float) -> bool:
        """Whether a new rank may go to this host; a host whose cooldown ended is whitelisted."""
        if self.blacklisted and self.until and now >= self.until:
            self.blacklisted, self.until = False, 0.0
        return not self.blacklisted


class HostBook:
    """The hosts discovery offers, less those blacklisted; what the driver places ranks on."""

    def __init__(self, cooldown_range: Optional[Tuple[int, int]] = None):
        self.cooldown_range = cooldown_range
        self.discovered: Dict[str, int] = {}
        self._states: Dict[str, HostCooldown] = {}

    def update(self, discovered: Dict[str, int]) -> None:
        self.discovered = dict(discovered)

    def blacklist(self, host: str, now: float) -> None:
        self._state(host).blacklist(now)

    def is_blacklisted(self, host: str, now: float) -> bool:
        return not self._state(host).available(now)

    def next_release(self, now: float) -> Optional[float]:
        """When the soonest cooldown still running ends (None: none is)."""
        return min((s.until for s in self._states.values() if s.blacklisted and s.until > now), default=None)

    def available(self, now: float) -> List[Tuple[str, int]]:
        """``[(host, slots)]`` in discovery order, blacklisted hosts left out."""
        return [(h, n) for h, n in self.discovered.items() if self._state(h).available(now)]

    def _state(self, host: str) -> HostCooldown:
        if host not in self._states:
            self._states[host] = HostCooldown(self.cooldown_range)
        return self._states[host]


__all__ = ["DiscoveryError", "HostBook", "HostCooldown", "parse_discovery_output", "run_discovery_script"]
