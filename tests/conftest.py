"""Shared test fixtures. Tests import the installed package (``make test`` installs it)."""
import os
import pathlib

import pytest

# Every new call shape of every test (and of the ranks it launches) is proven before it runs.
os.environ.setdefault("BLINKFLOW_CHECK_SCHEDULES", "1")

FIXTURES = pathlib.Path(__file__).resolve().parent / "fixtures"


@pytest.fixture
def fixtures_dir():
    return FIXTURES


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Tests parametrized by ``case`` read one launch per set of their other parameters
    (tests/harness.py runs it once per process): under pytest-xdist's ``--dist loadgroup`` those
    tests form one group, so the launch runs once, on one worker. A test may name its group
    itself (``@pytest.mark.xdist_group``) when several test functions share a launch. The
    two-host tests share one session-wide cluster of network namespaces, which two workers would
    each build under the same names: they form one group too."""
    for item in items:
        if item.path.parent.name == "multihost" and not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group("multihost"))
            continue
        callspec = getattr(item, "callspec", None)
        if callspec is None or "case" not in callspec.params or item.get_closest_marker("xdist_group"):
            continue
        others = sorted((k, str(v)) for k, v in callspec.params.items() if k != "case")
        item.add_marker(pytest.mark.xdist_group(f"{item.module.__name__}.{item.originalname}{others}"))
