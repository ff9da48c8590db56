"""Horovod's scaling arithmetic (blinkflow.scaling): its array, TensorFlow and CUDA-kernel forms
agree with each other bit for bit and with the rule written out element by element: integers in
float64 truncated toward zero, float16 in float32, other floats in their own precision, an
Average of integers exact. The kernel is the real ``kernels/scale.cu`` built for the host."""
import ctypes

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from blinkflow import scaling

from kernel_host import CXX, build
from kernel_reference import bf16_to_f32, f32_to_bf16

INTEGERS = ["int8", "int32", "int64", "uint8", "uint64"]
FLOATS = ["float16", "float32", "float64"]
KERNEL_DTYPES = ["float16", "float32", "float64", "int32", "int64", "uint8"]  # numpy-held kernel dtypes
EXAMPLES = settings(max_examples=60, deadline=None)


def _values(dtype: str, size=st.integers(0, 40)):
    """Arrays whose products with :func:`_factors` stay inside the dtype (out-of-range
    conversions are undefined in C and differ between libraries), away from subnormals (which
    TensorFlow flushes to zero)."""
    dt = np.dtype(dtype)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        elements = st.integers(max(info.min // 8, -2**50), min(info.max // 8, 2**50))
    elif dt.kind == "b":
        elements = st.booleans()
    else:
        magnitude = st.floats(0.125, 500.0, width=16 if dtype == "float16" else 32)
        elements = st.one_of(st.just(0.0), magnitude, magnitude.map(lambda v: -v))
    return hnp.arrays(dt, size, elements=elements)


def _factors(dtype: str):
    magnitude = st.floats(0.01, 4.0)
    if np.dtype(dtype).kind in "ub":
        return magnitude  # an unsigned product must stay >= 0
    return st.one_of(magnitude, magnitude.map(lambda v: -v))


def _by_hand(x: np.ndarray, factor: float) -> np.ndarray:
    """Horovod's rule applied element by element with Python scalars."""
    dt = x.dtype
    if dt.kind in "iu":
        return np.array([int(float(v) * factor) for v in x.tolist()], dtype=dt)  # int() truncates toward zero
    if dt.kind == "b":
        return np.array([float(v) * factor != 0 for v in x.tolist()], dtype=dt)
    if dt == np.float16:
        return np.array([np.float16(np.float32(v) * np.float32(factor)) for v in x], dtype=dt)
    return np.array([dt.type(v) * dt.type(factor) for v in x], dtype=dt)


@pytest.mark.parametrize("dtype", INTEGERS + FLOATS + ["bool"])
@EXAMPLES
@given(data=st.data())
def test_array_form_is_horovods_rule(dtype, data):
    x = data.draw(_values(dtype))
    factor = data.draw(_factors(dtype))
    want = _by_hand(x, factor)
    got = x.copy()
    scaling.scale(got, factor)
    np.testing.assert_array_equal(got, want)
    copied = np.full_like(x, 7)
    scaling.scaled_copy(x, copied, factor)
    np.testing.assert_array_equal(copied, want)


@pytest.mark.parametrize("dtype", INTEGERS + FLOATS + ["bool"])
@EXAMPLES
@given(data=st.data())
def test_tensorflow_form_matches_the_array_form(dtype, data):
    tf = pytest.importorskip("tensorflow")
    x = data.draw(_values(dtype))
    factor = data.draw(_factors(dtype))
    want = x.copy()
    scaling.scale(want, factor)
    got = scaling.tf_scaled(tf.constant(x), factor).numpy()
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    if CXX is None:
        pytest.skip("no C++ compiler to build kernels/scale.cu for the host")
    return build(tmp_path_factory.mktemp("scaling_kernel"))


def _run_kernel(lib, dtype: str, buf: np.ndarray, factor: float) -> None:
    getattr(lib, f"scale_{dtype}")(ctypes.c_void_p(buf.ctypes.data), ctypes.c_void_p(buf.ctypes.data),
                                   ctypes.c_double(scaling.kernel_factor(dtype, factor)),
                                   ctypes.c_longlong(buf.size), ctypes.c_int(2), ctypes.c_int(8))


@pytest.mark.parametrize("dtype", KERNEL_DTYPES)
@EXAMPLES
@given(data=st.data())
def test_cuda_kernel_matches_the_array_form(kernel, dtype, data):
    x = data.draw(_values(dtype, size=st.integers(0, 70)))  # 16-byte vectors and a scalar tail
    factor = data.draw(_factors(dtype))
    want = x.copy()
    scaling.scale(want, factor)
    got = x.copy()
    _run_kernel(kernel, dtype, got, factor)
    np.testing.assert_array_equal(got, want)


@EXAMPLES
@given(data=st.data())
def test_bfloat16_kernel_matches_tensorflow(kernel, data):
    """bfloat16 has no numpy form: TensorFlow's product in bfloat16 is the reference."""
    tf = pytest.importorskip("tensorflow")
    x = data.draw(_values("float32", size=st.integers(0, 70)))
    factor = data.draw(_factors("float32"))
    bits = f32_to_bf16(x)
    want = scaling.tf_scaled(tf.cast(tf.constant(bf16_to_f32(bits)), tf.bfloat16), factor)
    _run_kernel(kernel, "bfloat16", bits, factor)
    np.testing.assert_array_equal(bf16_to_f32(bits), tf.cast(want, tf.float32).numpy())


def _exact_average(values, size: int):
    """Integer division truncated toward zero, in Python's unbounded integers."""
    return [abs(v) // size * (1 if v >= 0 else -1) for v in values]


@pytest.mark.parametrize("dtype", INTEGERS)
@EXAMPLES
@given(data=st.data(), size=st.integers(1, 300))
def test_average_of_integers_is_exact(dtype, data, size):
    info = np.iinfo(dtype)
    x = data.draw(hnp.arrays(np.dtype(dtype), st.integers(0, 30), elements=st.integers(int(info.min), int(info.max))))
    want = np.array(_exact_average(x.tolist(), size), dtype=dtype)
    got = x.copy()
    scaling.average(got, size)
    np.testing.assert_array_equal(got, want)
    tf = pytest.importorskip("tensorflow")
    np.testing.assert_array_equal(scaling.tf_averaged(tf.constant(x), size).numpy(), want)


@pytest.mark.parametrize("dtype", INTEGERS + FLOATS)
@EXAMPLES
@given(data=st.data(), size=st.integers(1, 64), postscale=st.floats(0.25, 4.0))
def test_average_with_a_postscale_matches_tensorflow(dtype, data, size, postscale):
    """One scale by ``postscale / size``, the factor computed first (Horovod divides the
    postscale by the size, then scales), integers included."""
    x = data.draw(_values(dtype))
    got = x.copy()
    scaling.average(got, size, postscale)
    want = _by_hand(x, postscale / size)
    np.testing.assert_array_equal(got, want)
    tf = pytest.importorskip("tensorflow")
    np.testing.assert_array_equal(scaling.tf_averaged(tf.constant(x), size, postscale).numpy(), want)


def test_average_of_integers_with_a_postscale_scales_by_one_factor():
    """``5 * (0.6 / 3)`` is ``0.999...`` in float64 and truncates to 0, as Horovod's ScaleBuffer
    with its postscale already divided by the size; ``5 * 0.6 / 3`` would give 1."""
    got = np.array([5, -5], np.int32)
    scaling.average(got, 3, 0.6)
    assert got.tolist() == [0, 0]
    tf = pytest.importorskip("tensorflow")
    assert scaling.tf_averaged(tf.constant([5, -5], tf.int32), 3, 0.6).numpy().tolist() == [0, 0]


def test_average_uses_the_given_scale_for_floats():
    calls = []
    buf = np.array([3.0, -1.5], np.float32)
    scaling.average(buf, 3, 2.0, scale=lambda b, f: calls.append((b is buf, f)))
    assert calls == [(True, 2.0 / 3)]


def test_average_truncates_toward_zero_without_overflow():
    big = np.array([np.iinfo(np.int64).max, -7, 7, -128 * 3], np.int64)
    scaling.average(big, 3)
    assert big.tolist() == [np.iinfo(np.int64).max // 3, -2, 2, -128]  # float64 would round the first
    small = np.array([-128, -127, 127], np.int8)
    scaling.average(small, 2)
    assert small.tolist() == [-64, -63, 63]
    many = np.array([-128, 127, 0], np.int8)
    scaling.average(many, 200)  # more ranks than int8 can count
    assert many.tolist() == [0, 0, 0]
    unsigned = np.array([2**64 - 1], np.uint64)
    scaling.average(unsigned, 5)
    assert unsigned.tolist() == [(2**64 - 1) // 5]


def test_kernel_factor_rounds_as_the_kernel_multiplies():
    assert scaling.kernel_factor("float16", 1 / 3) == float(np.float32(1 / 3))  # float16 scales in float32
    assert scaling.kernel_factor("float32", 1 / 3) == float(np.float32(1 / 3))
    assert scaling.kernel_factor("float64", 1 / 3) == 1 / 3
    assert scaling.kernel_factor("int32", 0.5) == 0.5
    bf = scaling.kernel_factor("bfloat16", 1 / 3)
    assert np.float32(bf).view(np.uint32) & 0xFFFF == 0  # a bfloat16 value
    assert abs(bf - 1 / 3) < 2 ** -9


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "int32", "uint8", "int64", "bool"])
@pytest.mark.parametrize("is_average, postscale", [(True, 1.0), (True, 0.5), (False, 1.0), (False, 3.0)])
def test_what_an_algorithm_folds_and_what_finishes_after_make_horovods_scaling(dtype, is_average, postscale):
    """An all-reduce's scaling split in two (the factor the algorithm folds into its last write,
    then what finish() does on the result) gives what scaling a summed buffer all at once gives."""
    size = 3
    summed = np.array([7, -8, 9, 0, 1], dtype=np.float64).astype(dtype) if dtype != "uint8" else \
        np.array([7, 8, 9, 0, 1], dtype=dtype)
    want = summed.copy()
    if is_average:
        scaling.average(want, size, postscale)
    else:
        scaling.scale(want, postscale)
    got = summed.copy()
    scaling.scale(got, scaling.folded_factor(is_average, postscale, size, got.dtype))   # the algorithm's last write
    scaling.finish(got, is_average, postscale, size)
    np.testing.assert_array_equal(got, want)
    folds = got.dtype.kind in "fc"
    assert (scaling.folded_factor(is_average, postscale, size, got.dtype) != 1.0) == (folds and (is_average or postscale != 1.0))


def test_a_predivided_average_is_a_sum_scaled_before_and_after():
    from blinkflow.ops import ReduceOp

    assert scaling.predivided(ReduceOp.AVERAGE, 4, 1.0) == (ReduceOp.AVERAGE, 1.0, 1.0)
    assert scaling.predivided(ReduceOp.AVERAGE, 4, 2.0) == (ReduceOp.SUM, 0.5, 0.5)
