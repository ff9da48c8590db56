"""Why a Horovod test unit failed under blinkflow: a Keras 2 spelling, a Horovod internal, a
GPU-only check, a reference Horovod itself fails, or real (a blinkflow gap). Rules match the
failure's text; a few units need a judgement that text cannot carry and are named with their
reason, and the world sizes where it holds, in :data:`BY_TEST`."""
from __future__ import annotations

import re
from typing import Dict, FrozenSet, Optional, Tuple

KERAS2, INTERNAL, GPU, REAL = "Keras 2 spelling", "Horovod internal", "GPU-only", "real"
UNFAIR = "not a fair check"
NOT_APPLICABLE = (KERAS2, INTERNAL, GPU, UNFAIR)

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

_AVERAGE = ("float32 at 3 ranks: the test wants (x*3)/3 (or x) with threshold 0; Horovod's ScaleBuffer "
            "multiplies the sum by float32(1/3) (collective_operations.cc), one ulp off in about 1 of 9 elements")
_FOLDED = ("float32 at 3 ranks in graph mode: TensorFlow's graph rewrites fold the reference's two constant "
           "factors ((f*x)*3 becomes x*(3f)), an order no all-reduce computes; Horovod's scale-and-sum differs "
           "from it as ours does; eager mode passes")
_PRODUCT = ("float16/32 at 3 ranks: a product's rounding depends on the order the ranks' factors meet, which "
            "neither MPI nor Horovod fixes; Open MPI's own MPI_PROD differs from tf.reduce_prod in 1149 of "
            "4913 float32 elements")

#: Units whose failure is judged by reading the test: test name (without the file) ->
#: (label, why, the world sizes where the judgement holds). Elsewhere their failures are real.
BY_TEST: Dict[str, Tuple[str, str, FrozenSet[int]]] = {
    "test_horovod_allreduce_average_cpu": (UNFAIR, _AVERAGE, frozenset({3})),
    "test_horovod_grouped_allreduce_average_cpu": (UNFAIR, _AVERAGE, frozenset({3})),
    "test_horovod_grouped_allreduce_mixed_indexed_slices_average_cpu": (UNFAIR, _AVERAGE, frozenset({3})),
    "test_horovod_allreduce_cpu_prescale": (UNFAIR, _FOLDED, frozenset({3})),
    "test_horovod_allreduce_cpu_postscale": (UNFAIR, _FOLDED, frozenset({3})),
    "test_horovod_reducescatter_cpu_prescale": (UNFAIR, _FOLDED, frozenset({3})),
    "test_horovod_grouped_reducescatter_cpu_prescale": (UNFAIR, _FOLDED, frozenset({3})),
    "test_horovod_allreduce_product_cpu": (UNFAIR, _PRODUCT, frozenset({3})),
    "test_horovod_grouped_allreduce_product_cpu": (UNFAIR, _PRODUCT, frozenset({3})),
}


def classify(test: str, text: str, size: Optional[int] = None) -> Tuple[str, str]:
    """(label, why) for a failed unit ``test`` whose failures read ``text`` at ``size`` ranks
    (a judgement of :data:`BY_TEST` applies only at its world sizes)."""
    name = test.split("::")[-1]
    base = re.sub(r"\[.*\]$", "", name)
    if base in BY_TEST and size in BY_TEST[base][2]:
        label, why, _ = BY_TEST[base]
        return label, why
    if re.search(r"_gpu(_|$)|_cuda(_|$)", base):
        return GPU, "a GPU test"
    for label, pattern in RULES:
        found = re.search(pattern, text)
        if found:
            return label, found.group(0)
    return REAL, ""
