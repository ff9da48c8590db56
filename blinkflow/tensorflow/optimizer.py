"""``DistributedOptimizer``: any Keras 3 optimizer, with gradients averaged over ranks.

Horovod built a subclass of the user's optimizer class at run time and hooked
``get_gradients``/``_aggregate_gradients``; Keras 3 has neither hook and ``model.fit`` calls
``optimizer.apply_gradients`` -> ``apply`` directly, so those hooks never run. blinkflow instead
*wraps* the optimizer, the way Keras's own ``LossScaleOptimizer`` does: one fixed class whose
``apply`` reduces the gradients (one grouped all-reduce per step) and hands them to the inner
optimizer's ``apply``. Weight decay, clipping, EMA and the update rule stay the inner optimizer's.

With ``backward_passes_per_step = N > 1`` gradients are summed locally into accumulator variables
(a pass whose gradient of a variable is ``None`` adds nothing and keeps what earlier passes summed)
and every N-th call all-reduces the sum (divided by N with ``average_aggregated_gradients``,
Horovod's semantics) and applies it: one communication per N passes. ``iterations`` counts every
call, as Horovod's. ``process_set=`` reduces over a process set; ``register_local_var`` keeps a
variable's gradient local (:mod:`.local_gradients`).
"""
from __future__ import annotations

import keras
import tensorflow as tf

from ..compression import Compression, FP16Compressor
from ..errors import BlinkflowError
from ..ops import ReduceOp, as_reduce_op
from ._deprecated import warn_once
from .keras.fit_alignment import align_fits_of
from .gradients import GradientReducer
from .local_gradients import layer_variables

_COMPRESSION_NAMES = {"none": Compression.none, "fp16": Compression.fp16}


def _compression_name(compression) -> str:
    return "fp16" if compression is FP16Compressor or isinstance(compression, FP16Compressor) else "none"


class _Accumulation:
    """Plain holder for accumulator variables, kept out of Keras's attribute tracking (they are
    already tracked once through ``add_variable``)."""

    def __init__(self):
        self.accumulators = []
        self.passes = None


class VariableList(list):
    """A list of variables that returns itself when called: ``opt.variables`` and Keras 2's
    ``opt.variables()`` both work."""

    def __call__(self):
        return self


@keras.saving.register_keras_serializable(package="blinkflow")
class DistributedOptimizer(keras.optimizers.Optimizer):
    """Wrap ``optimizer`` so that ``apply``/``apply_gradients`` average gradients over ranks."""

    def __new__(cls, optimizer=None, *args, **kwargs):
        # Horovod's DistributedOptimizer also wraps TF1's tf.compat.v1.train optimizers (graph mode).
        if isinstance(optimizer, tf.compat.v1.train.Optimizer):
            from .legacy_optimizer import LegacyDistributedOptimizer

            return LegacyDistributedOptimizer(optimizer, *args, **kwargs)
        return super().__new__(cls)

    def __init__(self, optimizer, op=ReduceOp.AVERAGE, compression=Compression.none, backward_passes_per_step=1,
                 gradient_predivide_factor=1.0, sparse_as_dense=False, name=None, average_aggregated_gradients=False,
                 process_set=None, scale_local_gradients=True, device_dense="", device_sparse="", num_groups=0,
                 groups=None):
        if isinstance(optimizer, (str, dict)):
            optimizer = keras.optimizers.get(optimizer)
        if isinstance(optimizer, DistributedOptimizer):
            raise BlinkflowError("the optimizer is already a blinkflow DistributedOptimizer")
        if not isinstance(optimizer, keras.optimizers.Optimizer):
            raise BlinkflowError(f"DistributedOptimizer wraps a Keras 3 optimizer or a tf.compat.v1.train optimizer, "
                                 f"got {type(optimizer).__name__}; for tf.keras 2 (keras.optimizers.legacy) use "
                                 "Horovod")
        if int(backward_passes_per_step) < 1:
            raise BlinkflowError(f"backward_passes_per_step must be >= 1, got {backward_passes_per_step}")
        if isinstance(compression, str):
            compression = _COMPRESSION_NAMES[compression]
        # learning_rate=0.0: this wrapper's own rate is never used; ``learning_rate`` is the inner one's.
        super().__init__(learning_rate=0.0, name=name or f"Distributed{optimizer.name}")
        self.inner_optimizer = optimizer
        self.op = as_reduce_op(op)
        self.compression = compression
        self.backward_passes_per_step = int(backward_passes_per_step)
        self.gradient_predivide_factor = float(gradient_predivide_factor)
        self.sparse_as_dense = bool(sparse_as_dense)
        self.average_aggregated_gradients = bool(average_aggregated_gradients)
        if num_groups:
            warn_once("DistributedOptimizer.num_groups", "DistributedOptimizer: `num_groups` is deprecated "
                      "(Horovod 0.21); pass groups=")
        self._reducer = GradientReducer(f"DistributedOptimizer.{self.name}", self.op, compression,
                                        self.gradient_predivide_factor, self.sparse_as_dense, process_set,
                                        scale_local_gradients)
        self._accumulation = _Accumulation()
        if process_set is None:
            align_fits_of(self)  # model.fit on shards of different lengths stays in step

    def register_local_var(self, var) -> None:
        """Keep ``var``'s gradient on this rank (Horovod's): it is not all-reduced."""
        self._reducer.local.add(var)

    # -- state ---------------------------------------------------------------------------------
    def build(self, var_list):
        var_list = list(var_list)
        if not self.inner_optimizer.built:
            self.inner_optimizer.build(var_list)
        if self.backward_passes_per_step > 1:
            self._accumulation.accumulators = [
                self.add_variable_from_reference(v, name="blinkflow_accumulator") for v in var_list]
            self._accumulation.passes = self.add_variable(shape=(), dtype="int64", initializer="zeros",
                                                          name="blinkflow_passes")
        super().build(var_list)

    @property
    def variables(self):
        """This wrapper's variables and the inner optimizer's: a list, also callable (Keras 2
        spelled it ``optimizer.variables()``, as Horovod's examples do)."""
        return VariableList(self._variables + self.inner_optimizer.variables)

    @property
    def iterations(self):
        return self.inner_optimizer.iterations

    @property
    def learning_rate(self):
        return self.inner_optimizer.learning_rate

    @learning_rate.setter
    def learning_rate(self, learning_rate):
        self.inner_optimizer.learning_rate = learning_rate

    def __getattr__(self, name):
        # Hyperparameters of the inner optimizer (momentum, beta_1, ...) read through the wrapper.
        # Private names and anything before __init__ finished stay errors, so Keras's own
        # hasattr() probes behave as on a plain optimizer.
        inner = self.__dict__.get("inner_optimizer")
        if inner is None or name.startswith("_"):
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return getattr(inner, name)

    def scale_loss(self, loss):
        return self.inner_optimizer.scale_loss(loss)

    def finalize_variable_values(self, var_list):
        self.inner_optimizer.finalize_variable_values(var_list)

    # -- the step --------------------------------------------------------------------------------
    @tf.autograph.experimental.do_not_convert
    def apply(self, grads, trainable_variables=None):
        grads = list(grads)
        if not grads:
            return
        if trainable_variables is None:
            if not self.built:
                raise BlinkflowError("pass trainable_variables on the first apply(), or build() the optimizer")
            trainable_variables = self.inner_optimizer._trainable_variables
        trainable_variables = list(trainable_variables)
        if not self.built:
            with keras.name_scope(self.name, caller=self):
                self.build(trainable_variables)
        if self.backward_passes_per_step == 1:
            self.inner_optimizer.apply(self._reducer.reduce(grads, trainable_variables),
                                       trainable_variables)
            return
        self._accumulate_and_maybe_apply(grads, trainable_variables)

    def _accumulate_and_maybe_apply(self, grads, trainable_variables):
        state = self._accumulation
        if len(state.accumulators) != len(grads):
            raise BlinkflowError(f"DistributedOptimizer was built for {len(state.accumulators)} variables, "
                                 f"got {len(grads)} gradients")
        for accumulator, grad in zip(state.accumulators, grads):
            if grad is not None:
                accumulator.assign_add(tf.convert_to_tensor(grad, dtype=accumulator.dtype))
        state.passes.assign_add(1)
        n = self.backward_passes_per_step

        def apply_aggregated():
            aggregated = aggregated_gradients(state.accumulators, n, self.average_aggregated_gradients)
            self.inner_optimizer.apply(self._reducer.reduce(aggregated, trainable_variables),
                                       trainable_variables)
            for accumulator in state.accumulators:
                accumulator.assign(tf.zeros_like(accumulator))
            return tf.constant(True)

        def count_the_pass():  # Horovod's optimizer.iterations counts every call, not every N-th
            self.inner_optimizer.iterations.assign_add(1)
            return tf.constant(False)

        # Every rank takes the same branch: the pass counter advances identically everywhere.
        tf.cond(tf.equal(tf.math.floormod(state.passes.value, n), 0), apply_aggregated, count_the_pass)

    # -- serialization ---------------------------------------------------------------------------
    def get_config(self):
        # Not super().get_config(): the wrapper has no hyperparameters of its own beyond these.
        return {
            "name": self.name,
            "optimizer": keras.saving.serialize_keras_object(self.inner_optimizer),
            "op": self.op.name,
            "compression": _compression_name(self.compression),
            "backward_passes_per_step": self.backward_passes_per_step,
            "gradient_predivide_factor": self.gradient_predivide_factor,
            "sparse_as_dense": self.sparse_as_dense,
            "average_aggregated_gradients": self.average_aggregated_gradients,
        }

    @classmethod
    def from_config(cls, config, custom_objects=None):
        config = dict(config)
        inner = keras.saving.deserialize_keras_object(config.pop("optimizer"), custom_objects=custom_objects)
        return cls(inner, **config)


def aggregated_gradients(accumulators, passes: int, average: bool):
    """What N backward passes hand to the all-reduce (Horovod's ``LocalGradientAggregationHelper``):
    each variable's sum over the passes that had its gradient (a pass whose gradient is ``None``
    adds nothing; zeros where none had one, as a rank without a gradient contributes), divided by
    N only with ``average_aggregated_gradients``."""
    values = [tf.convert_to_tensor(accumulator) for accumulator in accumulators]
    return [value / passes for value in values] if average else values


def PartialDistributedOptimizer(optimizer, name=None, local_layers=None, **kwargs) -> DistributedOptimizer:
    """Horovod's ``PartialDistributedOptimizer``: a DistributedOptimizer whose ``local_layers``
    (Keras layers) keep their gradients local; the other arguments are DistributedOptimizer's."""
    wrapped = DistributedOptimizer(optimizer, name=name, **kwargs)
    for variable in layer_variables(local_layers):
        wrapped.register_local_var(variable)
    return wrapped


def load_model(filepath, custom_optimizers=None, custom_objects=None, compile=True, **distributed_kwargs):
    """Load a Keras model saved with or without a DistributedOptimizer; its optimizer comes back
    wrapped (Horovod's ``hvd.load_model``). ``distributed_kwargs`` go to DistributedOptimizer when
    the saved optimizer was a plain one."""
    objects = {"DistributedOptimizer": DistributedOptimizer}
    for optimizer_class in custom_optimizers or []:
        objects[optimizer_class.__name__] = optimizer_class
    objects.update(custom_objects or {})
    model = keras.saving.load_model(filepath, custom_objects=objects, compile=compile)
    optimizer = getattr(model, "optimizer", None)
    if compile and optimizer is not None and not isinstance(optimizer, DistributedOptimizer):
        model.optimizer = DistributedOptimizer(optimizer, **distributed_kwargs)
    return model
