"""One meaning of a byte size: ``blinkrun simulate`` and every ``python -m blinkflow.bench`` suite
read "256MB" (and "256MiB") as the same number of bytes, and bad sizes are typed errors."""
import importlib
import json

import click
import pytest

from blinkflow.bench.cli import SUITES
from blinkflow.errors import ConfigError
from blinkflow.launcher.cli import main as blinkrun
from blinkflow.sizes import format_size, parse_size

# suite -> (its size option's words on the command line, the parameter name it fills)
BENCH_SIZE_OPTIONS = {"allreduce": ("--sizes", "sizes_b"), "separate": ("--sizes", "sizes_b"),
                      "gpu": ("--sizes", "size_list"), "scale": ("--size", "largest"),
                      "runner-actions": ("--size", "size"), "cross-host": ("--sizes", "sizes_b")}


def _bench_reads(suite: str, text: str) -> int:
    """The bytes a bench suite's own command line makes of ``text`` (parsed, not run)."""
    command = importlib.import_module(SUITES[suite]).command
    flag, name = BENCH_SIZE_OPTIONS[suite]
    with command.make_context(suite, [flag, text]) as ctx:
        value = ctx.params[name]
    return value[0] if isinstance(value, list) else value


def _blinkrun_reads(capsys, text: str) -> int:
    with pytest.raises(SystemExit) as exit_:
        blinkrun(["simulate", "--topology", "cpu-host:2", "--collective", "allreduce", "--size", text, "--json"])
    out, err = capsys.readouterr()
    assert exit_.value.code == 0, err
    return json.loads(out)["size_bytes"]


@pytest.mark.parametrize("text, nbytes", [("256MB", 256 * 10**6), ("256MiB", 256 * 2**20), ("256M", 256 * 2**20)])
def test_the_cli_and_every_bench_agree_on_a_size(capsys, text, nbytes):
    assert _blinkrun_reads(capsys, text) == nbytes
    for suite in BENCH_SIZE_OPTIONS:
        assert _bench_reads(suite, text) == nbytes, suite


def test_every_bench_suite_that_reads_a_size_text_is_covered():
    for suite, module in SUITES.items():
        command = importlib.import_module(module).command
        texts = [p.name for p in command.params if "size" in "".join(p.opts) and not isinstance(p.type, click.types.IntParamType)]
        assert not texts or suite in BENCH_SIZE_OPTIONS, (suite, texts)


def test_units():
    assert parse_size("4KB") == 4000 and parse_size("4KiB") == parse_size("4k") == 4096
    assert parse_size("1GB") == 10**9 and parse_size("1gib") == 2**30 and parse_size("1.5KiB") == 1536
    assert parse_size(" 100 ") == 100 and parse_size("1.5KB") == 1500


@pytest.mark.parametrize("bad", ["", "4XB", "-1KB", "MB", "0", "1.0001KB", "12 parsecs"])
def test_bad_sizes_are_config_errors_naming_the_flag(bad):
    with pytest.raises(ConfigError, match="--size"):
        parse_size(bad, "--size")


def test_a_bad_bench_size_is_a_usage_error():
    command = importlib.import_module(SUITES["allreduce"]).command
    with pytest.raises(click.BadParameter, match="4XB"):
        command.make_context("allreduce", ["--sizes", "4KiB,4XB"])


@pytest.mark.parametrize("nbytes", [1, 100, 1000, 4096, 16 * 2**20, 256 * 10**6, 3 * 2**30, 123456789])
def test_an_exact_size_prints_as_text_that_parses_back(nbytes):
    assert parse_size(format_size(nbytes)) == nbytes
