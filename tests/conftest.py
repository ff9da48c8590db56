"""Shared test fixtures. Tests import the installed package (``make test`` installs it)."""
import os
import pathlib
import shutil
import tempfile

import pytest

# Every new call shape of every test (and of the ranks it launches) is proven before it runs,
# once per session: the launches prove the same schedules again and again, so they share their
# proofs in one folder (blinkflow/schedule/proofs.py), made by the first process that loads this
# file (pytest-xdist's workers inherit it from the controller) and removed by it at the end.
os.environ.setdefault("BLINKFLOW_CHECK_SCHEDULES", "1")
_OWN_PROOFS = "BLINKFLOW_CHECK_CACHE" not in os.environ
if _OWN_PROOFS:
    os.environ["BLINKFLOW_CHECK_CACHE"] = tempfile.mkdtemp(prefix="blinkflow-proofs-")


def pytest_unconfigure(config):
    if _OWN_PROOFS and not hasattr(config, "workerinput"):
        shutil.rmtree(os.environ["BLINKFLOW_CHECK_CACHE"], ignore_errors=True)


FIXTURES = pathlib.Path(__file__).resolve().parent / "fixtures"


@pytest.fixture
def fixtures_dir():
    return FIXTURES


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Tests parametrized by ``case`` read one launch per set of their other parameters
    (tests/harness.py runs it once per process): under pytest-xdist's ``--dist loadgroup`` those
    tests form one group, so the launch runs once, on one worker. A test may name its group
    itself (``@pytest.mark.xdist_group``) when several test functions share a launch. The
    two-host tests share one session-wide cluster of network namespaces, which two workers would
    each build under the same names: they form one group too."""
    for item in items:
        if item.path.parent.name == "multihost" and not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group("multihost"))
            continue
        callspec = getattr(item, "callspec", None)
        if callspec is None or "case" not in callspec.params or item.get_closest_marker("xdist_group"):
            continue
        others = {k: v for k, v in callspec.params.items() if k != "case"}
        item.add_marker(pytest.mark.xdist_group(launch_group(item.module.__name__, item.originalname, others)))


def launch_group(module: str, function: str, params) -> str:
    """The xdist group of the tests of one launch: one name per set of parameters. pytest-xdist
    reads a test's group from its id's text after the last ``@`` only when no ``]`` follows it,
    and otherwise schedules the test alone (each worker then runs the launch itself): the name
    holds neither."""
    text = ",".join(f"{k}={params[k]}" for k in sorted(params))
    return f"{module}.{function}:" + text.translate(str.maketrans("[]@", "()_"))
