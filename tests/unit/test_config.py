import pytest

from blinkflow.config import Config
from blinkflow.errors import ConfigError


def test_defaults_and_env_names():
    c = Config.from_env({})
    assert c == Config()
    assert Config.env_name("fusion_threshold") == "BLINKFLOW_FUSION_THRESHOLD"


def test_reads_every_field_from_env():
    env = {"BLINKFLOW_FUSION_THRESHOLD": "1048576", "BLINKFLOW_CYCLE_TIME": "2.5", "BLINKFLOW_CACHE_CAPACITY": "0",
           "BLINKFLOW_TIMELINE": "/tmp/t.json", "BLINKFLOW_STALL_CHECK_TIME_SECONDS": "5",
           "BLINKFLOW_STALL_SHUTDOWN_TIME_SECONDS": "10", "BLINKFLOW_TOPOLOGY": "dgx1-v100",
           "BLINKFLOW_BACKEND": "CPU", "BLINKFLOW_LOG_LEVEL": "debug", "BLINKFLOW_SPLIT_HOSTS": "2"}
    c = Config.from_env(env)
    assert (c.fusion_threshold, c.cycle_time, c.cache_capacity, c.timeline) == (1048576, 2.5, 0, "/tmp/t.json")
    assert (c.stall_check_time_seconds, c.stall_shutdown_time_seconds) == (5.0, 10.0)
    assert (c.topology, c.backend, c.log_level, c.split_hosts) == ("dgx1-v100", "cpu", "debug", 2)
    assert Config.from_env(c.to_env()) == c


@pytest.mark.parametrize("env, msg", [
    ({"BLINKFLOW_FUSION_THRESHOLD": "lots"}, "not a number"),
    ({"BLINKFLOW_BACKEND": "tpu"}, "BLINKFLOW_BACKEND must be one of"),
    ({"BLINKFLOW_CYCLE_TIME": "0"}, "CYCLE_TIME must be > 0"),
    ({"BLINKFLOW_CYCLE_TIME": "nan"}, "BLINKFLOW_CYCLE_TIME='nan' is not a finite number"),
    ({"BLINKFLOW_STALL_CHECK_TIME_SECONDS": "inf"}, "not a finite number"),
    ({"BLINKFLOW_STALL_SHUTDOWN_TIME_SECONDS": "-nan"}, "not a finite number"),
    ({"BLINKFLOW_CPU_SINGLE_COPY": "2"}, "CPU_SINGLE_COPY must be 0 or 1"),
    ({"BLINKFLOW_BUCKET_BYTES": "-1"}, "BUCKET_BYTES must be >= 0"),
])
def test_bad_values_raise_config_error(env, msg):
    with pytest.raises(ConfigError, match=msg):
        Config.from_env(env)
