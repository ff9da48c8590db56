"""One side of ``python -m blinkflow.bench tf-peers``: the synthetic benchmark's training step
(``examples/synthetic_benchmark.py``: a keras.applications model, random images, SGD, the
gradients averaged over workers in a ``tf.function``), timed in one job.

``--side blinkflow`` runs under blinkrun/mpirun and averages with ``DistributedGradientTape``;
with ``--local-baseline`` it also times, alternating with the real step in the same job, the
same step without the all-reduce (communication efficiency = local / distributed step time)
and the same step with the gradients left alone but the ranks made to meet once per step, after
backprop, in an all-reduce of one number (sync efficiency = local / synchronised step time).
The synchronised step moves no gradient: what it loses is the ranks' step-to-step skew (every
step waits for the slowest rank's backprop) plus one small collective's latency, so its
efficiency is the ceiling of any synchronous data-parallel step on the machine, and the gap
between the two efficiencies is what the gradients' all-reduce itself costs.
``--side mwms`` runs as one worker of TensorFlow's ``MultiWorkerMirroredStrategy`` (``TF_CONFIG``
names the localhost workers; RING collectives over gRPC): the model and optimizer live in the
strategy's scope and Keras's optimizer sums the gradients across workers inside ``strategy.run``.
Both sides build the same model from the same arguments and time the same way. Worker 0 prints
``RESULT {json}``: images/sec of every worker, and their total.
"""
from __future__ import annotations

import argparse
import json
import os
import timeit


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--side", choices=["blinkflow", "mwms"], required=True)
    parser.add_argument("--model", default="MobileNetV2")
    parser.add_argument("--img-size", type=int, default=64)
    parser.add_argument("--alpha", type=float, default=0.35, help="width multiplier (MobileNet models only)")
    parser.add_argument("--batch-size", type=int, default=16, help="per worker")
    parser.add_argument("--num-warmup-batches", type=int, default=5)
    parser.add_argument("--num-batches-per-iter", type=int, default=5)
    parser.add_argument("--num-iters", type=int, default=5)
    parser.add_argument("--num-threads", type=int, default=1, help="TF intra- and inter-op threads per worker")
    parser.add_argument("--local-baseline", action="store_true", help="blinkflow side: also time the step alone")
    parser.add_argument("--jit-compile", action="store_true",
                        help="blinkflow side: compile every step with XLA (tf.function(jit_compile=True)), as "
                             "Keras 3 does on a GPU; the all-reduce crosses through blinkflow's XLA custom call")
    parser.add_argument("--marks", help="blinkflow side: write when each step's forward pass and backprop began "
                                        "to MARKS.rank<r>.json (for bench overlap-timeline)")
    args = parser.parse_args(argv)
    if args.marks and args.jit_compile:
        parser.error("--marks records from Python ops inside the step, which XLA cannot compile: drop --jit-compile")
    return args


class StepMarks:
    """When each step's forward pass, backprop and update begin, recorded from inside the traced
    step by identity ops: one on the input batch (forward), one whose gradient runs first in
    backprop (on the loss), one that needs every reduced gradient (update). Stateful, so that TensorFlow neither folds the first (its input is a constant)
    nor skips either; both run before any bucket is submitted anyway. Times are the runtime
    timeline's clock (``time.time_ns() // 1000``)."""

    def __init__(self, tf):
        import time

        self.tf, self.time, self.events = tf, time, []

    def _mark(self, what):
        def record(x):
            self.events.append((what, self.time.time_ns() // 1000))
            return x
        return record

    def forward(self, x):
        return self._through(self._mark("forward"), x)

    def update(self, gradients):
        """The gradients, the first of them through a mark that needs all of them (the update)."""
        tf = self.tf
        record = self._mark("update")
        first = tf.numpy_function(lambda g, *rest: record(g), list(gradients), gradients[0].dtype, stateful=True)
        first.set_shape(gradients[0].shape)
        return [first] + list(gradients[1:])

    def backprop(self, loss):
        tf = self.tf
        record = self._mark("backprop")

        @tf.custom_gradient
        def identity(y):
            def grad(dy):
                # Also takes y: the gradient's seed does not depend on the forward pass, so on its
                # own the mark could run before the loss exists.
                out = tf.numpy_function(lambda d, _: record(d), [dy, y], dy.dtype, stateful=True)
                out.set_shape(dy.shape)
                return out
            return tf.identity(y), grad

        return identity(loss)

    def _through(self, record, x):
        out = self.tf.numpy_function(record, [x], x.dtype, stateful=True)
        out.set_shape(x.shape)
        return out


def build(args, tf, keras, seed: int):
    """The model, optimizer, loss and this worker's batch, as the example builds them."""
    import numpy as np

    model_fn = getattr(keras.applications, args.model)
    extra = {"alpha": args.alpha} if args.model.startswith("MobileNet") else {}
    model = model_fn(weights=None, input_shape=(args.img_size, args.img_size, 3), classes=1000, **extra)
    optimizer = keras.optimizers.SGD(0.01)
    rng = np.random.default_rng(seed)
    data = tf.constant(rng.random((args.batch_size, args.img_size, args.img_size, 3), dtype=np.float32))
    target = tf.constant(rng.integers(0, 1000, size=(args.batch_size,)))
    return model, optimizer, keras.losses.SparseCategoricalCrossentropy(), data, target


def time_steps(args, step) -> float:
    """Images/sec of this worker: warm-up, then the mean over the timed iterations."""
    timeit.timeit(step, number=args.num_warmup_batches)
    seconds = sum(timeit.timeit(step, number=args.num_batches_per_iter) for _ in range(args.num_iters))
    return args.batch_size * args.num_batches_per_iter * args.num_iters / seconds


def run_blinkflow(args, tf, keras):
    import numpy as np

    import blinkflow.tensorflow as hvd

    hvd.init()
    model, optimizer, loss_fn, data, target = build(args, tf, keras, hvd.rank())
    marks = StepMarks(tf) if args.marks else None

    def make_step(distributed, meet=False):
        """The training step: gradients averaged (``distributed``), or left local; ``meet``: the
        ranks still meet once after backprop, in an all-reduce of one number the update waits for."""
        @tf.function(jit_compile=args.jit_compile)
        def step():
            with tf.GradientTape() as tape:
                images = marks.forward(data) if marks and distributed else data
                loss = loss_fn(target, model(images, training=True))
                if marks and distributed:
                    loss = marks.backprop(loss)
            if distributed:
                tape = hvd.DistributedGradientTape(tape)
            gradients = tape.gradient(loss, model.trainable_variables)
            if marks and distributed:  # the update begins once the wait returned every gradient
                gradients = marks.update(gradients)
            if meet:
                with tf.control_dependencies(gradients):  # after backprop, as the gradients' wait
                    met = hvd.allreduce(tf.zeros([1], gradients[0].dtype), name="bench.meet")
                gradients = [gradients[0] + met[0]] + list(gradients[1:])  # adds 0: the update needs it
            optimizer.apply_gradients(zip(gradients, model.trainable_variables))
        return step

    step, local_step, met_step = make_step(True), make_step(False), make_step(False, meet=True)
    step()
    hvd.broadcast_variables(model.variables, root_rank=0)
    hvd.broadcast_variables(optimizer.variables, root_rank=0)
    mine = time_steps(args, step)
    result = {"side": "blinkflow", "workers": hvd.size(), "jit_compile": args.jit_compile,
              "img_sec": [float(v) for v in hvd.allgather(np.array([mine]), name="bench.img_sec")]}
    if args.local_baseline:
        steps = {"local": local_step, "synchronised": met_step, "distributed": step}
        for each in steps.values():
            each()  # traced before timing
        seconds = dict.fromkeys(steps, 0.0)
        for _ in range(args.num_iters):  # alternated, so all see the same load
            for kind, each in steps.items():
                hvd.barrier()  # every rank starts each block together (ranks drift during local steps)
                seconds[kind] += timeit.timeit(each, number=args.num_batches_per_iter)
        ratios = hvd.allreduce(np.array([seconds["local"] / seconds["distributed"],
                                         seconds["local"] / seconds["synchronised"]]), name="bench.efficiency")
        result["communication_efficiency"] = float(ratios[0])
        result["sync_efficiency"] = float(ratios[1])
    if marks:
        with open(f"{args.marks}.rank{hvd.rank()}.json", "w") as f:
            json.dump(marks.events, f)
    return hvd.rank(), result


def run_mwms(args, tf, keras):
    options = tf.distribute.experimental.CommunicationOptions(
        implementation=tf.distribute.experimental.CommunicationImplementation.RING)
    strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    with strategy.scope():
        model, optimizer, loss_fn, data, target = build(args, tf, keras, index)

    @tf.function
    def step():
        def replica_step():
            with tf.GradientTape() as tape:
                loss = loss_fn(target, model(data, training=True))
            gradients = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(gradients, model.trainable_variables))  # sums over workers
        strategy.run(replica_step)

    mine = time_steps(args, step)
    gathered = strategy.gather(tf.constant([mine], tf.float64), axis=0)
    return index, {"side": "mwms", "workers": strategy.num_replicas_in_sync,
                   "img_sec": [float(v) for v in gathered.numpy()]}


def main(argv=None) -> None:
    args = parse_args(argv)
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(args.num_threads)
    tf.config.threading.set_inter_op_parallelism_threads(args.num_threads)
    import keras

    worker, result = (run_blinkflow if args.side == "blinkflow" else run_mwms)(args, tf, keras)
    result["total_img_sec"] = sum(result["img_sec"])
    if worker == 0:
        print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
