"""numpy references for blinkflow's kernels, shared by the host-emulated (CPU suite) and the
GPU kernel tests so both hold the kernels to the same definition."""
import numpy as np

from blinkflow.ops import ReduceOp

OPS = {ReduceOp.SUM: np.add, ReduceOp.MIN: np.minimum, ReduceOp.MAX: np.maximum, ReduceOp.PRODUCT: np.multiply}
DTYPES = ["float16", "bfloat16", "float32", "float64", "int32", "int64", "uint8"]
STORAGE = {"bfloat16": np.uint16}  # bfloat16 travels as its uint16 bit pattern


def storage(dtype):
    return np.dtype(STORAGE.get(dtype, dtype))


def bf16_to_f32(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16(x):
    u = np.asarray(x, dtype=np.float32).view(np.uint32)
    return ((u + np.uint32(0x7FFF) + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def make_inputs(dtype, op, n, k, rng, exact=True):
    """k arrays. ``exact``: values whose combination is exact in every dtype, so the order of
    combination cannot matter; otherwise random reals (floats) to exercise rounding."""
    if op is ReduceOp.PRODUCT:
        vals = rng.choice([1, 2, 3] if dtype == "uint8" else [-2, -1, 1, 2], size=(k, n))
    elif dtype == "uint8":
        vals = rng.integers(0, 255, size=(k, n))  # sums wrap like numpy's
    elif exact or dtype.startswith("int"):
        vals = rng.integers(-60, 60, size=(k, n))
    else:
        vals = rng.normal(scale=10, size=(k, n))
    if dtype == "bfloat16":
        return [f32_to_bf16(v.astype(np.float32)) for v in vals]
    return [v.astype(dtype) for v in vals]


def reference(dtype, op, inputs):
    """Left-to-right combination; half and bfloat16 accumulate in float32 and round once."""
    fn = OPS[op]
    if dtype == "bfloat16":
        acc = bf16_to_f32(inputs[0])
        for x in inputs[1:]:
            acc = fn(acc, bf16_to_f32(x))
        return f32_to_bf16(acc)
    if dtype == "float16":
        acc = inputs[0].astype(np.float32)
        for x in inputs[1:]:
            acc = fn(acc, x.astype(np.float32))
        return acc.astype(np.float16)
    acc = inputs[0].copy()
    for x in inputs[1:]:
        acc = fn(acc, x)
    return acc
