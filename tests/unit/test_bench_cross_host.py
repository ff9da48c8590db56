"""The cross-host benchmark's pure parts: rates as the command line says them, the link bound it
prints beside the figures, and its refusal to report under a limit that did not take effect."""
import click
import pytest

from blinkflow.bench.cross_host import LIMIT_SLACK, check_limit, format_rate, link_bound_s, parse_rate


@pytest.mark.parametrize("text,bits", [("1gbit", 1e9), ("500Mbit", 5e8), ("2.5g", 2.5e9), ("100mbps", 1e8),
                                       ("800kbit", 8e5), ("none", None), ("off", None)])
def test_rates_parse(text, bits):
    assert parse_rate(text) == bits


@pytest.mark.parametrize("text", ["fast", "1tbit", "-1gbit", "0.0gbit", "gbit"])
def test_a_rate_that_is_not_one_says_how_to_write_one(text):
    with pytest.raises(click.BadParameter, match="1gbit, 500mbit or none"):
        parse_rate(text)


def test_rates_print_in_the_unit_they_were_given_in():
    assert format_rate(1e9) == "1 Gbit/s" and format_rate(2.5e8) == "250 Mbit/s" and format_rate(None) == "no limit"


def test_the_link_bound_is_what_each_host_must_send_over_its_link():
    # Two hosts: each sends half its buffer in the reduce-scatter and half in the all-gather,
    # 64 MiB at 1 Gbit/s = 0.537 s; four hosts: 3/4 of it twice.
    assert link_bound_s(64 << 20, 2, 1e9) == pytest.approx(64 * 2 ** 20 * 8 / 1e9)
    assert link_bound_s(64 << 20, 4, 1e9) == pytest.approx(1.5 * 64 * 2 ** 20 * 8 / 1e9)


def test_figures_under_a_limit_that_did_not_take_effect_are_refused():
    check_limit(1e9, {"bfa->bfb": 0.95e9, "bfb->bfa": 1.0e9})
    check_limit(None, {"bfa->bfb": 9e9})
    with pytest.raises(click.ClickException, match="did not take effect: bfb->bfa carried 9 Gbit/s"):
        check_limit(1e9, {"bfa->bfb": 0.95e9, "bfb->bfa": 9e9})
    with pytest.raises(click.ClickException, match="bfa->bfb carried 400 Mbit/s"):
        check_limit(1e9, {"bfa->bfb": 0.4e9})
    check_limit(1e9, {"bfa->bfb": 1e9 * LIMIT_SLACK})


@pytest.mark.parametrize("args", [["--slow-pair", "4"], ["--hosts", "3", "--slow-pair", "4", "--rates", "1gbit,none"]])
def test_a_slow_pair_needs_a_third_host_and_a_rate(args):
    from click.testing import CliRunner

    from blinkflow.bench.cross_host import command

    result = CliRunner().invoke(command, args)
    assert result.exit_code == 2 and "a slow pair needs --hosts 3 or more" in result.output, result.output


def test_the_slow_pair_must_be_slower():
    from click.testing import CliRunner

    from blinkflow.bench.cross_host import command

    result = CliRunner().invoke(command, ["--hosts", "3", "--slow-pair", "1"])
    assert result.exit_code == 2 and "--slow-pair" in result.output, result.output


def test_a_clusters_namespaces_name_the_process_that_made_them():
    from blinkflow.bench.cluster import namespace_pid

    assert namespace_pid("bfa-1234") == 1234 and namespace_pid("bfsw-1234_1") == 1234
    assert namespace_pid("bfc-77_12") == 77
    assert namespace_pid("other-1234") is None and namespace_pid("bfa-12x") is None and namespace_pid("bfa") is None
