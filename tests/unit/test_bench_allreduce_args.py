"""Argument parsing of the all-reduce benchmark (no MPI)."""
import click
import pytest

from blinkflow.bench.allreduce import _human, parse_size


def test_sizes_use_binary_units():
    assert parse_size("4KB") == 4096 and parse_size("64MB") == 64 << 20 and parse_size("1GiB") == 1 << 30
    assert parse_size("100") == 100 and parse_size("1.5KB") == 1536
    assert _human(16 << 20) == "16MB" and _human(100) == "100B"


def test_bad_sizes_are_usage_errors():
    for bad in ("", "4XB", "-1KB", "MB"):
        with pytest.raises(click.BadParameter):
            parse_size(bad)
