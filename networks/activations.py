"""Activations by name, as the PyTorch code this project follows computes them.

TensorFlow's Elu computes exp(x) - 1, which loses up to a few parts in 1e4 of the value near 0
(the subtraction cancels); PyTorch's F.elu computes expm1(x), correct to a rounding. MR.Q's
author's code is PyTorch, and the chained check (benchmarks/author_mrq_chained_check.py) follows the
difference through training: an activation named "elu" here is PyTorch's.
"""
from __future__ import annotations

import tensorflow as tf


@tf.custom_gradient
def elu(x: tf.Tensor):
    """ELU (alpha 1) with expm1 for x <= 0; its gradient TensorFlow's EluGrad (dy, or dy (y + 1) below 0)."""
    y = tf.where(x > 0, x, tf.math.expm1(tf.minimum(x, 0.0)))
    return y, lambda dy: tf.raw_ops.EluGrad(gradients=dy, outputs=y)


def get(name: str):
    """The activation for a Keras layer's `activation`: ours for "elu", Keras's own for the rest."""
    return elu if name == "elu" else name
