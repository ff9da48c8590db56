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
    ({"BLINKFLOW_CPU_SINGLE_COPY": "2"}, "BLINKFLOW_CPU_SINGLE_COPY='2' is not a switch"),
    ({"BLINKFLOW_CPU_CONTROL": "doorbell"}, "CPU_CONTROL must be one of auto, shm, mpi"),
    ({"BLINKFLOW_BUCKET_BYTES": "-1"}, "BUCKET_BYTES must be >= 0"),
])
def test_bad_values_raise_config_error(env, msg):
    with pytest.raises(ConfigError, match=msg):
        Config.from_env(env)


@pytest.mark.parametrize("env, msg", [
    # Issue 18: these passed validation, then failed far from their cause.
    ({"BLINKFLOW_CYCLE_TIME": "1e300"}, "BLINKFLOW_CYCLE_TIME must be > 0 and <= 10000 ms, got 1e"),
    ({"BLINKFLOW_STALL_CHECK_TIME_SECONDS": "1e300"}, "STALL_CHECK_TIME_SECONDS must be >= 0 and <= 2.592e"),
    ({"BLINKFLOW_FUSION_THRESHOLD": "2TiB"}, "FUSION_THRESHOLD must be >= 0 and <= "),
    ({"BLINKFLOW_CACHE_CAPACITY": "100000000"}, "CACHE_CAPACITY must be >= 0 and <= 65536"),
    ({"BLINKFLOW_CHUNK_BYTES": "-1"}, "CHUNK_BYTES must be >= 0"),
    ({"BLINKFLOW_START_TIMEOUT": "0"}, "START_TIMEOUT must be > 0"),
    ({"BLINKFLOW_SPLIT_HOSTS": "1000000000"}, "SPLIT_HOSTS must be >= 0 and <= 65536"),
    ({"BLINKFLOW_FUSION_THRESHOLD": "2.5"}, "FUSION_THRESHOLD='2.5' is not a whole number"),
    ({"BLINKFLOW_CACHE_CAPACITY": "inf"}, "not a finite number"),
])
def test_every_number_has_bounds(env, msg):
    with pytest.raises(ConfigError, match=msg):
        Config.from_env(env)


def test_sizes_take_units_and_counts_are_digits():
    """A byte size reads as blinkflow.sizes reads it; a count is digits only: 1e3 or 64.0 say a
    count only by rounding a float, which the one parser never does."""
    c = Config.from_env({"BLINKFLOW_FUSION_THRESHOLD": "1GB", "BLINKFLOW_BUCKET_BYTES": "1.5KiB",
                         "BLINKFLOW_CACHE_CAPACITY": "64", "BLINKFLOW_START_TIMEOUT": "5"})
    assert (c.fusion_threshold, c.bucket_bytes, c.cache_capacity, c.start_timeout) == (10 ** 9, 1536, 64, 5.0)
    assert isinstance(c.fusion_threshold, int)
    for name, text in (("BLINKFLOW_CACHE_CAPACITY", "64.0"), ("BLINKFLOW_FUSION_THRESHOLD", "1e9")):
        with pytest.raises(ConfigError, match=f"{name}='{text}' is not a"):
            Config.from_env({name: text})


def test_unknown_variables_name_the_closest_setting():
    from blinkflow.config import unknown_variables

    lines = unknown_variables({"BLINKFLOW_FUSION_TRESHOLD": "1", "BLINKFLOW_CYCLE_TIME": "2", "PATH": "/bin",
                               "BLINKFLOW_WHATEVER_ELSE_ENTIRELY": "x"})
    assert lines[0] == ("BLINKFLOW_FUSION_TRESHOLD is not a blinkflow setting and is ignored; did you mean "
                        "BLINKFLOW_FUSION_THRESHOLD?")
    assert lines[1].startswith("BLINKFLOW_WHATEVER_ELSE_ENTIRELY is not a blinkflow setting") and \
        "BLINKFLOW_CYCLE_TIME" in lines[1]
    assert len(lines) == 2


def test_the_topology_must_agree_across_ranks():
    """Rank 0 alone reads BLINKFLOW_TOPOLOGY: one set on another rank only was silently ignored."""
    assert ("topology", "dgx1-v100") in Config(topology="dgx1-v100").agreed()


def test_horovod_twins_are_read_and_the_blinkflow_variable_wins():
    from blinkflow.config import unknown_variables

    config = Config.from_env({"HOROVOD_FUSION_THRESHOLD": "134217728", "HOROVOD_CYCLE_TIME": "3.5",
                              "HOROVOD_TIMELINE": "/tmp/x.json", "HOROVOD_LOG_LEVEL": "DEBUG",
                              "HOROVOD_START_TIMEOUT": "30", "HOROVOD_CACHE_CAPACITY": "7"})
    assert (config.fusion_threshold, config.cycle_time, config.timeline, config.log_level, config.start_timeout,
            config.cache_capacity) == (128 * 1024 * 1024, 3.5, "/tmp/x.json", "debug", 30.0, 7)
    both = {"HOROVOD_CYCLE_TIME": "3.5", "BLINKFLOW_CYCLE_TIME": "9"}
    assert Config.from_env(both).cycle_time == 9.0
    assert unknown_variables(both) == ["HOROVOD_CYCLE_TIME=3.5 is ignored: BLINKFLOW_CYCLE_TIME is set and wins"]
    assert unknown_variables({"HOROVOD_CYCLE_TIME": "3.5"}) == []


def test_horovod_stall_check_disable_and_dynamic_timeline():
    off = Config.from_env({"HOROVOD_STALL_CHECK_DISABLE": "1", "HOROVOD_STALL_CHECK_TIME_SECONDS": "5"})
    assert (off.stall_check_time_seconds, off.stall_shutdown_time_seconds) == (0.0, 0.0)
    on = Config.from_env({"HOROVOD_STALL_CHECK_DISABLE": "0", "HOROVOD_STALL_CHECK_TIME_SECONDS": "5"})
    assert on.stall_check_time_seconds == 5.0
    assert Config.from_env({"HOROVOD_TIMELINE": "DYNAMIC"}).timeline is None


def test_horovod_variables_without_twin_are_named_with_what_to_use():
    from blinkflow.config import HOROVOD_WITHOUT_TWIN, unknown_variables

    lines = unknown_variables({"HOROVOD_HIERARCHICAL_ALLREDUCE": "1", "HOROVOD_GLOO_IFACE": "eth0",
                               "HOROVOD_FUSION_TRESHOLD": "1"})
    assert lines[0].startswith("HOROVOD_FUSION_TRESHOLD is not a Horovod setting blinkflow reads; its settings are")
    assert lines[1] == "HOROVOD_GLOO_IFACE has no effect in blinkflow: no Gloo; blinkrun --network-interface picks MPI's NIC"
    assert lines[2].startswith("HOROVOD_HIERARCHICAL_ALLREDUCE has no effect in blinkflow: ")
    assert "HOROVOD_MPI_THREADS_DISABLE" in HOROVOD_WITHOUT_TWIN
    tuned = Config.from_env({"HOROVOD_AUTOTUNE": "1", "HOROVOD_AUTOTUNE_LOG": "/tmp/at.csv"})
    assert (tuned.autotune, tuned.autotune_log_file) == (1, "/tmp/at.csv")


def test_a_bad_horovod_value_names_the_horovod_variable():
    with pytest.raises(ConfigError, match="HOROVOD_CYCLE_TIME='fast' is not a number"):
        Config.from_env({"HOROVOD_CYCLE_TIME": "fast"})
    with pytest.raises(ConfigError, match=r"CYCLE_TIME must be > 0.*read from Horovod's HOROVOD_CYCLE_TIME=0"):
        Config.from_env({"HOROVOD_CYCLE_TIME": "0"})


@pytest.mark.parametrize("env, msg", [
    # a switch is a switch word: "maybe" turned the stall check off without a word
    ({"HOROVOD_STALL_CHECK_DISABLE": "maybe"}, "HOROVOD_STALL_CHECK_DISABLE='maybe' is not a switch: write 1, true"),
    ({"BLINKFLOW_AUTOTUNE": "2"}, "BLINKFLOW_AUTOTUNE='2' is not a switch"),
    # a count is written in digits: 1e3 was taken as 1000 while FUSION_THRESHOLD=1.5 was refused
    ({"HOROVOD_AUTOTUNE_WARMUP_SAMPLES": "1e3"}, "HOROVOD_AUTOTUNE_WARMUP_SAMPLES='1e3' is not a whole number"),
    ({"HOROVOD_CACHE_CAPACITY": "2.9"}, "HOROVOD_CACHE_CAPACITY='2.9' is not a whole number"),
    ({"HOROVOD_FUSION_THRESHOLD": "1.5"}, "HOROVOD_FUSION_THRESHOLD='1.5' is not a whole number of bytes"),
    ({"BLINKFLOW_CYCLE_TIME": "true"}, "BLINKFLOW_CYCLE_TIME='true' is not a number"),
])
def test_one_parser_refuses_what_it_cannot_read_exactly(env, msg):
    with pytest.raises(ConfigError, match=msg):
        Config.from_env(env)


def test_switch_words():
    for text, value in (("1", 1), ("TRUE", 1), ("on", 1), ("yes", 1), ("0", 0), ("False", 0), ("off", 0)):
        assert Config.from_env({"BLINKFLOW_AUTOTUNE": text}).autotune == value
    off = Config.from_env({"HOROVOD_STALL_CHECK_DISABLE": "true"})
    assert (off.stall_check_time_seconds, off.stall_shutdown_time_seconds) == (0.0, 0.0)
