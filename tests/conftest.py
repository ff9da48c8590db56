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
