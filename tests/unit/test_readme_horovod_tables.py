"""docs/launching.md's table names every horovodrun flag and docs/configuration.md every HOROVOD_*
variable blinkflow knows, so the tables and launcher/flags/table.py / blinkflow/config.py cannot
drift apart silently."""
import pathlib
import re

from blinkflow.config import HOROVOD_TWINS, HOROVOD_WITHOUT_TWIN
from blinkflow.launcher.flags.table import HOROVOD_FLAGS, NATIVE, REFUSED

DOCS = pathlib.Path(__file__).parents[2] / "docs"
LAUNCHING = (DOCS / "launching.md").read_text()
CONFIGURATION = (DOCS / "configuration.md").read_text()
SECTION = LAUNCHING[LAUNCHING.index("## From horovodrun"):LAUNCHING.index("--config-file` reads Horovod's YAML")]


def _row_of(name):
    spelled = re.compile(rf"`{re.escape(name)}[` ]")   # `--flag` or `--flag VALUE`
    rows = [line for line in SECTION.splitlines() if line.startswith("|") and spelled.search(line.split("|")[1])]
    assert len(rows) == 1, (name, rows)
    return rows[0]


def test_every_horovodrun_flag_has_one_row_that_says_how_it_is_handled():
    for flag in HOROVOD_FLAGS:
        for name in flag.names:
            handled = _row_of(name).split("|")[2].strip()
            expected = {NATIVE: "yes", REFUSED: "refused"}.get(flag.handling, "taken, no effect")
            assert handled == expected, (name, handled)


def test_every_horovod_variable_is_in_the_configuration_page():
    for name in list(HOROVOD_TWINS) + list(HOROVOD_WITHOUT_TWIN):
        assert re.search(rf"`{name}[`= ]", CONFIGURATION), name
