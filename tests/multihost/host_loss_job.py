"""The job of both host-loss tests: tests/elastic/fit_script.py on 2 + 2 ranks (``bfa``,
``bfb``) under ``blinkrun --min-np 2``; when rank 2 reaches the batch of epoch 2 at which it
writes its marker file, ``act(cluster)`` takes ``bfb`` away (its processes killed, or its network and then its
processes) or cuts the two hosts apart (``script_args``: the script's LOGDIR, where every rank writes its lines)."""
import dataclasses
import os
import re
import sys
import threading
import time
from typing import Callable, List, Optional, Sequence, Tuple

from blinkrun_helpers import blinkrun_argv

SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "elastic", "fit_script.py")
RUN_TIMEOUT_S = 600   # four TensorFlow ranks start slowly on a shared two-core machine


@dataclasses.dataclass
class Outcome:
    proc: object
    acted_at: Optional[float]
    """When ``act`` returned (monotonic seconds); None: rank 2 never reached the batch."""
    ended: float
    left_on_bfa: List[str]
    """Processes still running on ``bfa`` when blinkrun returned."""


def run(cluster, tmp_path, act: Callable[[object], None], script_args: Sequence[str] = ()) -> Outcome:
    marker = str(tmp_path / "host-goes-away")
    done, acted = threading.Event(), []

    def act_when_told():
        while not done.is_set():
            if os.path.exists(marker):
                act(cluster)
                acted.append(time.monotonic())
                return
            time.sleep(0.1)

    watcher = threading.Thread(target=act_when_told, daemon=True)
    watcher.start()
    try:
        proc = cluster.run_on("bfa", blinkrun_argv() + ["-np", "4", "-H", "bfa:2,bfb:2", "--min-np", "2",
                                                        sys.executable, SCRIPT, marker, *script_args],
                              env=cluster.env(), timeout=RUN_TIMEOUT_S)
        ended = time.monotonic()
    finally:
        done.set()
        watcher.join()
    return Outcome(proc, acted[0] if acted else None, ended, cluster.processes("bfa"))


def context(proc) -> str:
    """The ends of the job's output for an assertion message, without the module lists that
    faulthandler prints after a crashed rank's stacks (thousands of characters each)."""
    err = re.sub(r"(?m)^.*Extension modules: .*$", "", proc.stderr)
    return proc.stdout[-4000:] + err[-12000:]


FINAL = re.compile(r"^\[\d+\]<stdout>: FINAL rank (\d+) resets (\d+) epoch (\d+) weights (\w+)$", re.M)
"""The line each rank of fit_script.py prints when it finished training."""


def survivors(proc) -> List[int]:
    """The ranks that finished training, in order, after checking that they agree: every one went
    through exactly one reset, ended at the last epoch (6) and holds bitwise equal weights."""
    final: List[Tuple[str, str, str, str]] = FINAL.findall(proc.stdout)
    assert {(resets, epoch) for _, resets, epoch, _ in final} == {("1", "6")}, f"{final}\n{context(proc)}"
    assert len({digest for *_, digest in final}) == 1, f"{final}\n{context(proc)}"
    return sorted(int(rank) for rank, *_ in final)
