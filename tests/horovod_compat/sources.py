"""Where Horovod's test files come from: a folder given by the user, or the horovod sdist from
PyPI (``pip download``, the only download allowed) when it carries them."""
from __future__ import annotations

import glob
import os
import subprocess
import sys
import tarfile
from typing import Optional

VERSION = "0.28.1"
#: The files a compatibility run reads: the test files and the helpers they import.
NEEDED = ("parallel/base_test_tensorflow.py", "utils/common.py")


class Unavailable(Exception):
    """Horovod's test files cannot be had; the message says why and what to pass instead."""


def test_dir(given: Optional[str]) -> str:
    """The ``test`` folder (holding ``parallel/`` and ``utils/``) of ``given`` (a Horovod source
    tree, its ``test`` folder or its ``test/parallel`` folder)."""
    for candidate in (given, os.path.join(given, "test"), os.path.dirname(os.path.abspath(given))):
        if all(os.path.isfile(os.path.join(candidate, f)) for f in NEEDED):
            return os.path.abspath(candidate)
    raise Unavailable(f"{given} holds no Horovod test/parallel and test/utils folders")


def from_sdist(workdir: str) -> str:
    """Download horovod's sdist into ``workdir`` and return its ``test`` folder; Unavailable when
    pip cannot get it or the sdist does not ship the tests."""
    cmd = [sys.executable, "-m", "pip", "download", f"horovod=={VERSION}", "--no-deps", "--no-binary", ":all:",
           "--no-build-isolation", "-d", workdir]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    archives = glob.glob(os.path.join(workdir, f"horovod-{VERSION}.tar.gz"))
    if not archives:
        # pip prepares the metadata even for a download; the archive is there if it was fetched.
        raise Unavailable(f"pip download horovod=={VERSION} failed: {proc.stderr.strip()[-500:]}")
    with tarfile.open(archives[0]) as tar:
        names = tar.getnames()
        prefix = f"horovod-{VERSION}/test/"
        wanted = [n for n in names if n.startswith(prefix + "parallel/") or n.startswith(prefix + "utils/")]
        if not all(prefix + f in names for f in NEEDED):
            raise Unavailable(f"the horovod {VERSION} sdist on PyPI ships no test/ folder (only the package and "
                              "its C++ sources); pass --tests with a Horovod v0.28.1 checkout")
        tar.extractall(workdir, members=[tar.getmember(n) for n in wanted], filter="data")
    return os.path.join(workdir, prefix)
