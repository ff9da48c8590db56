"""blinkrun's one flag table (launcher/flags/table.py) is what the command line declares, what
``--help`` says, and what the documented flag tables (docs/launching.md, docs/configuration.md)
hold, row by row."""
import pathlib

import pytest

from blinkflow.launcher.flags import docs as flag_docs
from blinkflow.launcher.flags.table import (ACCEPTED, ELASTIC, ELASTIC_FLAGS, FLAGS, HOROVOD_FLAGS, NATIVE, REFUSED,
                                           SETTING, SETTING_FLAGS, by_name)
from blinkflow.launcher.commands.run import command

ROOT = pathlib.Path(__file__).parents[2]
REWRITE = "rewrite it with: python -m blinkflow.launcher.flags.docs ."


def _rows(table: str):
    """A markdown table's body rows as lists of cells (header and rule left out)."""
    rows = [line for line in table.splitlines() if line.startswith("|")][2:]
    return [[cell.strip() for cell in line.replace("\\|", "\0").strip("|").split("|")] for line in rows]


def _spellings(cell: str):
    """``-np`` ``--num-proc N`` -> ["-np", "--num-proc"]."""
    codes = [code for code in cell.replace("\0", "|").split("`")[1::2]]
    return [code.split(" ")[0] for code in codes]


@pytest.mark.parametrize("page", sorted(flag_docs.PAGES))
def test_each_documented_table_is_the_one_written_from_the_flag_table(page):
    name, write = flag_docs.PAGES[page]
    text = (ROOT / page).read_text()
    assert flag_docs.documented(text, name).splitlines() == write().splitlines(), f"{page} is stale; {REWRITE}"


def test_the_horovodrun_table_has_a_row_per_flag_saying_how_it_is_handled():
    text = (ROOT / "docs" / "launching.md").read_text()
    documented = _rows(flag_docs.documented(text, "horovodrun"))
    expected = [(list(flag.names), flag.handling, flag.note) for flag in HOROVOD_FLAGS]
    handled = {"yes": NATIVE, "taken, no effect": ACCEPTED, "refused": REFUSED}
    found = [(_spellings(cells[0]), handled[cells[1]], cells[2].replace("\0", "|")) for cells in documented]
    assert found == expected
    config = {}   # the --config-file column: setting -> the flag it stands for
    for cells in documented:
        for setting in cells[3].split("`")[1::2]:
            config[setting] = _spellings(cells[0])[-1]
    written = {}
    for row in FLAGS:
        for flag, setting in ((row.name, row.config), (row.negation, row.negation_config)):
            if setting:
                written[setting.replace("=", ": ")] = flag
    assert config == written


def test_the_settings_table_has_a_row_per_setting_flag_with_its_variable():
    text = (ROOT / "docs" / "configuration.md").read_text()
    documented = _rows(flag_docs.documented(text, "settings"))
    expected = [(list(row.spellings), f"`{row.env_name}`", row.help) for row in SETTING_FLAGS]
    found = [(_spellings(cells[0]), cells[1], cells[2].replace("\0", "|")) for cells in documented]
    assert found == expected


def test_blinkrun_declares_every_row_in_the_tables_order_with_its_help_line():
    declared = [param for param in command.params if param.param_type_name == "option"]
    shown = [param for param in declared if not param.hidden]
    native = [row for row in FLAGS if row.handling == NATIVE and row.param != "help"]
    assert [param.name for param in shown] == [row.param for row in native]
    for param, row in zip(shown, native):
        assert param.opts + param.secondary_opts == list(row.spellings)
        assert param.help == row.help_line()
    hidden = {tuple(param.opts) for param in declared if param.hidden}
    assert hidden == {row.names for row in FLAGS if row.handling != NATIVE}
    assert command.context_settings["help_option_names"] == list(by_name()["--help"].names)


def test_the_views_are_the_rows_that_feed_each_place():
    assert SETTING_FLAGS == tuple(row for row in FLAGS if row.feeds == SETTING and row.field)
    assert ELASTIC_FLAGS == tuple(row for row in FLAGS if row.feeds == ELASTIC)
    spelled = {name for flag in HOROVOD_FLAGS for name in flag.names}
    assert spelled == {name for row in FLAGS if row.horovodrun for name in row.spellings}
    assert {"--topology", "--backend"} == {name for name in by_name() if name not in spelled}


def test_the_settings_pages_flag_column_names_each_variables_flag():
    """docs/configuration.md's first table: a variable's ``blinkrun`` flag column is the setting
    row that sets it ("—": none does); the elastic variables name elastic rows."""
    text = (ROOT / "docs" / "configuration.md").read_text()
    table = text[:text.index("## blinkrun's flags")]
    table = table[table.index("| variable | `blinkrun` flag |"):]
    table = table[:table.index("\n\n")]
    sets = {row.env_name: row for row in SETTING_FLAGS}
    rows = _rows(table)
    assert len(rows) > 20, "the pattern no longer finds docs/configuration.md's settings table"
    for cells in rows:
        variables = [code for code in cells[0].split("`")[1::2]]
        named = _spellings(cells[1])
        if len(variables) == 1 and variables[0] in sets:
            assert named == list(sets[variables[0]].spellings), (variables, named)
        else:   # an elastic job's variables come from its flags through ElasticSpec; the others have none
            assert all(by_name()[name].feeds == ELASTIC for name in named), (variables, named)
    assert set(sets) <= {code for cells in rows for code in cells[0].split("`")[1::2]}


def test_each_config_file_setting_stands_for_a_row_that_takes_what_it_gives():
    """The ``config`` column: a value setting names a flag taking one value; a true/false setting
    a pair of switches; Horovod's sections and controllers, no other."""
    from blinkflow.launcher.flags.horovod_config_file import CONTROLLERS, KEYS

    rows = by_name()
    for key, flag in KEYS.items():
        if isinstance(flag, tuple):
            assert len(flag) == 2 and all(rows[f].nargs == 0 for f in flag), (key, flag)
        else:
            assert rows[flag].nargs == 1, (key, flag)
    assert {section for section, _ in KEYS} == {"params", "autotune", "timeline", "stall_check", "library_options",
                                                "logging"}
    assert CONTROLLERS == {"mpi": "--mpi", "gloo": "--gloo"}
