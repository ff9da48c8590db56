"""Byte sizes as people write them, read and printed one way by every blinkflow command.

``KB``, ``MB``, ``GB``, ``TB`` are powers of 1000 (SI, as disk and network figures are quoted);
``KiB``, ``MiB``, ``GiB`` and the bare letters ``K``, ``M``, ``G`` (nccl-tests' ``-b 8M``) are
powers of 1024; a bare number is bytes. Units are case-insensitive. So ``256MB`` is 256,000,000
bytes and ``256MiB`` (or ``256M``) is 268,435,456 in ``blinkrun simulate`` and in every
``python -m blinkflow.bench`` suite alike.

>>> parse_size("256MB"), parse_size("256MiB"), parse_size("1.5KiB"), parse_size("4096")
(256000000, 268435456, 1536, 4096)
>>> format_size(256 * 2**20), format_size(256 * 10**6), format_size(100)
('256MiB', '256MB', '100B')
"""
from __future__ import annotations

import re
from fractions import Fraction

import click

from .errors import ConfigError

UNITS = {"": 1, "b": 1,
         "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
         "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
         "k": 2**10, "m": 2**20, "g": 2**30}

# Units a size is printed in, binary first so that a tie in length prints ``1000KiB`` not ``1024KB``.
_PRINTED = [(u, UNITS[u.lower()]) for u in ("TiB", "GiB", "MiB", "KiB", "TB", "GB", "MB", "KB", "B")]

SIZE_HELP = "KB/MB/GB are powers of 1000, KiB/MiB/GiB (or K/M/G) powers of 1024, a bare number is bytes"

_SIZE = re.compile(r"\s*([0-9]+(?:\.[0-9]*)?)\s*([A-Za-z]*)\s*")


def parse_size(text: str, where: str = "size") -> int:
    """The number of bytes ``text`` names; :class:`ConfigError` naming ``where`` (e.g. the flag,
    or ``""`` where the caller names it) when it names none.

    A fraction is allowed only where it comes to whole bytes (``1.5KiB``, not ``1.0001KB``); zero
    and negative sizes are refused, as no buffer has them.
    """
    named = f"{where} {text!r}".strip()
    match = _SIZE.fullmatch(text or "")
    if not match or match.group(2).lower() not in UNITS:
        raise ConfigError(f"{named}: write a byte size such as 4096, 256MB or 1GiB ({SIZE_HELP})")
    exact = Fraction(match.group(1)) * UNITS[match.group(2).lower()]
    if exact.denominator != 1:
        raise ConfigError(f"{named} is not a whole number of bytes ({float(exact):g})")
    if exact <= 0:
        raise ConfigError(f"{named}: the size must be positive")
    return int(exact)


def parse_sizes(text: str, where: str = "sizes") -> list:
    """A comma-separated list of sizes, e.g. ``4KiB,1MiB,16MiB``, in bytes."""
    sizes = [parse_size(part, where) for part in (text or "").split(",") if part.strip()]
    if not sizes:
        raise ConfigError(f"{where} {text!r}: give at least one size, e.g. 4KiB,16MiB".strip())
    return sizes


def format_size(nbytes: float) -> str:
    """The shortest exact spelling (``16MiB``, ``256MB``, ``100B``), else three significant digits
    in SI units (``1.23MB``), so the text of an exact size parses back to the same bytes."""
    exact = [(len(str(int(nbytes) // scale)), unit_order, f"{int(nbytes) // scale}{unit}")
             for unit_order, (unit, scale) in enumerate(_PRINTED)
             if nbytes >= scale and nbytes == int(nbytes) and int(nbytes) % scale == 0]
    if exact:
        return min(exact)[2]
    for unit, scale in _PRINTED:
        if unit.endswith("B") and not unit.endswith("iB") and nbytes >= scale:
            return f"{nbytes / scale:.3g}{unit}"
    return f"{nbytes:.3g}B"


class ByteSize(click.ParamType):
    """A click parameter holding one size (``many=False``) or a comma-separated list of them."""

    def __init__(self, many: bool = False):
        self.many = many
        self.name = "sizes" if many else "size"

    def convert(self, value, param, ctx):
        if isinstance(value, (int, list)):
            return value
        try:  # click's message names the parameter already
            return parse_sizes(value, "") if self.many else parse_size(value, "")
        except ConfigError as error:
            self.fail(str(error), param, ctx)
