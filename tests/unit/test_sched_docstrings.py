"""The runnable examples in the lowering, checker and simulator docstrings still run."""
import doctest

import pytest

from blinkflow.schedule import lower, symbolic
from blinkflow.sim import api


@pytest.mark.parametrize("module", [lower, symbolic, api])
def test_docstring_examples(module):
    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0
