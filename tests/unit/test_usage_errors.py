"""Bad input to blinkrun is one line on stderr and exit status 2; in a rank it is a ConfigError
(or TopologyError), never an OverflowError or RecursionError traceback."""
import subprocess
import sys

import pytest

from blinkflow.config import Config
from blinkflow.errors import ConfigError, TopologyError
from blinkflow.topology.io import topology_from_json

MAX_TOPOLOGY_BYTES = 16 << 20
from blinkrun_helpers import blinkrun_argv
from blinkrun_helpers import test_env as rank_env

HUGE = "9" * 400


def _one_line_exit_2(args, env=None):
    proc = subprocess.run(blinkrun_argv() + args, capture_output=True, text=True, timeout=60, env=rank_env(env))
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith("blinkrun: error: "), proc.stderr
    return proc.stderr


def test_a_hostfile_that_is_not_utf8_is_named_as_such(tmp_path):
    hostfile = tmp_path / "hosts"
    hostfile.write_bytes(b"node1 slots=2\n\xff\xfenode2\n")
    said = _one_line_exit_2(["-np", "2", "--hostfile", str(hostfile), "true"])
    assert f"hostfile {hostfile}: line 2 is not UTF-8" in said and "--mpi-args" not in said


@pytest.mark.parametrize("variable", ["BLINKFLOW_FUSION_THRESHOLD", "BLINKFLOW_CYCLE_TIME", "BLINKFLOW_CACHE_CAPACITY"])
def test_a_400_digit_setting_is_a_usage_error(variable):
    said = _one_line_exit_2(["-np", "1", "true"], {variable: HUGE})
    assert variable in said and "400-character" in said


def test_a_400_digit_setting_is_a_config_error_in_the_rank():
    with pytest.raises(ConfigError, match="BLINKFLOW_CYCLE_TIME is a 400-character value"):
        Config.from_env({"BLINKFLOW_CYCLE_TIME": HUGE})
    with pytest.raises(ConfigError, match=r"BLINKFLOW_FUSION_THRESHOLD must be .* got 10000000000000000000\.\.\."):
        Config(fusion_threshold=10 ** 400)
    proc = subprocess.run([sys.executable, "-c", "import blinkflow as bf; bf.init()"], capture_output=True,
                          text=True, timeout=120, env=rank_env({"BLINKFLOW_FUSION_THRESHOLD": HUGE}))
    assert proc.returncode == 1 and "blinkflow.errors.ConfigError: BLINKFLOW_FUSION_THRESHOLD" in proc.stderr
    assert "OverflowError" not in proc.stderr, proc.stderr


@pytest.mark.parametrize("text, message", [
    ('{"a":' * 100_000 + "1" + "}" * 100_000, "JSON nested 33 levels deep"),
    ("[" * 100_000 + "]" * 100_000, "cannot tell the format"),
    ('{"schema": 1, "name": "' + "x" * MAX_TOPOLOGY_BYTES + '"}', "larger than a topology can be"),
])
def test_nested_or_oversized_topology_json_is_a_usage_error(tmp_path, text, message):
    path = tmp_path / "topo.json"
    path.write_text(text)
    assert message in _one_line_exit_2(["-np", "1", "--topology", str(path), "true"])


def test_nested_topology_json_is_a_topology_error_not_recursion():
    with pytest.raises(TopologyError, match="nested"):
        topology_from_json('{"nodes": ' + "[" * 50_000 + "]" * 50_000 + "}", "deep.json")
    # brackets inside strings are text, not nesting
    with pytest.raises(TopologyError, match="field 'schema'"):
        topology_from_json('{"name": "' + "[{" * 100 + '"}', "text.json")


def test_every_rank_reads_an_empty_stdin():
    # Open MPI forwards blinkrun's stdin to rank 0 and never closes it: a rank reading stdin
    # waited forever, even with `< /dev/null`.
    script = "import sys; print('read', len(sys.stdin.read()))"
    proc = subprocess.run(blinkrun_argv() + ["-np", "2", sys.executable, "-c", script], input="data\n",
                          capture_output=True, text=True, timeout=60, env=rank_env())
    assert proc.returncode == 0, proc.stderr
    assert sorted(proc.stdout.splitlines()) == ["[0]<stdout>: read 0", "[1]<stdout>: read 0"], proc.stdout
