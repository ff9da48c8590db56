"""Run the real ``blinkrun`` console script (the one installed beside this interpreter) with a timeout."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from typing import Dict, List, Optional, Sequence

PY = sys.executable


def blinkrun_argv() -> List[str]:
    beside = os.path.join(os.path.dirname(sys.executable), "blinkrun")
    if os.path.exists(beside):
        return [beside]
    found = shutil.which("blinkrun")
    return [found] if found else [sys.executable, "-m", "blinkflow.launcher"]


def test_env(extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    env = dict(os.environ)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env.update(extra or {})
    return env


def run_blinkrun(args: Sequence[str], timeout: float = 90, env=None) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(blinkrun_argv() + list(args), capture_output=True, text=True, timeout=timeout,
                              env=test_env(env))
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
        raise AssertionError(f"blinkrun {' '.join(args)} timed out after {timeout}s\n--- stdout ---\n{out[-3000:]}"
                             f"\n--- stderr ---\n{err[-3000:]}") from None


def popen_blinkrun(args: Sequence[str], env=None) -> subprocess.Popen:
    """Started in its own session, so a test can clean up everything it started by process group."""
    return subprocess.Popen(blinkrun_argv() + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=test_env(env), start_new_session=True)
