"""The one reader of a setting's text: every switch, count, byte size and number that blinkflow
is given, as an environment variable (``BLINKFLOW_*``, ``HOROVOD_*``), as a line of
horovodrun's ``--config-file`` or as a ``blinkrun`` flag, is read here, exactly or not at all.

A text that does not say one value exactly is refused with :class:`ConfigError` naming the
setting and what is accepted, never coerced: ``true`` is no number, ``2.9`` no count, ``1e3``
no count (a count is written in digits), ``maybe`` no switch.

* a switch: ``1``/``true``/``yes``/``on`` or ``0``/``false``/``no``/``off`` (any case);
* a count: a whole number in digits (``64``, ``-1``; the caller checks the bounds);
* a byte size: whole bytes in digits, or a size with a unit as :mod:`blinkflow.sizes` reads it
  (``64MiB``, ``1GB``, ``1.5KiB``) that comes to whole bytes; a caller may give a unit for bare
  numbers (``--fusion-threshold-mb 1.5`` is 1.5 MiB);
* a number: a finite decimal number (``2.5``, ``1e-3``).

>>> parse_count("64", "X"), parse_switch("Off", "X"), parse_bytes("1.5KiB", "X"), parse_number("2.5", "X")
(64, False, 1536, 2.5)
"""
from __future__ import annotations

import re
from fractions import Fraction

import click

from .errors import ConfigError
from .sizes import SIZE_HELP, UNITS

SWITCH_WORDS = {"1": True, "true": True, "yes": True, "on": True,
                "0": False, "false": False, "no": False, "off": False}
SWITCH_HELP = "1, true, yes or on to turn it on; 0, false, no or off to turn it off"

#: Characters of a numeric text: every bound fits in far fewer, and Python's int() of a longer
#: text costs quadratic time (or refuses beyond 4300 digits with another message).
MAX_NUMBER_CHARS = 64

_WHOLE = re.compile(r"[+-]?[0-9]+")
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_NOT_FINITE = re.compile(r"[+-]?(?:nan|inf|infinity)", re.IGNORECASE)
_SIZE = re.compile(r"(?P<sign>[+-]?)(?P<number>[0-9]+(?:\.[0-9]*)?)\s*(?P<unit>[A-Za-z]*)")


def _named(name: str, text: str) -> str:
    return f"{name}={text!r}" if name else repr(text)


def _short(text: str, name: str) -> str:
    if not isinstance(text, str):
        raise ConfigError(f"{name or 'the setting'}: expected text, got {type(text).__name__} {text!r}")
    text = text.strip()
    if len(text) > MAX_NUMBER_CHARS:
        raise ConfigError(f"{name or 'the setting'} is a {len(text)}-character value ({text[:20]}...); at most "
                          f"{MAX_NUMBER_CHARS} characters are expected")
    return text


def parse_switch(text: str, name: str = "") -> bool:
    """On or off: :data:`SWITCH_WORDS`, any case."""
    value = SWITCH_WORDS.get(_short(text, name).lower())
    if value is None:
        raise ConfigError(f"{_named(name, text)} is not a switch: write {SWITCH_HELP}")
    return value


def parse_count(text: str, name: str = "") -> int:
    """A whole number written in digits, with an optional sign."""
    text = _short(text, name)
    if _WHOLE.fullmatch(text):
        return int(text)
    if _NOT_FINITE.fullmatch(text):
        raise ConfigError(f"{_named(name, text)} is not a finite number; write a whole number in digits, such as 64")
    if _DECIMAL.fullmatch(text):
        raise ConfigError(f"{_named(name, text)} is not a whole number; write it in digits, such as 64")
    raise ConfigError(f"{_named(name, text)} is not a number; write a whole number in digits, such as 64")


def parse_number(text: str, name: str = "") -> float:
    """A finite decimal number (a sign, digits, a fraction, an exponent)."""
    text = _short(text, name)
    if _DECIMAL.fullmatch(text):
        return float(text)
    if _NOT_FINITE.fullmatch(text):
        raise ConfigError(f"{_named(name, text)} is not a finite number; write a decimal number, such as 2.5")
    raise ConfigError(f"{_named(name, text)} is not a number; write a decimal number, such as 2.5")


def parse_bytes(text: str, name: str = "", unit: int = 1, unit_name: str = "") -> int:
    """Whole bytes. A bare number counts ``unit`` bytes (``unit_name``, e.g. ``MiB``, says so in
    messages); with ``unit`` 1 a number may carry a unit of :data:`blinkflow.sizes.UNITS`. A
    sign is kept, for the caller's bounds to refuse with the setting's range."""
    text = _short(text, name)
    match = _SIZE.fullmatch(text)
    suffix = match.group("unit").lower() if match else ""
    if not match or suffix not in UNITS or (suffix and unit != 1):
        if unit != 1:
            raise ConfigError(f"{_named(name, text)} is not a number of {unit_name}; write a decimal number, "
                              f"such as 64 or 1.5")
        if _NOT_FINITE.fullmatch(text):
            raise ConfigError(f"{_named(name, text)} is not a finite number of bytes; write whole bytes in digits "
                              f"or a size with a unit, such as 67108864 or 64MiB ({SIZE_HELP})")
        raise ConfigError(f"{_named(name, text)} is not a number of bytes; write whole bytes in digits or a size "
                          f"with a unit, such as 67108864, 64MiB or 1GB ({SIZE_HELP})")
    exact = Fraction(match.group("number")) * (UNITS[suffix] if suffix else unit)
    if exact.denominator != 1:
        raise ConfigError(f"{_named(name, text)} is not a whole number of bytes ({float(exact):g})")
    return -int(exact) if match.group("sign") == "-" else int(exact)


class SettingType(click.ParamType):
    """A click parameter read by one of this module's parsers, so a flag and the same setting in
    the environment or the config file accept the same texts. click names the flag in its message."""

    def __init__(self, name: str, parse, **options):
        self.name, self._parse, self._options = name, parse, options

    def convert(self, value, param, ctx):
        if not isinstance(value, str):
            return value   # a default, or a value this type made already
        try:
            return self._parse(value, "", **self._options)
        except ConfigError as error:
            self.fail(str(error), param, ctx)


SWITCH = SettingType("switch", parse_switch)
COUNT = SettingType("count", parse_count)
NUMBER = SettingType("number", parse_number)
MEBIBYTES = SettingType("MiB", parse_bytes, unit=2**20, unit_name="MiB")

__all__ = ["COUNT", "MEBIBYTES", "NUMBER", "SWITCH", "SettingType", "parse_bytes", "parse_count", "parse_number",
           "parse_switch"]
