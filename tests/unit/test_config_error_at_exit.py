"""One traceback per error: a setting that cannot be read raises ConfigError once, where the
script asked for it, and the exit hook does not raise it again."""
import os
import subprocess
import sys

import pytest

SCRIPTS = {  # a process that never calls init() has the exit hook too, once the runtime is imported
    "runtime imported": "import blinkflow as bf\nassert not bf.is_initialized()",
    "tensorflow bindings imported": "import blinkflow.tensorflow",
    "init": "import blinkflow as bf\nbf.init()",
}


@pytest.mark.parametrize("variable", ["BLINKFLOW_CYCLE_TIME", "HOROVOD_CYCLE_TIME"])
@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_a_malformed_setting_prints_one_traceback(script, variable):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BLINKFLOW_", "HOROVOD_", "OMPI_", "PMIX_"))}
    env[variable] = "fast"
    done = subprocess.run([sys.executable, "-c", SCRIPTS[script]], env=env, capture_output=True, text=True,
                          timeout=120)
    assert "Exception ignored in atexit" not in done.stderr, done.stderr
    expected = 1 if script == "init" else 0
    assert done.stderr.count("Traceback (most recent call last)") == expected, done.stderr
    if script == "init":
        assert done.returncode == 1
        assert "ConfigError" in done.stderr and f"{variable}='fast' is not a number" in done.stderr, done.stderr
    else:
        assert done.returncode == 0, done.stderr
