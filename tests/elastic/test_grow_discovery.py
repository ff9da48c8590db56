"""Host discovery: Horovod's script contract, one line for a bad run, blacklist cooldowns."""
import os
import stat

import pytest

from blinkflow.launcher.elastic.discovery import (DiscoveryError, HostBook, HostCooldown, parse_discovery_output,
                                                  run_discovery_script)
from blinkrun_helpers import run_blinkrun


def script(tmp_path, body: str, name="discover.sh") -> str:
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def test_host_lines_with_and_without_slots():
    assert parse_discovery_output("a:4\n\nb\n  c:1  \n", default_slots=2) == {"a": 4, "b": 2, "c": 1}


def test_a_repeated_host_keeps_its_last_line_in_its_last_place():
    assert list(parse_discovery_output("a:1\nb:2\na:3\n", None).items()) == [("b", 2), ("a", 3)]


@pytest.mark.parametrize("text, says", [
    ("a:4\nb c\n", "line 2: 'b c': 'b c' is not a host name"),
    # would reach ssh as an option
    ("a:4\n-oProxyCommand=touch /tmp/x:2\n", "line 2: '-oProxyCommand=touch /tmp/x:2': '-oProxyCommand=touch /tmp/x' "
                                             "is not a host name (a name starting with '-' would reach ssh"),
    ("-H:2\n", "is not a host name (a name starting with '-'"),
    ("a:x\n", "line 1: 'a:x'"),
    ("a:0\n", "slots must be >= 1"),
    ("a\n", "gives no slots; write 'host:slots' or pass --slots-per-host N"),
])
def test_garbage_names_its_line(text, says):
    with pytest.raises(DiscoveryError) as caught:
        parse_discovery_output(text, default_slots=None)
    assert says in str(caught.value) and "\n" not in str(caught.value)


def test_a_failing_script_says_its_status_and_last_stderr_line(tmp_path):
    path = script(tmp_path, "echo 'cloud api down' >&2\nexit 3\n")
    with pytest.raises(DiscoveryError, match=r"exited with status 3: cloud api down"):
        run_discovery_script(path, None)


def test_a_script_past_its_timeout_is_a_failure(tmp_path):
    with pytest.raises(DiscoveryError, match="ran past 0.5 s"):
        run_discovery_script(script(tmp_path, "sleep 5\n"), None, timeout=0.5)


def test_without_a_cooldown_range_a_blacklisted_host_stays_out():
    host = HostCooldown()
    host.blacklist(now=100.0)
    assert not host.available(now=100.0) and not host.available(now=1e9)


def test_cooldown_doubles_per_blacklisting_and_stays_in_range():
    host = HostCooldown((10, 60))
    host.blacklist(now=0.0, uniform=lambda: 0.5)        # 10 * 2 + 5 = 25 s
    assert not host.available(24.9) and host.available(25.0)
    host.blacklist(now=30.0, uniform=lambda: 0.5)       # 10 * 4 + 5 = 45 s
    assert not host.available(74.9) and host.available(75.0)
    host.blacklist(now=100.0, uniform=lambda: 0.5)      # 10 * 8 + 5 = 85 -> 60 s
    assert not host.available(159.9) and host.available(160.0)


def test_blacklisting_again_during_a_cooldown_does_not_extend_it():
    host = HostCooldown((10, 60))
    host.blacklist(now=0.0, uniform=lambda: 0.0)        # 20 s
    host.blacklist(now=5.0, uniform=lambda: 0.0)
    assert host.available(20.0) and host.times_blacklisted == 1


def test_the_book_offers_discovered_hosts_less_blacklisted_in_order():
    book = HostBook()
    book.update({"a": 2, "b": 1, "c": 4})
    book.blacklist("b", now=0.0)
    assert book.available(now=1.0) == [("a", 2), ("c", 4)]


def test_blinkrun_refuses_to_start_when_the_first_discovery_fails(tmp_path):
    path = script(tmp_path, "echo 'localhost:2'\necho '!!'\n")
    done = run_blinkrun(["-np", "2", "--host-discovery-script", path, "python", "-c", "pass"], timeout=60)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "line 2: '!!': '!!' is not a host name" in lines[0], done.stderr
