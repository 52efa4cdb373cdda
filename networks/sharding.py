"""Batch shards, applied from outside the maths while an update is traced (`speed.batch_shards`).

Inside `batch_shards(n)`, every call of a `Network` cuts its batch into n equal shards, runs the
same layers on each and concatenates the outputs. The outputs, and so the losses and gradients,
are the full batch's (up to float summation order), but each shard's forward and backward pass is
a chain of ops of its own, which graph mode's inter-op threads run side by side, one per core,
instead of splitting every matmul across the cores. Outside the context (acting, evaluation,
export) a Network is a plain functional Keras model, with the same weights and checkpoint.
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator

import keras
import tensorflow as tf

_stack: list[int] = []


def check_shards(n) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"batch_shards must be a positive integer, got {n!r}")
    return n


@contextlib.contextmanager
def batch_shards(n: int) -> Iterator[None]:
    """Network calls built inside this context run on `n` equal shards of their batch."""
    _stack.append(check_shards(n))
    try:
        yield
    finally:
        _stack.pop()


def current_shards() -> int:
    return _stack[-1] if _stack else 1


@keras.saving.register_keras_serializable(package="tfrl")
class Network(keras.Model):
    """A functional Keras model (`Network(inputs, outputs)`) that honours `batch_shards`, unless a
    layer's output for one row depends on the others (Batch Renormalization's batch statistics),
    where shards would change what it computes."""

    @property
    def batch_dependent(self) -> bool:
        return any(getattr(layer, "batch_dependent", False) for layer in self.layers)

    def call(self, inputs, training=None, mask=None):
        n = current_shards()
        if n == 1 or self.batch_dependent:
            return super().call(inputs, training=training, mask=mask)
        parts = [super(Network, self).call(x, training=training, mask=mask) for x in tf.split(inputs, n)]
        return tf.concat(parts, axis=0)
