"""blinkrun's elastic flags against horovodrun's: names, aliases, defaults, and what they set."""
import pytest

from blinkflow.config import Config
from blinkflow.errors import ConfigError
from blinkflow.launcher.elastic.spec import ELASTIC_FLAGS, ElasticSpec, elastic_spec
from blinkflow.launcher.commands.run import command
from blinkrun_helpers import run_blinkrun

# horovod/runner/launch.py, "elastic arguments" and --host-discovery-script: flag, aliases, default
# (the 600 s of --elastic-timeout is horovod/runner/elastic/driver.py's ELASTIC_TIMEOUT_SECS).
HOROVOD = {
    "--min-np": (("--min-num-proc",), None),
    "--max-np": (("--max-num-proc",), None),
    "--slots-per-host": ((), None),
    "--host-discovery-script": ((), None),
    "--elastic-timeout": ((), 600),
    "--reset-limit": ((), None),
    "--blacklist-cooldown-range": ((), None),
}


def test_the_table_has_horovods_flags_aliases_and_defaults():
    ours = {f.flag: (f.aliases, f.default) for f in ELASTIC_FLAGS}
    assert ours == HOROVOD


def test_blinkrun_accepts_every_spelling():
    options = {opt for param in command.params for opt in param.opts}
    for flag, (aliases, _) in HOROVOD.items():
        assert flag in options and set(aliases) <= options


def test_blacklist_cooldown_range_takes_two_numbers():
    flag = next(f for f in ELASTIC_FLAGS if f.flag == "--blacklist-cooldown-range")
    assert flag.nargs == 2


def test_without_elastic_flags_the_job_is_fixed_size():
    assert elastic_spec({}, np=4) is None


def test_min_np_defaults_to_np_and_timeout_to_600():
    spec = elastic_spec({"host_discovery_script": "./discover.sh"}, np=3)
    assert spec == ElasticSpec(min_np=3, host_discovery_script="./discover.sh", elastic_timeout=600)


def test_settings_reach_the_ranks_by_config_field():
    spec = elastic_spec({"min_np": 2, "max_np": 5, "elastic_timeout": 30, "reset_limit": 7}, np=3)
    env = spec.settings_env("/tmp/x/elastic-hosts.json")
    config = Config.from_env(env)
    assert (config.elastic_min_np, config.elastic_max_np, config.elastic_reset_limit, config.elastic_hosts_file,
            config.elastic_join_timeout_seconds) == (2, 5, 7, "/tmp/x/elastic-hosts.json", 30)


@pytest.mark.parametrize("values, np, says", [
    ({"max_np": 4}, 2, "only apply to an elastic job"),
    ({"min_np": 3}, 2, "below --min-np"),
    ({"min_np": 1, "max_np": 2}, 3, "above --max-np"),
    ({"min_np": 1, "blacklist_cooldown_range": (0, 10)}, 2, "--blacklist-cooldown-range 0 10"),
    ({"min_np": 1, "blacklist_cooldown_range": (10, 5)}, 2, "MIN <= MAX"),
    ({"min_np": 1, "blacklist_cooldown_range": (1, 7200)}, 2, "<= 3600"),
])
def test_contradicting_bounds_are_refused(values, np, says):
    with pytest.raises(ConfigError, match=says.replace("+", r"\+").replace("(", r"\(")):
        elastic_spec(values, np)


def test_blinkrun_says_a_bad_bound_on_one_line():
    done = run_blinkrun(["-np", "3", "--min-np", "4", "python", "-c", "pass"], timeout=60)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "-np 3 is below --min-np 4" in lines[0], done.stderr
