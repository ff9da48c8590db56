"""Shared test fixtures. Tests import the installed package (``make test`` installs it)."""
import pathlib

import pytest

FIXTURES = pathlib.Path(__file__).resolve().parent / "fixtures"


@pytest.fixture
def fixtures_dir():
    return FIXTURES
