"""Synthetic data-parallel benchmark after Horovod's tensorflow2_synthetic_benchmark.py: a
keras.applications model (weights=None), random images, DistributedGradientTape in a tf.function.

    blinkrun -np 2 python examples/synthetic_benchmark.py --num-threads 1

Prints images/sec per rank and in total. ``--num-threads`` caps TensorFlow's threads per rank so
that ranks sharing a machine's cores do not fight over them.
"""
import argparse
import timeit

import numpy as np
import tensorflow as tf

import keras
import blinkflow.tensorflow as hvd  # blinkflow: Horovod's TF2 API

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
parser.add_argument("--model", default="MobileNetV2", help="a keras.applications model")
parser.add_argument("--img-size", type=int, default=64, help="square image side")
parser.add_argument("--alpha", type=float, default=0.35, help="width multiplier (MobileNet models only)")
parser.add_argument("--batch-size", type=int, default=16, help="per rank")
parser.add_argument("--num-warmup-batches", type=int, default=5)
parser.add_argument("--num-batches-per-iter", type=int, default=5)
parser.add_argument("--num-iters", type=int, default=5)
parser.add_argument("--num-threads", type=int, default=1, help="TF intra- and inter-op threads per rank")
parser.add_argument("--fp16-allreduce", action="store_true", help="send gradients as float16")
parser.add_argument("--local-baseline", action="store_true",
                    help="also time the same step without the allreduce, in the same job, and print the ratio "
                         "(communication efficiency; independent of how busy the machine is)")
args = parser.parse_args()

tf.config.threading.set_intra_op_parallelism_threads(args.num_threads)
tf.config.threading.set_inter_op_parallelism_threads(args.num_threads)

hvd.init()  # blinkflow: start the runtime

model_fn = getattr(keras.applications, args.model)
extra = {"alpha": args.alpha} if args.model.startswith("MobileNet") else {}
model = model_fn(weights=None, input_shape=(args.img_size, args.img_size, 3), classes=1000, **extra)
optimizer = keras.optimizers.SGD(0.01)
loss_fn = keras.losses.SparseCategoricalCrossentropy()
compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none

rng = np.random.default_rng(hvd.rank())
data = tf.constant(rng.random((args.batch_size, args.img_size, args.img_size, 3), dtype=np.float32))
target = tf.constant(rng.integers(0, 1000, size=(args.batch_size,)))


def make_step(distributed):
    @tf.function
    def step(first_batch):
        with tf.GradientTape() as tape:
            loss = loss_fn(target, model(data, training=True))
        if distributed:
            tape = hvd.DistributedGradientTape(tape, compression=compression)  # blinkflow: allreduce gradients
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))
        if first_batch:  # blinkflow: start every rank from rank 0's state
            hvd.broadcast_variables(model.variables, root_rank=0)
            hvd.broadcast_variables(optimizer.variables, root_rank=0)
    return step


benchmark_step = make_step(distributed=True)
local_step = make_step(distributed=False)  # only for --local-baseline


def log(text):
    if hvd.rank() == 0:  # blinkflow: print once
        print(text, flush=True)


log(f"Model: {args.model} ({args.img_size}x{args.img_size}, {model.count_params():,} parameters)")
log(f"Batch size: {args.batch_size} per rank, ranks: {hvd.size()}, threads per rank: {args.num_threads}")

benchmark_step(first_batch=True)
log("Running warmup...")
timeit.timeit(lambda: benchmark_step(first_batch=False), number=args.num_warmup_batches)

log("Running benchmark...")
img_secs = []
for i in range(args.num_iters):
    seconds = timeit.timeit(lambda: benchmark_step(first_batch=False), number=args.num_batches_per_iter)
    img_sec = args.batch_size * args.num_batches_per_iter / seconds
    log(f"Iter #{i}: {img_sec:.1f} img/sec per rank")
    img_secs.append(img_sec)

mean, conf = np.mean(img_secs), 1.96 * np.std(img_secs)
# Total over ranks: every rank's own figure, summed.
total = float(hvd.allreduce(np.array([mean]), op=hvd.Sum, name="benchmark.total")[0])
log(f"Img/sec per rank: {mean:.1f} +-{conf:.1f}")
log(f"Total img/sec on {hvd.size()} rank(s): {total:.1f} +-{conf * np.sqrt(hvd.size()):.1f}")

if args.local_baseline:
    # Alternate local and distributed iterations so both see the same load on a shared machine.
    # Ranks drift apart during local steps; a barrier before each timed block starts every rank's
    # block together, so the distributed block does not pay for the local block's drift.
    local_step(first_batch=False)
    seconds = {"local": 0.0, "distributed": 0.0}
    for i in range(args.num_iters):
        hvd.barrier()
        seconds["local"] += timeit.timeit(lambda: local_step(first_batch=False), number=args.num_batches_per_iter)
        hvd.barrier()
        seconds["distributed"] += timeit.timeit(lambda: benchmark_step(first_batch=False),
                                                number=args.num_batches_per_iter)
    ratio = float(hvd.allreduce(np.array([seconds["local"] / seconds["distributed"]]), name="benchmark.ratio")[0])
    log(f"Communication efficiency (step time without / with allreduce): {100 * ratio:.1f}%")
