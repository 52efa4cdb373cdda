"""Batch Renormalization (Ioffe 2017) as CrossQ uses it (Bhatt et al. 2024; sb3-contrib's
`BatchRenorm`, whose formulas this follows line for line).

Training mode normalizes with the batch's moments and corrects them towards the running ones:

    r = clip(sg(std_B / std_R), 1/rmax, rmax)        d = clip(sg((mu_B - mu_R) / std_R), -dmax, dmax)
    m = mu_B - d * sqrt(var_B) / r                   v = var_B / r**2
    y = scale * (x - m) / sqrt(v + eps) + bias

with std_B = sqrt(var_B + eps), std_R = sqrt(var_R + eps), var_B the unbiased (N - 1) variance
and sg a stop-gradient (the gradients still flow through mu_B and var_B, as in BatchNorm). For the
first `warmup` training calls of the layer r = 1 and d = 0: plain BatchNorm. Every training call
moves the running mean and (unbiased) variance by `momentum`. Inference mode normalizes with the
running statistics: an affine map, which numpy acting runs (`networks.numpy_forward`).

The running statistics and the layer's count of training calls are non-trainable weights, so they
are in every checkpoint and in the weights acting receives. A network holding this layer computes
each row's output from the whole batch, so it is never cut into batch shards.
"""
from __future__ import annotations

import keras
import tensorflow as tf

RMAX, DMAX = 3.0, 5.0  # fixed after the warm-up, as in sb3-contrib, SBX and the authors' code (no ramp)


def check_renorm(momentum, epsilon, warmup) -> None:
    for key, value, ok in (("momentum", momentum, isinstance(momentum, (int, float)) and 0 < momentum <= 1),
                           ("epsilon", epsilon, isinstance(epsilon, (int, float)) and epsilon > 0),
                           ("warmup", warmup, isinstance(warmup, int) and warmup >= 0)):
        if isinstance(value, bool) or not ok:
            raise ValueError(f"network.renorm_{key} must be {'in (0, 1]' if key == 'momentum' else 'positive' if key == 'epsilon' else 'an integer >= 0'} "
                             f"(sb3-contrib's CrossQ: momentum 0.01, epsilon 0.001, warmup 100000), got {value!r}")


def renorm_correction(mean: tf.Tensor, var: tf.Tensor, running_mean: tf.Tensor, running_var: tf.Tensor,
                      epsilon: float, renorm: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """The mean and variance a training call normalizes with: the batch's (`renorm` false), or the
    batch's corrected by r and d towards the running statistics."""
    running_std = tf.sqrt(running_var + epsilon)
    r = tf.stop_gradient(tf.clip_by_value(tf.sqrt(var + epsilon) / running_std, 1.0 / RMAX, RMAX))
    d = tf.stop_gradient(tf.clip_by_value((mean - running_mean) / running_std, -DMAX, DMAX))
    r, d = tf.where(renorm, r, tf.ones_like(r)), tf.where(renorm, d, tf.zeros_like(d))
    return mean - d * safe_sqrt(var) / r, var / tf.square(r)


def safe_sqrt(x: tf.Tensor) -> tf.Tensor:
    """sqrt(x) whose gradient at x = 0 is 0, not infinite: a feature constant over the batch (a
    ReLU unit dead for every row) has var_B = 0, and d * d sqrt(var_B) would be 0 * inf = NaN.
    (sb3-contrib's torch code has that NaN; it takes a unit dead over all 2B rows of a batch.)"""
    positive = x > 0
    return tf.where(positive, tf.sqrt(tf.where(positive, x, tf.ones_like(x))), tf.zeros_like(x))


@keras.saving.register_keras_serializable(package="tfrl")
class BatchRenorm(keras.layers.Layer):
    """Batch Renormalization over the last axis of a (batch, features) input."""

    batch_dependent = True  # read by networks.sharding: never shard a network holding this layer

    def __init__(self, momentum: float = 0.01, epsilon: float = 1e-3, warmup: int = 100_000, **kwargs):
        super().__init__(**kwargs)
        check_renorm(momentum, epsilon, warmup)
        self.momentum, self.epsilon, self.warmup = float(momentum), float(epsilon), int(warmup)

    def build(self, input_shape):
        n = int(input_shape[-1])
        self.scale = self.add_weight(shape=(n,), initializer="ones", name="scale")
        self.bias = self.add_weight(shape=(n,), initializer="zeros", name="bias")
        self.running_mean = self.add_weight(shape=(n,), initializer="zeros", trainable=False, name="running_mean")
        self.running_var = self.add_weight(shape=(n,), initializer="ones", trainable=False, name="running_var")
        # a float count, so that the network's weights stay one dtype (acting reads them as one flat
        # float32 tensor); exact up to 2**24 training calls
        self.calls = self.add_weight(shape=(), initializer="zeros", trainable=False, name="calls")

    def call(self, x, training=None):
        if not training:
            mean, var = self.running_mean, self.running_var
        else:
            rows = tf.cast(tf.shape(x)[0], x.dtype)
            mean = tf.reduce_mean(x, axis=0)
            var = tf.math.reduce_variance(x, axis=0) * rows / (rows - 1.0)  # unbiased, as torch's x.var(0)
            renorm = self.calls > float(self.warmup)
            batch_mean, batch_var = mean, var
            mean, var = renorm_correction(mean, var, self.running_mean, self.running_var, self.epsilon, renorm)
            self.running_mean.assign_add(self.momentum * (tf.stop_gradient(batch_mean) - self.running_mean))
            self.running_var.assign_add(self.momentum * (tf.stop_gradient(batch_var) - self.running_var))
            self.calls.assign_add(1.0)
        a = self.scale * tf.math.rsqrt(var + self.epsilon)  # per feature: one scale and one shift on the batch
        return x * a + (self.bias - mean * a)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "momentum": self.momentum, "epsilon": self.epsilon, "warmup": self.warmup}


def has_batch_renorm(model: keras.Model) -> bool:
    """Whether a network normalizes with Batch Renormalization (CrossQ requires it)."""
    return any(isinstance(layer, BatchRenorm) for layer in model.layers)
