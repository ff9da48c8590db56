"""Hosts of a job: ``-H host1:4,host2:4`` or a hostfile of ``host slots=N`` lines.

Parsing is pure and raises :class:`HostSpecError` naming the entry (or file and line) at fault,
so ``blinkrun`` can print one line and exit 2.
"""
from __future__ import annotations

import dataclasses
import re
from typing import List, Sequence

from blinkflow.errors import ConfigError


class HostSpecError(ConfigError):
    """A ``-H`` entry or a hostfile line cannot be understood."""


@dataclasses.dataclass(frozen=True)
class Host:
    name: str
    slots: int


_NAME = re.compile(r"^[A-Za-z0-9_.\-\[\]:]+$")   # host names, IPv4, bracketed IPv6


def _check(name: str, slots: int, where: str) -> Host:
    if not name or not _NAME.match(name):
        raise HostSpecError(f"{where}: {name!r} is not a host name")
    if slots < 1:
        raise HostSpecError(f"{where}: slots must be >= 1, got {slots}")
    return Host(name, slots)


def parse_hosts_arg(text: str) -> List[Host]:
    """``"a:4,b:2"`` -> [Host("a", 4), Host("b", 2)]; a host without ``:N`` has one slot."""
    hosts = []
    for entry in text.split(","):
        entry = entry.strip()
        if not entry:
            raise HostSpecError(f"-H {text!r}: empty host entry (expected host1:slots,host2:slots)")
        name, sep, slots = entry.rpartition(":") if ":" in entry and not entry.endswith("]") else (entry, "", "")
        if not sep:
            name, slots = entry, "1"
        if not re.fullmatch(r"[0-9]+", slots):
            raise HostSpecError(f"-H entry {entry!r}: slots must be a positive integer (expected host:slots)")
        hosts.append(_check(name, int(slots), f"-H entry {entry!r}"))
    return _no_duplicates(hosts, "-H")


_LINE = re.compile(r"^(?P<name>\S+)(?:\s+(?P<rest>.*))?$")
_SLOTS = re.compile(r"^slots\s*=\s*(?P<n>[0-9]+)$")


def parse_hostfile_text(text: str, filename: str = "<hostfile>") -> List[Host]:
    """Lines ``host [slots=N]``; ``#`` starts a comment; blank lines are skipped."""
    hosts = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        where = f"{filename}:{number}"
        match = _LINE.match(line)
        rest = (match.group("rest") or "").strip()
        slots = 1
        if rest:
            slot_match = _SLOTS.match(rest)
            if not slot_match:
                raise HostSpecError(f"{where}: expected 'host slots=N', got {raw.strip()!r}")
            slots = int(slot_match.group("n"))
        hosts.append(_check(match.group("name"), slots, where))
    if not hosts:
        raise HostSpecError(f"{filename}: no hosts listed")
    return _no_duplicates(hosts, filename)


def parse_hostfile(path: str) -> List[Host]:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise HostSpecError(f"cannot read hostfile {path}: {e.strerror}") from None
    except UnicodeDecodeError as e:
        line = e.object[:e.start].count(b"\n") + 1
        raise HostSpecError(f"hostfile {path}: line {line} is not UTF-8 text (byte {e.object[e.start]:#04x}); "
                            "a hostfile lists 'host slots=N' lines in plain text") from None
    return parse_hostfile_text(text, path)


def _no_duplicates(hosts: Sequence[Host], where: str) -> List[Host]:
    seen = set()
    for host in hosts:
        if host.name in seen:
            raise HostSpecError(f"{where}: host {host.name!r} is listed twice (give its total slots once)")
        seen.add(host.name)
    return list(hosts)


def total_slots(hosts: Sequence[Host]) -> int:
    return sum(h.slots for h in hosts)


def hosts_arg(hosts: Sequence[Host]) -> str:
    """The ``host:slots,...`` text both Open MPI (``--host``) and Hydra (``-hosts``) accept."""
    return ",".join(f"{h.name}:{h.slots}" for h in hosts)


def mpich_hostfile_text(hosts: Sequence[Host]) -> str:
    """Hydra's hostfile format (``host:slots`` per line)."""
    return "".join(f"{h.name}:{h.slots}\n" for h in hosts)
