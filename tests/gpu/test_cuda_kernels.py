"""The CUDA kernels against numpy, for every op x dtype, on aligned (vector) and misaligned
(scalar) pointers and sizes with a tail. The references are shared with the host-emulated run
of the same kernels in the CPU suite (tests/unit/test_kernels_host.py)."""
import numpy as np
import pytest

from blinkflow.ops import ReduceOp

from kernel_reference import DTYPES, OPS, bf16_to_f32, f32_to_bf16, make_inputs, reference

SIZES = [1, 7, 1000, 4099]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("k", [2, 3, 8])
@pytest.mark.parametrize("misalign", [0, 1])
def test_reduce_matches_numpy(dtype, op, k, misalign):
    import cupy

    from blinkflow.backends.cuda.launch import reduce

    rng = np.random.default_rng(hash((dtype, int(op), k)) % 2**32)
    for n in SIZES:
        host = make_inputs(dtype, op, n + misalign, k, rng, exact=False)
        dev = [cupy.asarray(h)[misalign:] for h in host]  # misalign=1 forces the scalar path
        out = cupy.zeros_like(dev[0])
        out2 = cupy.zeros_like(dev[0])
        reduce(out, dev, op, out2=out2, dtype=dtype)
        want = reference(dtype, op, [h[misalign:] for h in host])
        np.testing.assert_array_equal(cupy.asnumpy(out), want, err_msg=f"{dtype} {op.name} n={n}")
        np.testing.assert_array_equal(cupy.asnumpy(out2), want)


@pytest.mark.parametrize("dtype", DTYPES)
def test_reduce_in_place(dtype):
    import cupy

    from blinkflow.backends.cuda.launch import reduce

    rng = np.random.default_rng(3)
    a, b = make_inputs(dtype, ReduceOp.SUM, 1001, 2, rng)
    buf = cupy.asarray(a)
    reduce(buf, [buf, cupy.asarray(b)], ReduceOp.SUM, dtype=dtype)  # local = local + slot
    np.testing.assert_array_equal(cupy.asnumpy(buf), reference(dtype, ReduceOp.SUM, [a, b]))


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "int32", "int64", "uint8"])
@pytest.mark.parametrize("factor", [0.5, 1 / 3, 3.0])
def test_scale_matches_cpu_backend_semantics(dtype, factor):
    import cupy

    from blinkflow.backends.base import Backend
    from blinkflow.backends.cuda.launch import scale

    rng = np.random.default_rng(5)
    host = rng.integers(0, 80, size=1037).astype(dtype)  # x3 stays inside uint8
    want = host.copy()
    Backend.scale(None, want, factor)  # the reference semantics every backend shares
    dev = cupy.asarray(host)
    scale(dev, factor)
    np.testing.assert_array_equal(cupy.asnumpy(dev), want)


def test_scale_bfloat16():
    import cupy

    from blinkflow.backends.cuda.launch import kernel_factor, scale

    x = f32_to_bf16(np.arange(-50, 50, dtype=np.float32) / 7)
    dev = cupy.asarray(x)
    scale(dev, 0.25, dtype="bfloat16")
    want = f32_to_bf16(bf16_to_f32(x) * np.float32(kernel_factor("bfloat16", 0.25)))
    np.testing.assert_array_equal(cupy.asnumpy(dev), want)


@pytest.mark.parametrize("dtype", ["uint8", "float16", "float32", "float64"])
def test_pack_unpack_round_trip(dtype):
    import cupy

    from blinkflow.backends.cuda.launch import pack, unpack

    rng = np.random.default_rng(9)
    sizes = [0, 1, 5, 4096, 33, 70001]
    tensors = [cupy.asarray(rng.integers(0, 100, size=s).astype(dtype)) for s in sizes]
    flat = cupy.zeros(sum(sizes) + 3, dtype=dtype)
    pack(flat, tensors)
    np.testing.assert_array_equal(cupy.asnumpy(flat[:sum(sizes)]), np.concatenate([cupy.asnumpy(t) for t in tensors]))
    outs = [cupy.empty_like(t) for t in tensors]
    unpack(flat, outs)
    for t, o in zip(tensors, outs):
        np.testing.assert_array_equal(cupy.asnumpy(o), cupy.asnumpy(t))


def test_compile_error_carries_source_and_options(monkeypatch):
    from blinkflow.backends.cuda import kernels
    from blinkflow.errors import KernelCompileError

    kernels.clear_cache()
    monkeypatch.setattr(kernels, "module_source", lambda name: "this is not CUDA;")
    try:
        with pytest.raises(KernelCompileError, match=r"kernels/reduce\.cu.*-std=c\+\+14"):
            kernels.get_module("reduce.cu")
    finally:
        kernels.clear_cache()


def test_reduce_and_scale_past_two_to_the_31_elements():
    """Index math is 64-bit: a uint8 buffer of 2**31 + 1000 elements is combined to its last
    element (an int index would wrap and leave the end untouched, or fault)."""
    import cupy

    from blinkflow.backends.cuda.launch import reduce, scale

    n = 2**31 + 1000
    if cupy.cuda.Device().mem_info[0] < 3 * n + (1 << 30):
        pytest.skip("needs about 7.5 GB of free GPU memory")
    a = cupy.ones(n, dtype=cupy.uint8)
    b = cupy.ones(n, dtype=cupy.uint8)
    out = cupy.zeros(n, dtype=cupy.uint8)
    reduce(out, [a, b], ReduceOp.SUM)
    assert int(cupy.count_nonzero(out != 2)) == 0
    del a, b
    scale(out, 3.0)  # in place
    assert int(cupy.count_nonzero(out != 6)) == 0
    assert int(out[-1]) == 6 and int(out[2**31]) == 6
