"""The runnable examples in the planner's docstrings still run."""
import doctest

import pytest

from blinkflow.planner import make, maxflow, multihost, refinement, ring, star


@pytest.mark.parametrize("module", [make, maxflow, multihost, refinement, ring, star])
def test_docstring_examples(module):
    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0
