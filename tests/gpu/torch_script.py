"""Run under mpirun: PyTorch data-parallel training through blinkflow's public API, the way a
DDP user trains, on the GPU the ranks share (local rank k drives CUDA device k of those visible).

Each step every rank runs forward and backward on its own shard with ``torch.nn`` and autograd,
flattens the gradients into one bucket, hands it to ``bf.allreduce`` as a CuPy array made from
the torch tensor by DLPack (no copy), and takes the averaged bucket back the same way into the
parameters' ``.grad`` before ``torch.optim.SGD`` steps. Initial parameters come from rank 0 by
``bf.broadcast``. Averaging equal shards' mean gradients is the whole batch's mean gradient, so
every rank also trains a float64 copy of the model on the whole batch on the host; the two must
agree within float32 rounding, the held-out loss must fall, and the parameters must be bitwise
identical on every rank. A case script of the harness (tests/harness.py).

torch's kernels run on its current stream; the worker synchronises the device before a bucket
changes hands in either direction, so the handover is ordered whatever stream blinkflow uses.
On a machine without CUDA (a check of this logic under the fake CuPy) tensors cross through
numpy instead of DLPack.
"""
import copy
import hashlib

import cupy
import numpy as np
import torch

import blinkflow as bf
from harness import close, run_cases

bf.init()
n, r = bf.size(), bf.rank()
CUDA = torch.cuda.is_available()
DEVICE = torch.device("cuda", bf.local_rank() % torch.cuda.device_count()) if CUDA else torch.device("cpu")
if CUDA:
    torch.cuda.set_device(DEVICE)
    cupy.cuda.Device(DEVICE.index).use()
FEATURES, HIDDEN, CLASSES = 32, 64, 10
PER_RANK, STEPS, LR = 64, 40, 0.5


def to_cupy(t: torch.Tensor):
    if t.is_cuda:
        torch.cuda.synchronize(t.device)
        return cupy.from_dlpack(t)
    return cupy.asarray(t.numpy())


def to_torch(a) -> torch.Tensor:
    if CUDA:
        cupy.cuda.runtime.deviceSynchronize()
        return torch.from_dlpack(a)
    return torch.from_numpy(cupy.asnumpy(a))


def data(step: int):
    """The whole batch of ``step`` (every rank makes every shard): a fixed teacher labels Gaussian inputs."""
    teacher = torch.randn(FEATURES, CLASSES, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    x = torch.randn(n * PER_RANK, FEATURES, generator=torch.Generator().manual_seed(100 + step), dtype=torch.float64)
    return x, torch.argmax(x @ teacher, dim=1)


def make_model(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(FEATURES, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, CLASSES))


def held_out_loss(model) -> float:
    x, y = data(STEPS)
    host = copy.deepcopy(model).to("cpu", torch.float64)
    with torch.no_grad():
        return float(torch.nn.functional.cross_entropy(host(x), y))


model = make_model(seed=1 + r).to(DEVICE)
reference = make_model(seed=1).to(torch.float64)
LOSSES = {}


def case_rank_0s_initial_parameters_reach_everyone(rank, size):
    """By broadcast (the other ranks start from other seeds)."""
    with torch.no_grad():
        for i, p in enumerate(model.parameters()):
            p.copy_(to_torch(bf.broadcast(to_cupy(p.detach()), root_rank=0, name=f"init.{i}")))
    for i, (p, q) in enumerate(zip(model.parameters(), reference.parameters())):
        close(p.detach().cpu().numpy(), q.detach().float().numpy(), what=f"parameter {i} after the broadcast")


def case_training_equals_whole_batch_training(rank, size):
    """Within the rounding of float32 steps: each step's update is a reduction the one rule
    bounds, of values no larger than the parameters plus one, and the steps' bounds add up."""
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    ref_optimizer = torch.optim.SGD(reference.parameters(), lr=LR)
    LOSSES["first"] = held_out_loss(model)
    for step in range(STEPS):
        x, y = data(step)
        mine = slice(r * PER_RANK, (r + 1) * PER_RANK)
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x[mine].to(DEVICE, torch.float32)), y[mine].to(DEVICE)).backward()
        params = list(model.parameters())
        bucket = torch.cat([p.grad.reshape(-1) for p in params])
        averaged = to_torch(bf.allreduce(to_cupy(bucket), op=bf.Average, name="grads")).to(DEVICE)
        offset = 0
        for p in params:
            p.grad.copy_(averaged[offset:offset + p.numel()].view_as(p))
            offset += p.numel()
        optimizer.step()
        ref_optimizer.zero_grad()
        torch.nn.functional.cross_entropy(reference(x), y).backward()
        ref_optimizer.step()
    for i, (p, q) in enumerate(zip(model.parameters(), reference.parameters())):
        want = q.detach().numpy()
        close(p.detach().cpu().numpy(), want, STEPS * (np.abs(want) + 1.0), ranks=n, rounding=np.float32,
              what=f"parameter {i} against whole-batch training")


def case_the_held_out_loss_falls(rank, size):
    first_loss, last_loss = LOSSES["first"], held_out_loss(model)
    print(f"rank {r} on {DEVICE}, torch {torch.__version__}: held-out loss {first_loss:.3f} -> {last_loss:.3f}",
          flush=True)
    assert last_loss < 0.5 * first_loss, f"the held-out loss did not fall: {first_loss:.3f} -> {last_loss:.3f}"


def case_parameters_are_bitwise_identical_on_every_rank(rank, size):
    digest = hashlib.sha1(b"".join(p.detach().cpu().numpy().tobytes() for p in model.parameters())).hexdigest()
    digests = bf.allgather_object(digest)
    assert len(set(digests)) == 1, f"parameters differ between ranks: {digests}"


if __name__ == "__main__":
    run_cases(globals(), r, n)
    bf.shutdown()
