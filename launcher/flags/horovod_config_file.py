"""``--config-file F``: Horovod's YAML parameter file, read as the flags it stands for.

Horovod's file is two levels of ``key: value`` (a section, then its settings), e.g.::

    params:
      fusion_threshold_mb: 32
      cycle_time_ms: 2
    timeline:
      filename: /tmp/timeline.json
    stall_check:
      enabled: true
      warning_time_seconds: 60

Each setting is turned into the horovodrun flag it stands for (:data:`KEYS`, the ``config``
column of table.py), so the file goes through the same table as the command line and a
refused setting is refused with the same hint. blinkflow depends on no YAML library;
:func:`parse` reads this block-mapping subset of YAML (plain or quoted scalars) and names the line
of anything else.

A value is kept as the text written and read by the flag's own parser
(:mod:`blinkflow.setting_text`), as on the command line: ``cache_capacity: 2.9`` is refused as
``--cache-capacity 2.9`` is, and ``fusion_threshold_mb: false`` is no number. A switch
(``enabled``) is a switch word (``true``/``false``, ``yes``/``no``, ``on``/``off``, ``1``/``0``).
"""
from __future__ import annotations

import re
from typing import Dict, List, Optional, Tuple, Union

from blinkflow.errors import ConfigError
from blinkflow.setting_text import parse_switch

from .table import FLAGS

Scalar = Optional[str]


def _config_settings():
    """The flag table's ``config`` column as this reader looks it up: (section, key) -> the flag
    for a value, or (flag if true, flag if false) for a switch; and controller name -> flag."""
    keys: Dict[Tuple[str, str], Union[str, List[str]]] = {}
    controllers: Dict[str, str] = {}
    for row in FLAGS:
        for flag, setting in ((row.name, row.config), (row.negation, row.negation_config)):
            if not setting:
                continue
            key, _, value = setting.partition("=")
            if key == "controller":
                controllers[value] = flag
            elif not value:
                keys[tuple(key.split("."))] = flag
            else:
                keys.setdefault(tuple(key.split(".")), [None, None])[0 if value == "true" else 1] = flag
    return {key: tuple(flag) if isinstance(flag, list) else flag for key, flag in keys.items()}, controllers


#: (section, key) -> flag for a value, or (flag if true, flag if false) for a boolean; controller -> flag.
KEYS, CONTROLLERS = _config_settings()

_KEY = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z_][A-Za-z0-9_]*)\s*:(?:\s+(?P<value>.*))?$")


def _strip_comment(line: str) -> str:
    quote = None
    for i, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1] in " \t"):
            return line[:i]
    return line


def _scalar(text: str, where: str) -> Scalar:
    if text[:1] in "'\"":
        if len(text) < 2 or text[-1] != text[0]:
            raise ConfigError(f"{where}: unterminated quoted string {text!r}")
        return text[1:-1]
    if text[:1] in "[{|>&*!":
        raise ConfigError(f"{where}: {text!r} is YAML blinkrun does not read here; Horovod's config file "
                          "holds plain values (numbers, true/false, strings)")
    if text.lower() in ("null", "~", ""):
        return None
    return text


def parse(text: str, filename: str) -> Dict[str, Dict[str, Scalar]]:
    """The file's sections and their settings; top-level plain values are kept under ``""``."""
    sections: Dict[str, Dict[str, Scalar]] = {"": {}}
    section = None
    for number, raw in enumerate(text.splitlines(), start=1):
        where = f"{filename}:{number}"
        line = _strip_comment(raw.replace("\t", "    ")).rstrip()
        if not line.strip() or line.strip() in ("---", "..."):
            continue
        match = _KEY.match(line)
        if not match:
            raise ConfigError(f"{where}: expected 'key: value', got {raw.strip()!r}")
        key, value = match.group("key"), (match.group("value") or "").strip()
        if not match.group("indent"):
            if value:
                sections[""][key] = _scalar(value, where)
                section = None
            else:
                section = key
                sections.setdefault(key, {})
        elif section is None:
            raise ConfigError(f"{where}: {key!r} is indented but follows no section")
        else:
            sections[section][key] = _scalar(value, where)
    return sections


def flags_from_config(sections: Dict[str, Dict[str, Scalar]], filename: str) -> List[Tuple[str, Scalar, str]]:
    """``(flag, text, where)`` per setting: text None for a switch; ``where`` names the setting."""
    out = []
    for key, value in sections.get("", {}).items():
        if key != "controller":
            raise ConfigError(f"{filename}: unknown setting {key!r} (Horovod's config file has 'controller' "
                              f"and the sections {', '.join(sorted({s for s, _ in KEYS}))})")
        flag = CONTROLLERS.get(str(value).lower())
        if flag is None:
            raise ConfigError(f"{filename}: controller {value!r}: expected mpi or gloo")
        out.append((flag, None, f"{filename}: controller"))
    for section, settings in sections.items():
        if not section:
            continue
        for key, value in settings.items():
            where = f"{filename}: {section}.{key}"
            flag = KEYS.get((section, key))
            if flag is None:
                raise ConfigError(f"{where} is not one of Horovod's settings")
            if value is None:
                continue
            if isinstance(flag, tuple):
                out.append((flag[0] if parse_switch(value, where) else flag[1], None, where))
            else:
                out.append((flag, value, where))
    return out


def read(path: str) -> List[Tuple[str, Scalar, str]]:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise ConfigError(f"cannot read --config-file {path}: {e.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"--config-file {path} is not UTF-8 text") from None
    return flags_from_config(parse(text, path), path)
