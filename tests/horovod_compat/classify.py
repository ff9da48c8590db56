"""Why a Horovod test unit failed under blinkflow: a Keras 2 spelling, a Horovod internal, a
GPU-only check, or real (a blinkflow gap). Rules match the failure's text; a few units need a
judgement that text cannot carry and are named with their reason in :data:`BY_TEST`."""
from __future__ import annotations

import re
from typing import Dict, Tuple

KERAS2, INTERNAL, GPU, REAL = "Keras 2 spelling", "Horovod internal", "GPU-only", "real"
NOT_APPLICABLE = (KERAS2, INTERNAL, GPU)

#: (label, pattern on the error and traceback), first match wins.
RULES = (
    (INTERNAL, r"HorovodInternal|Horovod internal:"),
    (INTERNAL, r"module 'blinkflow[\w.]*' has no attribute '(_\w+|mpi_ops|basics|util|functions)'"),
    (KERAS2, r"keras\.optimizers\.legacy|optimizer_v2|OptimizerV2|tensorflow\.python\.keras"),
    (KERAS2, r"experimental_run_tf_function|get_session|has no attribute '(lr|decay|get_updates|_decayed_lr|"
             r"get_gradients|_compute_gradients|_create_slots|get_slot_names|_set_hyper|_get_hyper)'"),
    # Keras 3 removed ``lr=`` and made ``learning_rate`` a required argument of Optimizer.__init__.
    (KERAS2, r"Argument\(s\) not recognized: \{'lr'|__init__\(\) missing 1 required positional argument: "
             r"'learning_rate'"),
    (KERAS2, r"keras\.backend' has no attribute|K\.(get_value|set_value|eval)"),
    # BatchNormalization(fused=False): Keras 3 has no fused kernel and refuses the argument.
    (KERAS2, r"Unrecognized keyword arguments passed to BatchNormalization: \{'fused'"),
    # Keras 3 variables have no tf.Variable.ref(): Horovod's tests key dicts by var.ref().
    (KERAS2, r"'Variable' object has no attribute 'ref'"),
)

#: Units whose failure is judged by reading the test: test name (without the file) -> (label, why).
BY_TEST: Dict[str, Tuple[str, str]] = {}


def classify(test: str, text: str) -> Tuple[str, str]:
    """(label, why) for a failed unit ``test`` whose failures read ``text``."""
    name = test.split("::")[-1]
    base = re.sub(r"\[.*\]$", "", name)
    if base in BY_TEST:
        return BY_TEST[base]
    if re.search(r"_gpu(_|$)|_cuda(_|$)", base):
        return GPU, "a GPU test"
    for label, pattern in RULES:
        found = re.search(pattern, text)
        if found:
            return label, found.group(0)
    return REAL, ""
