"""A population of networks of one architecture, run as one: each weight of the network stacked
over the population on a leading axis, and one batched forward pass in which individual p maps its
own inputs through its own weights (a batched matmul over the population axis)."""
from __future__ import annotations

from typing import Callable

import keras
import tensorflow as tf

from networks.numpy_forward import parse_program


def population_forward_fn(model: keras.Model) -> Callable[[list[tf.Tensor], tf.Tensor], tf.Tensor]:
    """A TensorFlow function `f(weights, x)`: `weights[k]` is `model.weights[k]` stacked over a
    population of P, shape (P, *shape); `x` is (P, B, inputs); `f(weights, x)[p]` equals `model(x[p])`
    with individual p's weights. For the networks the numpy forward pass runs (Dense, LayerNorm and
    Add: mlp, simba)."""
    parsed = parse_program(model)
    if parsed is None:
        raise ValueError(
            f"network {model.name!r} has layers a population cannot run batched (only Dense, LayerNormalization "
            f"and Add are supported); use network=mlp or network=simba."
        )
    steps, output = parsed
    other = sorted({step.kind for step in steps} - {"dense", "layer_norm", "add", "batch_renorm"})
    if other:
        raise ValueError(f"network {model.name!r} has {', '.join(other)} steps, which a population does not run "
                         f"batched (only Dense, LayerNormalization and Add); use network=mlp or network=simba.")
    if any(step.kind == "batch_renorm" for step in steps):
        raise ValueError(f"network {model.name!r} has Batch Renormalization layers, which normalize over a batch of "
                         f"one individual's observations that a population step does not have; set "
                         f"network.batch_renorm=false.")

    def per_unit(w: tf.Tensor) -> tf.Tensor:
        return w[:, None, :]  # (P, units) -> (P, 1, units): one row per individual, broadcast over B

    def forward(weights: list[tf.Tensor], x: tf.Tensor) -> tf.Tensor:
        values = [x]
        for step in steps:
            v, i = values[step.inputs[0]], step.first_weight
            if step.kind == "dense":
                y = step.layer.activation(tf.matmul(v, weights[i]) + per_unit(weights[i + 1]))
            elif step.kind == "layer_norm":
                mean, var = tf.nn.moments(v, axes=[-1], keepdims=True)
                y = (v - mean) * tf.math.rsqrt(var + step.layer.epsilon)
                if step.layer.weights:  # a learned scale and offset (both or neither: numpy_forward._kind)
                    y = y * per_unit(weights[i]) + per_unit(weights[i + 1])
            else:
                y = tf.add_n([values[j] for j in step.inputs])
            values.append(y)
        return values[output]

    return forward
