"""Run under mpirun: data-parallel training on cupy arrays through the public API, the way a
Horovod user trains: parameters broadcast from rank 0, each rank's gradients on its own shard,
averaged with ``bf.grouped_allreduce``, the same SGD step everywhere.

Averaging equal-sized shards' mean gradients is the mean gradient of the whole batch, so every
rank also trains the same model on the whole batch alone (float64 numpy on the host) and the two
must agree (float32 rounding only); the distributed model's loss on a held-out batch must fall,
and its parameters must be bitwise identical on every rank. Runs on a real GPU
(tests/gpu/test_api_gpu.py) and under the fake CuPy on every CI run
(tests/mpi/test_api_fake_cupy.py). The model's arithmetic uses numpy ufuncs, which CuPy arrays
dispatch to the GPU. Prints ``TRAIN OK <ranks> ranks``; exits 1 otherwise.
"""
import hashlib
import sys

import cupy
import numpy as np

import blinkflow as bf

bf.init()
n, r = bf.size(), bf.rank()
FEATURES, HIDDEN, CLASSES = 32, 64, 10
PER_RANK, STEPS, LR = 64, 40, 0.5
failures = []


def data(step: int):
    """The whole batch of ``step`` (every rank makes every shard): a fixed teacher labels Gaussian inputs."""
    teacher = np.random.default_rng(7).standard_normal((FEATURES, CLASSES))
    x = np.random.default_rng(100 + step).standard_normal((n * PER_RANK, FEATURES))
    return x, np.argmax(x @ teacher, axis=1)


def init_params(seed: int):
    g = np.random.default_rng(seed)
    return [g.standard_normal((FEATURES, HIDDEN)) / np.sqrt(FEATURES), np.zeros(HIDDEN),
            g.standard_normal((HIDDEN, CLASSES)) / np.sqrt(HIDDEN), np.zeros(CLASSES)]


def loss_and_grads(params, x, onehot):
    """Mean cross-entropy of a one-hidden-layer ReLU network, and its gradients (by hand)."""
    w1, b1, w2, b2 = params
    h = np.maximum(x @ w1 + b1, 0)
    logits = h @ w2 + b2
    z = logits - logits.max(axis=1, keepdims=True)
    p = np.exp(z)
    p = p / p.sum(axis=1, keepdims=True)
    loss = -(np.log(p + 1e-12) * onehot).sum() / len(x)
    d = (p - onehot) / len(x)
    gw2, gb2 = h.T @ d, d.sum(axis=0)
    dh = (d @ w2.T) * (h > 0)
    return float(loss), [x.T @ dh, dh.sum(axis=0), gw2, gb2]


# Rank 0's initial parameters reach everyone by broadcast (the others start from other seeds).
params = [cupy.asarray(p.astype(np.float32)) for p in init_params(seed=1 + r)]
params = [bf.broadcast(p, root_rank=0, name=f"init.{i}") for i, p in enumerate(params)]
reference = init_params(seed=1)
for i, (p, q) in enumerate(zip(params, reference)):
    if not np.array_equal(cupy.asnumpy(p), q.astype(np.float32)):
        failures.append(f"rank {r}: parameter {i} after the broadcast is not rank 0's")


def held_out_loss(params) -> float:
    """The loss on a batch no step trains on, of parameters wherever they live (float64, host)."""
    x, y = data(STEPS)
    return loss_and_grads([cupy.asnumpy(p).astype(np.float64) for p in params], x, np.eye(CLASSES)[y])[0]


first_loss = held_out_loss(params)
for step in range(STEPS):
    x, y = data(step)
    onehot = np.eye(CLASSES)[y]
    mine = slice(r * PER_RANK, (r + 1) * PER_RANK)
    _, grads = loss_and_grads(params, cupy.asarray(x[mine].astype(np.float32)),
                              cupy.asarray(onehot[mine].astype(np.float32)))
    grads = bf.grouped_allreduce(grads, op=bf.Average, name="grads")
    params = [p - LR * g for p, g in zip(params, grads)]
    _, whole_grads = loss_and_grads(reference, x, onehot)
    reference = [p - LR * g for p, g in zip(reference, whole_grads)]

for i, (p, q) in enumerate(zip(params, reference)):
    got = cupy.asnumpy(p).astype(np.float64)
    err = np.linalg.norm(got - q) / np.linalg.norm(q)
    if not err < 1e-4:
        failures.append(f"rank {r}: parameter {i} differs from whole-batch training by {err:.2e} (relative)")
last_loss = held_out_loss(params)  # the distributed model's, not the reference's
if not last_loss < 0.5 * first_loss:
    failures.append(f"rank {r}: the held-out loss did not fall: {first_loss:.3f} -> {last_loss:.3f}")
digest = hashlib.sha1(b"".join(cupy.asnumpy(p).tobytes() for p in params)).hexdigest()
if len(set(bf.allgather_object(digest))) != 1:
    failures.append(f"rank {r}: parameters differ between ranks")
bf.shutdown()
if failures:
    print("\n".join(failures), flush=True)
    sys.exit(1)
print(f"TRAIN OK {n} ranks, held-out loss {first_loss:.3f} -> {last_loss:.3f}", flush=True)
