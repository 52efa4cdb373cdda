"""Adam and AdamW as every reference implementation trains with them (PyTorch's), and in one kernel
where that is faster; RMSprop as PyTorch's (SB3's A2C); RAdam as PyTorch's (CleanRL's PQN)."""
from __future__ import annotations

import keras
import tensorflow as tf


class _OneKernelAdam:
    """Adam's step by PyTorch's formula, the one every reference implementation trains with:
    epsilon added to sqrt(v) after its bias correction, where Keras adds it before, so Keras' step
    with epsilon * sqrt(1 - beta_2**t). (Keras' own 1e-8 acts as PyTorch's 1e-8 / sqrt(1 - beta_2**t),
    3.2e-7 at the first step: enough to move the first few thousand steps of weights whose gradients
    are that small, as MR.Q's policy's are; benchmarks/author_mrq_update_check.py.)

    A variable of `ONE_KERNEL_FROM` elements or more is stepped as one kernel (TensorFlow's
    ResourceApplyAdam, tf.keras 2's path) instead of eleven elementwise ops, each a pass over the
    variable: the same formula, with 1 - beta rounded in float32 where the ops round it from a
    double (steps differ in the last bit). Smaller variables take the ops: the kernel splits every
    variable across the intra-op threads whatever its size, which costs more than it saves on a
    small one (labs/log.md, stop 53). amsgrad, which the kernel lacks, is Keras' own step."""

    ONE_KERNEL_FROM = 16384

    def update_step(self, gradient, variable, learning_rate):
        if self.amsgrad:
            return super().update_step(gradient, variable, learning_rate)
        index = self._get_variable_index(variable)
        dtype = variable.dtype
        m, v = self._momentums[index], self._velocities[index]
        step = tf.cast(self.iterations + 1, dtype)
        beta_1, beta_2 = tf.cast(self.beta_1, dtype), tf.cast(self.beta_2, dtype)
        beta_1_power, beta_2_power = tf.pow(beta_1, step), tf.pow(beta_2, step)
        lr, gradient = tf.cast(learning_rate, dtype), tf.cast(gradient, dtype)
        correction_2 = tf.sqrt(1 - beta_2_power)  # sqrt(v)'s bias correction
        epsilon = tf.cast(self.epsilon, dtype) * correction_2  # PyTorch's, in Keras' units
        if variable.shape.num_elements() >= self.ONE_KERNEL_FROM:
            handle = [(x.value if isinstance(x, keras.Variable) else x).handle for x in (variable, m, v)]
            return tf.raw_ops.ResourceApplyAdam(
                var=handle[0], m=handle[1], v=handle[2], beta1_power=beta_1_power, beta2_power=beta_2_power, lr=lr,
                beta1=beta_1, beta2=beta_2, epsilon=epsilon, grad=gradient, use_locking=False)
        alpha = lr * correction_2 / (1 - beta_1_power)
        self.assign_add(m, keras.ops.multiply(keras.ops.subtract(gradient, m), 1 - self.beta_1))
        self.assign_add(v, keras.ops.multiply(keras.ops.subtract(keras.ops.square(gradient), v), 1 - self.beta_2))
        self.assign_sub(variable, keras.ops.divide(keras.ops.multiply(m, alpha), keras.ops.add(keras.ops.sqrt(v), epsilon)))


class Adam(_OneKernelAdam, keras.optimizers.Adam):
    pass


class AdamW(_OneKernelAdam, keras.optimizers.AdamW):
    """Decoupled weight decay (one pass over the variable before the step), then Adam's step. The
    decay is PyTorch's, w * (1 - lr * wd) with the factor rounded to the variable's float32, where
    Keras subtracts w * wd * lr: the rounding is most of it at MR.Q's settings, where PyTorch's factor
    is 1 exactly for its encoder (lr 1e-4, wd 1e-4: no decay at all) and 1 - 2^-24 for its value and
    policy (twice the nominal 3e-8), and DR.Q's 1 - 3e-6 is 0.7% short (labs/log.md)."""

    def _apply_weight_decay(self, variables):
        if self.weight_decay is None:
            return
        factor = 1.0 - tf.cast(self.learning_rate, tf.float64) * self.weight_decay  # once, in float64 as PyTorch's
        for variable in variables:
            if self._use_weight_decay(variable):
                variable.assign(variable * tf.cast(factor, variable.dtype))


class RMSprop(keras.optimizers.RMSprop):
    """RMSprop's step by PyTorch's formula (torch.optim.RMSprop, which SB3's A2C trains with):
    v = rho v + (1 - rho) g^2, w -= lr g / (sqrt(v) + epsilon); Keras adds epsilon inside the square
    root. Without momentum or centering, which SB3's A2C leaves off."""

    def update_step(self, gradient, variable, learning_rate):
        if self.momentum > 0 or self.centered:
            return super().update_step(gradient, variable, learning_rate)
        lr, gradient = keras.ops.cast(learning_rate, variable.dtype), keras.ops.cast(gradient, variable.dtype)
        v = self._velocities[self._get_variable_index(variable)]
        self.assign(v, keras.ops.add(keras.ops.multiply(self.rho, v), keras.ops.multiply(1 - self.rho, keras.ops.square(gradient))))
        self.assign_sub(variable, keras.ops.divide(keras.ops.multiply(lr, gradient),
                                                   keras.ops.add(keras.ops.sqrt(v), self.epsilon)))


class RAdam(keras.optimizers.Adam):
    """Rectified Adam (Liu et al. 2020) by PyTorch's formula (torch.optim.RAdam, which CleanRL's PQN
    trains with): Adam's moments; while the variance's approximate degrees of freedom rho_t are at
    most 5 (the first 5 steps at beta_2 0.999) the step is the bias-corrected momentum alone, after
    that Adam's step times the rectification sqrt((rho_t - 4)(rho_t - 2) rho_inf / ((rho_inf - 4)
    (rho_inf - 2) rho_t)), epsilon added to sqrt(v) as PyTorch adds it."""

    def update_step(self, gradient, variable, learning_rate):
        dtype = variable.dtype
        index = self._get_variable_index(variable)
        m, v = self._momentums[index], self._velocities[index]
        gradient = tf.cast(gradient, dtype)
        self.assign_add(m, keras.ops.multiply(keras.ops.subtract(gradient, m), 1 - self.beta_1))
        self.assign_add(v, keras.ops.multiply(keras.ops.subtract(keras.ops.square(gradient), v), 1 - self.beta_2))
        t = tf.cast(self.iterations + 1, tf.float64)  # the schedule's scalars in float64, as PyTorch's are
        beta_2 = tf.constant(self.beta_2, tf.float64)
        correction_1 = 1 - tf.pow(tf.constant(self.beta_1, tf.float64), t)
        correction_2 = 1 - tf.pow(beta_2, t)
        rho_inf = 2 / (1 - beta_2) - 1
        rho_t = rho_inf - 2 * t * tf.pow(beta_2, t) / correction_2
        rect = tf.sqrt(tf.maximum((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t), 0.0))
        momentum = m * tf.cast(tf.cast(learning_rate, tf.float64) / correction_1, dtype)
        adaptive = tf.cast(tf.sqrt(correction_2) * rect, dtype) / (tf.sqrt(v) + self.epsilon)
        self.assign_sub(variable, tf.where(rho_t > 5, momentum * adaptive, momentum))


def adam(learning_rate: float, beta_1: float = 0.9) -> Adam:
    """Adam with the reference implementations' (PyTorch's) epsilon 1e-8, Keras' default being 1e-7,
    added where PyTorch adds it (see _OneKernelAdam)."""
    return Adam(learning_rate=learning_rate, beta_1=beta_1, epsilon=1e-8)


def adamw(learning_rate: float, weight_decay: float, variables: list) -> AdamW:
    """AdamW with PyTorch's epsilon (torch.optim.AdamW's, as `adam`), built for `variables`."""
    optimizer = AdamW(learning_rate=learning_rate, weight_decay=weight_decay, epsilon=1e-8)
    optimizer.build(variables)
    return optimizer
