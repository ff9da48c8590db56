"""Every blinkrun setting flag maps to its Config field's variable; CLI > env > default."""
import dataclasses

import pytest

from blinkflow.config import Config
from blinkflow.errors import ConfigError
from blinkflow.launcher.flags.settings import SETTING_FLAGS, settings_env

EXPECTED = {  # flag param -> (given value, variable, variable text, parsed Config attribute value)
    # the flag's click type (blinkflow.setting_text.MEBIBYTES) reads "32" as 32 MiB, in bytes
    "fusion_threshold_mb": (32 * 2**20, "BLINKFLOW_FUSION_THRESHOLD", "33554432", 33554432),
    "cycle_time_ms": (2.5, "BLINKFLOW_CYCLE_TIME", "2.5", 2.5),
    "cache_capacity": (0, "BLINKFLOW_CACHE_CAPACITY", "0", 0),
    "timeline_filename": ("/tmp/tl.json", "BLINKFLOW_TIMELINE", "/tmp/tl.json", "/tmp/tl.json"),
    "stall_check_warning_time_seconds": (5.0, "BLINKFLOW_STALL_CHECK_TIME_SECONDS", "5.0", 5.0),
    "stall_check_shutdown_time_seconds": (30.0, "BLINKFLOW_STALL_SHUTDOWN_TIME_SECONDS", "30.0", 30.0),
    "start_timeout": (12.5, "BLINKFLOW_START_TIMEOUT", "12.5", 12.5),
    "topology": ("dgx1-v100", "BLINKFLOW_TOPOLOGY", "dgx1-v100", "dgx1-v100"),
    "backend": ("cpu", "BLINKFLOW_BACKEND", "cpu", "cpu"),
    "log_level": ("debug", "BLINKFLOW_LOG_LEVEL", "debug", "debug"),
    "autotune": (True, "BLINKFLOW_AUTOTUNE", "1", 1),
    "autotune_log_file": ("/tmp/at.csv", "BLINKFLOW_AUTOTUNE_LOG_FILE", "/tmp/at.csv", "/tmp/at.csv"),
    "autotune_warmup_samples": (2, "BLINKFLOW_AUTOTUNE_WARMUP_SAMPLES", "2", 2),
    "autotune_steps_per_sample": (5, "BLINKFLOW_AUTOTUNE_STEPS_PER_SAMPLE", "5", 5),
    "autotune_bayes_opt_max_samples": (9, "BLINKFLOW_AUTOTUNE_BAYES_OPT_MAX_SAMPLES", "9", 9),
    "autotune_gaussian_process_noise": (0.5, "BLINKFLOW_AUTOTUNE_GAUSSIAN_PROCESS_NOISE", "0.5", 0.5),
}


def test_table_covers_exactly_the_documented_flags():
    assert {s.param for s in SETTING_FLAGS} == set(EXPECTED)
    fields = {f.name for f in dataclasses.fields(Config)}
    assert all(s.field in fields and s.env_name == Config.env_name(s.field) for s in SETTING_FLAGS)


@pytest.mark.parametrize("param", sorted(EXPECTED))
def test_each_flag_sets_its_variable(param):
    value, var, text, parsed = EXPECTED[param]
    env = settings_env({param: value}, {})
    assert env == {var: text}
    field = next(s.field for s in SETTING_FLAGS if s.param == param)
    assert getattr(Config.from_env(env), field) == parsed


def test_cli_beats_env_beats_default():
    environ = {"BLINKFLOW_CYCLE_TIME": "7", "BLINKFLOW_LOG_LEVEL": "info", "HOME": "/root"}
    env = settings_env({"cycle_time_ms": 3.0, "log_level": None}, environ)
    assert env == {"BLINKFLOW_CYCLE_TIME": "3.0", "BLINKFLOW_LOG_LEVEL": "info"}
    assert settings_env({}, {}) == {}   # defaults come from Config itself, nothing is forwarded


def test_bad_values_fail_before_launch():
    with pytest.raises(ConfigError, match="CYCLE_TIME must be > 0"):
        settings_env({"cycle_time_ms": 0.0}, {})
    with pytest.raises(ConfigError, match="BLINKFLOW_BACKEND"):
        settings_env({}, {"BLINKFLOW_BACKEND": "tpu"})


def test_ranks_find_blinkruns_interpreter_first():
    from blinkflow.launcher.commands.run import interpreter_first_path

    assert interpreter_first_path("/usr/bin:/venv/bin:/bin", "/venv/bin") == "/venv/bin:/usr/bin:/bin"
    assert interpreter_first_path("", "/venv/bin") == "/venv/bin"
