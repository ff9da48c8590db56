"""Every package folder under blinkflow/ is listed in setup.cfg, so a non-editable install ships
it (a missing entry only shows after ``pip install .``, e.g. blinkflow.backends.cpu)."""
import configparser
import pathlib

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]


def test_every_package_is_listed():
    cfg = REPO / "setup.cfg"
    if not cfg.is_file():
        pytest.skip("not running from a source checkout")
    parser = configparser.ConfigParser()
    parser.read(cfg)
    listed = set(parser["options"]["packages"].split())
    found = {".".join(p.parent.relative_to(REPO).parts) for p in (REPO / "blinkflow").rglob("__init__.py")}
    assert found <= listed, f"add to setup.cfg [options] packages: {sorted(found - listed)}"
