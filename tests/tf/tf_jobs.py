"""The TensorFlow case scripts' launches: each job is one mpirun launch whose every rank imports
TensorFlow once and runs the cases of several scripts (tests/harness.py ``launch_scripts``); the
test files read their script's cases from the jobs that run it, each case a pytest test.

A script runs in a job of the world size and settings it is tested under; scripts that share
both share a job. The tests of one job form one pytest-xdist group, so the launch runs once.
"""
import dataclasses
import os
from typing import Dict, List, Mapping, Sequence, Tuple

import pytest

from harness import case_names, fake_cupy_env, launch_scripts

HERE = os.path.dirname(os.path.abspath(__file__))
ONE_GRADIENT_PER_BUCKET = {"BLINKFLOW_BUCKET_BYTES": "1"}
ONE_BUCKET = {"BLINKFLOW_BUCKET_BYTES": "0"}
#: Inter-op threads of TensorFlow in a job's ranks (script_checks.py reads it; 1 unless set).
INTER_OP_THREADS = "TESTS_TF_INTER_OP_THREADS"
HOROVOD_ROWS = {INTER_OP_THREADS: "2", "BLINKFLOW_STALL_SHUTDOWN_TIME_SECONDS": "30"}


def device_route(n: int, **settings: str) -> Dict[str, str]:
    """TF tensors cross by DLPack into the cuda backend, the fake CuPy's (one device for the job)."""
    return fake_cupy_env(BLINKFLOW_BACKEND="cuda", BLINKFLOW_TOPOLOGY=f"cpu-host:{n}", **settings)


#: The case subset of fit_script.py that the 4-rank and device-route jobs run: the variants that do
#: not depend on the number of ranks or the route (saving and loading a model, the optimizer's
#: config: the costliest case, three models traced) are left to the 2-rank run on the host.
FIT_CORE = "fit_script.py:" + ",".join(["fit_compiled", "fit_run_eagerly", "fit_embedding", "aggregated_passes",
                                        "metric_average", "learning_rate_warmup_and_schedule",
                                        "broadcast_callback_adam"])


@dataclasses.dataclass(frozen=True)
class Job:
    n: int
    scripts: Tuple[str, ...]     # ``x_script.py`` or ``x_script.py:case,case`` (in tests/tf)
    env: Tuple[Tuple[str, str], ...] = ()
    timeout: float = 600

    def specs(self) -> List[str]:
        return [os.path.join(HERE, spec) for spec in self.scripts]


def _job(n: int, scripts: Sequence[str], env: Mapping[str, str] = (), timeout: float = 600) -> Job:
    return Job(n, tuple(scripts), tuple(sorted(dict(env).items())), timeout)


JOBS: Dict[str, Job] = {
    # The host route (the cpu backend). Bucketing at both ends: the default size (these small
    # models' gradients in one bucket), every gradient a bucket of its own, or one bucket.
    # Horovod's TF semantics and layers (gradient_rows, layers) run at every size they are tested
    # at, with two inter-op threads, so a TF1 graph step may run its grouped gradients'
    # collectives side by side; a rank that skips a collective there ends the job at the stall
    # shutdown time, not the launch's timeout. Unnamed collectives in control flow
    # (naming_script.py) run under that short stall shutdown too: a name that differs by rank
    # fails its case in 30 s instead of hanging. The layers run with a bucket per gradient too:
    # a convolution with (Sync)BatchNormalization in model.fit over several buckets is where the
    # submit order once closed a cycle in the step's graph. Scripts whose settings agree share a
    # job: every rank of a job imports TensorFlow once (about 4 CPU-seconds), and the suite is
    # bound by its CPU time. Horovod's examples and our script in their idioms run in a job too,
    # each as __main__ in the process that imported TensorFlow for the job.
    "host-1-layers": _job(1, ["layers_script.py"]),
    "host-2": _job(2, ["ops_script.py", "parity_script.py", "refusal_script.py", "uneven_fit_script.py",
                       "horovod_examples_script.py"]),
    "host-2-buckets": _job(2, ["buckets_script.py", "fit_script.py", "gradient_rows_script.py", "layers_script.py",
                               "naming_script.py"], dict(ONE_GRADIENT_PER_BUCKET, **HOROVOD_ROWS)),
    "host-2-one-bucket": _job(2, ["gradient_identity_script.py", "xla_script.py"], ONE_BUCKET),
    "host-3-buckets": _job(3, ["parity_script.py", "refusal_script.py", "uneven_fit_script.py",
                               "gradient_identity_script.py", "xla_script.py", "buckets_script.py",
                               "gradient_rows_script.py", "layers_script.py"],
                           dict(ONE_GRADIENT_PER_BUCKET, **HOROVOD_ROWS)),
    "host-4": _job(4, ["ops_script.py", FIT_CORE]),
    # The device route: TF tensors by DLPack into the cuda backend (the fake CuPy).
    "device-2-buckets": _job(2, ["ops_script.py", "parity_script.py", "buckets_script.py", FIT_CORE],
                             device_route(2, **ONE_GRADIENT_PER_BUCKET)),
    "device-3": _job(3, ["ops_script.py"], device_route(3)),
    # A GPU per rank (the fake's), TF shown one: DLPack device ids under set_visible_devices.
    "gpu-per-rank-tf-sees-one": _job(2, ["devices_tf_script.py:ids_follow_the_memory_under_set_visible_devices"],
                                     device_route(2, FAKE_CUPY_DEVICES="2", FAKE_CUPY_TF_SEES_ONE="1",
                                                  FAKE_CUPY_NO_PEER="0-1")),
    "gpu-per-rank": _job(2, ["devices_tf_script.py:the_crossing_inside_tf_function_stays_on_the_gpu",
                             "sync_tf_script.py"], device_route(2, FAKE_CUPY_DEVICES="2")),
}


def _cases(spec: str) -> List[str]:
    path, _, only = spec.partition(":")
    return [c for c in case_names(os.path.join(HERE, path)) if not only or c in only.split(",")]


def params(script: str) -> List:
    """``(job, case)`` parameters of every case of ``script`` in every job that runs it, each in
    its job's xdist group."""
    found = []
    for name, job in JOBS.items():
        for spec in job.scripts:
            if spec.partition(":")[0] == script:
                found += [pytest.param(name, case, id=f"{name}-{case}", marks=pytest.mark.xdist_group(f"tf-{name}"))
                          for case in _cases(spec)]
    return found


def expect(job_name: str, script: str, case: str) -> None:
    """Report ``case`` of ``script`` as the job ``job_name`` ran it (launched on first use)."""
    job = JOBS[job_name]
    stem = os.path.splitext(script)[0]
    launch_scripts(job.n, job.specs(), env=dict(job.env), timeout=job.timeout).expect(f"{stem}.{case}")
