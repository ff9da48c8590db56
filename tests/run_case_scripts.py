"""Run on every rank of a job: the case scripts named on the command line (``path`` or
``path:case,case``), one after another in this one process (tests/harness.py, ``run_scripts``)."""
import sys

from harness import job_rank_size, run_scripts

if __name__ == "__main__":
    run_scripts(sys.argv[1:], *job_rank_size())
