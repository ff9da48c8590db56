"""A non-editable install carries kernels/ and launcher/ inside the blinkflow namespace.

Builds a wheel from a copy of the source tree (so no build/ or egg-info lands in the checkout),
checks its contents, installs it into a private folder and runs it from elsewhere.
"""
import os
import pathlib
import shutil
import subprocess
import sys
import zipfile

import pytest

import blinkflow.kernels

REPO = pathlib.Path(__file__).resolve().parents[2]
IGNORE = shutil.ignore_patterns(".git", ".venv", "build", "dist", "*.egg-info", "__pycache__",
                                ".hypothesis", ".pytest_cache", "*.pyc")


def pip(*args, cwd=None):
    done = subprocess.run([sys.executable, "-m", "pip", *args, "--disable-pip-version-check", "-q"],
                          capture_output=True, text=True, timeout=300, cwd=cwd)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


@pytest.mark.slow
def test_wheel_ships_kernels_and_launcher(tmp_path):
    if not (REPO / "setup.cfg").is_file():
        pytest.skip("not running from a source checkout")
    src = tmp_path / "src"
    shutil.copytree(REPO, src, ignore=IGNORE)
    pip("wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp_path / "wheel"), str(src))
    (wheel,) = (tmp_path / "wheel").glob("blinkflow-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = {"blinkflow/kernels/__init__.py", "blinkflow/launcher/cli.py", "blinkflow/launcher/commands/topo.py",
                "blinkflow/launcher/ranks/pyhook/sitecustomize.py", "blinkflow/launcher/flags/table.py",
                "blinkflow/launcher/job/supervise.py", "blinkflow/launcher/elastic/driver.py",
                "blinkflow/tensorflow/crossing/xla.py", "blinkflow/tensorflow/keras/callbacks.py",
                "blinkflow/topology/nvidia_smi.py"}
    expected |= {f"blinkflow/kernels/{p.name}" for p in blinkflow.kernels.sources()}
    assert expected <= names, sorted(expected - names)
    assert not any(n.startswith(("kernels/", "launcher/")) for n in names)  # no generic top-level names

    site = tmp_path / "site"
    pip("install", "--no-deps", "--target", str(site), str(wheel))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {**os.environ, "PYTHONPATH": str(site)}
    probe = subprocess.run([sys.executable, "-c", "import blinkflow.kernels as k, blinkflow.launcher.cli as c; "
                            "print(k.SOURCE_DIR); print(c.__file__)"],
                           capture_output=True, text=True, timeout=60, cwd=elsewhere, env=env)
    assert probe.returncode == 0, probe.stderr
    for line in probe.stdout.split():
        assert pathlib.Path(line).resolve().is_relative_to(site.resolve()), line
    topo = subprocess.run([sys.executable, "-m", "blinkflow.launcher.cli", "topo", "--preset", "dgx1-v100"],
                          capture_output=True, text=True, timeout=60, cwd=elsewhere, env=env)
    assert topo.returncode == 0, topo.stderr
    assert "NV2/50" in topo.stdout
