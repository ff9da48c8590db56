"""The runnable examples in the topology docstrings stay true."""
import doctest

import pytest

import blinkflow.topology.nvidia_smi
import blinkflow.topology.resolve


@pytest.mark.parametrize("module", [blinkflow.topology.nvidia_smi, blinkflow.topology.resolve])
def test_docstring_examples(module):
    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0
