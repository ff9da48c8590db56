"""Run by test_policy_agreement.py: rank 1 alone sets one input of the call-shape policy
(``sys.argv[1]``, a BLINKFLOW_* variable, to ``sys.argv[2]``) before blinkflow reads its
settings, as a launcher would; then every rank calls ``init()``.

argv: VARIABLE VALUE [CASE ...]
"""
import os
import sys

from harness import job_rank_size, run_cases

VARIABLE, VALUE = sys.argv[1], sys.argv[2]


def init_with_rank_1_set():
    """``init()`` after rank 1 alone set the input; returns blinkflow."""
    rank, _ = job_rank_size()
    if rank == 1:
        os.environ[VARIABLE] = VALUE
    import blinkflow as bf

    bf.init()
    return bf


def case_a_different_input_on_one_rank_stops_every_rank(rank, size):
    """Every rank's init fails with a ConfigError naming the setting, instead of ranks choosing
    different algorithms or chunks."""
    from blinkflow.errors import ConfigError

    try:
        bf = init_with_rank_1_set()
    except ConfigError as e:
        assert f"{VARIABLE}={VALUE}" in str(e), str(e)
    else:
        bf.shutdown()
        raise AssertionError(f"init() started with {VARIABLE}={VALUE} on rank 1 alone")


def case_the_same_inputs_everywhere_start(rank, size):
    bf = init_with_rank_1_set()
    assert bf.size() == size
    bf.shutdown()


if __name__ == "__main__":
    run_cases(globals(), *job_rank_size(), only=sys.argv[3:])
