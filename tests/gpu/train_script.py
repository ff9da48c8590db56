"""Run under mpirun: data-parallel training on cupy arrays through the public API, the way a
Horovod user trains: parameters broadcast from rank 0, each rank's gradients on its own shard,
averaged with ``bf.grouped_allreduce``, the same SGD step everywhere.

Averaging equal-sized shards' mean gradients is the mean gradient of the whole batch, so every
rank also trains the same model on the whole batch alone (float64 numpy on the host) and the two
must agree (float32 rounding only); the distributed model's loss on a held-out batch must fall,
and its parameters must be bitwise identical on every rank. Runs on a real GPU
(tests/gpu/test_api_gpu.py) and under the fake CuPy on every CI run
(tests/mpi/test_api_fake_cupy.py). The model's arithmetic uses numpy ufuncs, which CuPy arrays
dispatch to the GPU. A case script of the harness (tests/harness.py).
"""
import hashlib

import cupy
import numpy as np

import blinkflow as bf
from harness import close, run_cases

bf.init()
n, r = bf.size(), bf.rank()
FEATURES, HIDDEN, CLASSES = 32, 64, 10
PER_RANK, STEPS, LR = 64, 40, 0.5


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


def held_out_loss(params) -> float:
    """The loss on a batch no step trains on, of parameters wherever they live (float64, host)."""
    x, y = data(STEPS)
    return loss_and_grads([cupy.asnumpy(p).astype(np.float64) for p in params], x, np.eye(CLASSES)[y])[0]


TRAINED = {}   # what the training case leaves for the later cases


def case_rank_0s_initial_parameters_reach_everyone(rank, size):
    """By broadcast (the other ranks start from other seeds)."""
    params = [cupy.asarray(p.astype(np.float32)) for p in init_params(seed=1 + r)]
    params = [bf.broadcast(p, root_rank=0, name=f"init.{i}") for i, p in enumerate(params)]
    for i, (p, q) in enumerate(zip(params, init_params(seed=1))):
        close(cupy.asnumpy(p), q.astype(np.float32), what=f"parameter {i} after the broadcast")
    TRAINED["start"] = params


def case_training_equals_whole_batch_training(rank, size):
    """Within the rounding of float32 steps: each step's update is a reduction the one rule
    bounds, of values no larger than the parameters plus one, and the steps' bounds add up."""
    params, reference = TRAINED["start"], init_params(seed=1)
    TRAINED["first_loss"] = held_out_loss(params)
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
    TRAINED["params"] = params
    for i, (p, q) in enumerate(zip(params, reference)):
        close(cupy.asnumpy(p), q, STEPS * (np.abs(q) + 1.0), ranks=n, rounding=np.float32,
              what=f"parameter {i} against whole-batch training")


def case_the_held_out_loss_falls(rank, size):
    first_loss, last_loss = TRAINED["first_loss"], held_out_loss(TRAINED["params"])
    print(f"rank {r}: held-out loss {first_loss:.3f} -> {last_loss:.3f}", flush=True)
    assert last_loss < 0.5 * first_loss, f"the held-out loss did not fall: {first_loss:.3f} -> {last_loss:.3f}"


def case_parameters_are_bitwise_identical_on_every_rank(rank, size):
    digest = hashlib.sha1(b"".join(cupy.asnumpy(p).tobytes() for p in TRAINED["params"])).hexdigest()
    digests = bf.allgather_object(digest)
    assert len(set(digests)) == 1, f"parameters differ between ranks: {digests}"


if __name__ == "__main__":
    run_cases(globals(), r, n)
    bf.shutdown()
