"""Hosts of a job: ``-H host1:4,host2:4``, a hostfile of ``host slots=N`` lines, or the lines
``host[:slots]`` an elastic job's host discovery script prints.

Every host name, wherever it comes from, passes :func:`check_host_name`: a DNS host name
(RFC 1123 labels of letters, digits, ``-`` and ``_``, none starting or ending with ``-``), an
IPv4 address, or an IPv6 address (in brackets where slots may follow it: ``[fe80::1]:2``). A
name that starts with ``-`` would reach ``ssh`` (which Open MPI runs with the host name as an
argument) as an option such as ``-oProxyCommand=...``, so it is never a host name.
:func:`parse_host_entry` is the one reader of ``host[:slots]`` (``-H`` entries and discovery lines).

Parsing is pure and raises :class:`HostSpecError` naming the entry (or file and line) at fault,
so ``blinkrun`` can print one line and exit 2.
"""
from __future__ import annotations

import dataclasses
import ipaddress
import re
from typing import List, Optional, Sequence

from blinkflow.errors import ConfigError


class HostSpecError(ConfigError):
    """A ``-H`` entry or a hostfile line cannot be understood."""


@dataclasses.dataclass(frozen=True)
class Host:
    name: str
    slots: int


_LABEL = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?")
MAX_NAME = 253   # RFC 1035: the longest name DNS carries


def _is_ipv6(text: str) -> bool:
    try:
        ipaddress.IPv6Address(text)
    except ValueError:
        return False
    return True


def check_host_name(name: str, where: str) -> str:
    """``name`` when it is a host name, an IPv4 address or an IPv6 address (bare or in
    brackets); HostSpecError naming ``where`` and what a host name is otherwise."""
    if name.startswith("[") and name.endswith("]") and _is_ipv6(name[1:-1]):
        return name
    if ":" in name and _is_ipv6(name):
        return name
    if name and len(name) <= MAX_NAME and all(_LABEL.fullmatch(label) for label in name.split(".")):
        return name
    lead = " (a name starting with '-' would reach ssh as an option)" if name.startswith("-") else ""
    raise HostSpecError(f"{where}: {name[:80]!r} is not a host name{lead}; a host is a DNS name (letters, digits, "
                        "'-', '_' and dots; no label starts or ends with '-'), an IPv4 address or an IPv6 address "
                        "in brackets")


def _check(name: str, slots: int, where: str) -> Host:
    check_host_name(name, where)
    if slots < 1:
        raise HostSpecError(f"{where}: slots must be >= 1, got {slots}")
    return Host(name, slots)


def parse_host_entry(entry: str, where: str, default_slots: Optional[int] = 1) -> Host:
    """``host``, ``host:slots`` or ``[ipv6]:slots`` -> Host; a host without slots gets
    ``default_slots`` (None: it must give them). A bare IPv6 address cannot take slots (its
    last group would read as them): it must be in brackets."""
    if entry.startswith("["):
        name, close, rest = entry.partition("]")
        name += close
        if rest and not rest.startswith(":"):
            raise HostSpecError(f"{where}: expected [ipv6-address]:slots")
        slots = rest[1:] if rest else None
    elif entry.count(":") > 1:
        raise HostSpecError(f"{where}: write an IPv6 address in brackets, e.g. [fe80::1]:2")
    else:
        name, sep, slots = entry.partition(":")
        slots = slots if sep else None
    check_host_name(name, where)
    if slots is None:
        if default_slots is None:
            raise HostSpecError(f"{where}: gives no slots; write 'host:slots'")
        return _check(name, default_slots, where)
    if not re.fullmatch(r"[0-9]+", slots):
        raise HostSpecError(f"{where}: slots must be a positive integer (expected host:slots)")
    return _check(name, int(slots), where)


def parse_hosts_arg(text: str) -> List[Host]:
    """``"a:4,b:2"`` -> [Host("a", 4), Host("b", 2)]; a host without ``:N`` has one slot."""
    hosts = []
    for entry in text.split(","):
        entry = entry.strip()
        if not entry:
            raise HostSpecError(f"-H {text!r}: empty host entry (expected host1:slots,host2:slots)")
        hosts.append(parse_host_entry(entry, f"-H entry {entry!r}"))
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
