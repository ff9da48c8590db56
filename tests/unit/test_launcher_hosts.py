"""-H and hostfile parsing: slots, comments, blank lines, and errors that name the place."""
import pytest

from blinkflow.launcher.job.hosts import (Host, HostSpecError, hosts_arg, mpich_hostfile_text, parse_hostfile,
                                      parse_hosts_arg, parse_hostfile_text, total_slots)


def test_hosts_arg():
    assert parse_hosts_arg("a:4,b:2") == [Host("a", 4), Host("b", 2)]
    assert parse_hosts_arg("node-1.example.com") == [Host("node-1.example.com", 1)]
    assert parse_hosts_arg("10.0.0.1:8, [fe80::1]:2") == [Host("10.0.0.1", 8), Host("[fe80::1]", 2)]
    assert hosts_arg(parse_hosts_arg("a:4,b:2")) == "a:4,b:2"


@pytest.mark.parametrize("text, msg", [
    ("a:4,,b:4", "empty host entry"), ("a:x", "slots must be a positive integer"), ("a:", "positive integer"),
    ("a:0", "slots must be >= 1"), (":4", "is not a host name"), ("a b:2", "is not a host name"),
    ("a:2,a:2", "listed twice"),
    ("a:\u00b2", "slots must be a positive integer"),  # str.isdigit() is true for '²'; int() is not
    # a name starting with '-' would reach ssh as an option
    ("-oProxyCommand=touch_x:2", r"is not a host name \(a name starting with '-' would reach ssh as an option\)"),
    ("a:2,-b", "'-b' is not a host name"), ("a-:2", "is not a host name"), ("a..b", "is not a host name"),
    ("fe80::1:2", r"write an IPv6 address in brackets"), ("[fe80::zz]:2", "is not a host name"),
])
def test_hosts_arg_errors(text, msg):
    with pytest.raises(HostSpecError, match=msg):
        parse_hosts_arg(text)


def test_hostfile_text():
    text = "# cluster\n\nnode1 slots=4\nnode2   slots = 2   # fat node\nnode3\n"
    hosts = parse_hostfile_text(text, "h.txt")
    assert hosts == [Host("node1", 4), Host("node2", 2), Host("node3", 1)]
    assert total_slots(hosts) == 7
    assert mpich_hostfile_text(hosts) == "node1:4\nnode2:2\nnode3:1\n"


def test_host_names_as_host_names():
    assert parse_hosts_arg("n_1.x-y.z:2,[::1]") == [Host("n_1.x-y.z", 2), Host("[::1]", 1)]
    assert parse_hostfile_text("fe80::1 slots=2\n10.1.2.3\n") == [Host("fe80::1", 2), Host("10.1.2.3", 1)]


@pytest.mark.parametrize("text, msg", [
    ("node1 slots=4\nnode2 cpus=4\n", r"h\.txt:2: expected 'host slots=N'"),
    ("-oProxyCommand=x slots=2\n", r"h\.txt:1: '-oProxyCommand=x' is not a host name"),
    ("node1 slots=0\n", r"h\.txt:1: slots must be >= 1"),
    ("# only comments\n\n", r"h\.txt: no hosts listed"),
    ("a slots=1\n\na slots=2\n", "listed twice"),
])
def test_hostfile_errors_name_the_line(text, msg):
    with pytest.raises(HostSpecError, match=msg):
        parse_hostfile_text(text, "h.txt")


def test_hostfile_from_disk(tmp_path):
    path = tmp_path / "hosts"
    path.write_text("x slots=3\n")
    assert parse_hostfile(str(path)) == [Host("x", 3)]
    with pytest.raises(HostSpecError, match="cannot read hostfile"):
        parse_hostfile(str(tmp_path / "missing"))
