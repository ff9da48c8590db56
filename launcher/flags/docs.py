"""The documented flag tables, written from the one flag table (table.py).

docs/launching.md ("From horovodrun") holds :func:`horovodrun_table` and docs/configuration.md
("blinkrun's flags") :func:`settings_table`, word for word between the markers
:data:`BEGIN` and :data:`END`; a unit test compares them, so a row changed in table.py
shows up as a failing test until the page is rewritten with ``python -m blinkflow.launcher.flags.docs``.
"""
from __future__ import annotations

import pathlib
import re
import sys

import click

from .table import ACCEPTED, FLAGS, NATIVE, REFUSED, SETTING_FLAGS, Flag

BEGIN = "<!-- flag table: {name} (written by blinkflow.launcher.flags.docs; edit launcher/flags/table.py) -->"
END = "<!-- end of flag table: {name} -->"

HANDLED = {NATIVE: "yes", ACCEPTED: "taken, no effect", REFUSED: "refused"}


def value_word(row: Flag) -> str:
    """What a flag takes, as ``--help`` shows it (nothing for a switch or a hidden flag; a choice
    spelled as argparse does)."""
    if row.nargs == 0 or row.handling != NATIVE:
        return ""
    if row.metavar:
        return row.metavar
    if isinstance(row.type, click.Choice):   # argparse's spelling: no "|" to escape in a table
        return "{" + ",".join(row.type.choices) + "}"
    return (getattr(row.type, "name", None) or "text").upper()


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def spelled(names, value: str = "") -> str:
    """``-np`` ``--num-proc N``: every spelling, the value after the last."""
    codes = [f"`{name}`" for name in names]
    if value:
        codes[-1] = f"`{names[-1]} {value}`"
    return _cell(" ".join(codes))


def config_setting(setting: str) -> str:
    """``params.hierarchical_allreduce=true`` -> ```params.hierarchical_allreduce: true```."""
    key, _, value = setting.partition("=")
    return f"`{key}: {value}`" if value else f"`{key}`" if setting else ""


def horovodrun_table() -> str:
    """docs/launching.md's table: a row per horovodrun flag (a negation on its own row), with the
    setting that stands for it in Horovod's ``--config-file``."""
    lines = ["| horovodrun flag | blinkrun | meaning here, or what to use instead | in `--config-file` |",
             "|---|---|---|---|"]
    for row in FLAGS:
        if not row.horovodrun:
            continue
        lines.append(f"| {spelled(row.names, value_word(row))} | {HANDLED[row.handling]} | {_cell(row.note)} "
                     f"| {config_setting(row.config)} |")
        if row.negation:
            lines.append(f"| {spelled([row.negation])} | {HANDLED[row.handling]} | {_cell(row.negation_note)} "
                         f"| {config_setting(row.negation_config)} |")
    return "\n".join(lines)


def settings_table() -> str:
    """docs/configuration.md's table: a row per flag that sets a runtime setting."""
    lines = ["| flag | variable | meaning |", "|---|---|---|"]
    for row in SETTING_FLAGS:
        flag = spelled(row.names, value_word(row))
        if row.negation:
            flag += f" / {spelled([row.negation])}"
        lines.append(f"| {flag} | `{row.env_name}` | {_cell(row.help)} |")
    return "\n".join(lines)


#: page -> (table name, the function that writes it)
PAGES = {"docs/launching.md": ("horovodrun", horovodrun_table),
         "docs/configuration.md": ("settings", settings_table)}


def documented(text: str, name: str) -> str:
    """The table a page holds between the markers of ``name`` (ValueError: no markers)."""
    begin, end = BEGIN.format(name=name), END.format(name=name)
    return text[text.index(begin) + len(begin):text.index(end)].strip("\n")


def rewrite(text: str, name: str, table: str) -> str:
    begin, end = BEGIN.format(name=name), END.format(name=name)
    pattern = re.compile(re.escape(begin) + ".*?" + re.escape(end), re.DOTALL)
    return pattern.sub(lambda _: f"{begin}\n{table}\n{end}", text, count=1)


def main(root: str = ".") -> None:
    """Rewrite the tables in the pages under ``root`` (the repository)."""
    for page, (name, table) in PAGES.items():
        path = pathlib.Path(root) / page
        path.write_text(rewrite(path.read_text(), name, table()))


if __name__ == "__main__":
    main(*sys.argv[1:])
