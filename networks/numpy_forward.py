"""Run a Keras dense network's forward pass in numpy.

For one observation, a tf.function call costs hundreds of microseconds of fixed overhead while
the arithmetic of a 256-256 MLP takes a few; acting in numpy on the same weights removes that
overhead from every environment step.
"""
from __future__ import annotations

from typing import Callable

import keras
import numpy as np

_ACTIVATIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "linear": lambda x: x,
    "relu": lambda x: np.maximum(x, 0.0, out=x),
    "tanh": lambda x: np.tanh(x, out=x),
    "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),
    "elu": lambda x: np.where(x > 0, x, np.expm1(np.minimum(x, 0.0))),
}


def dense_forward_fn(model: keras.Model) -> Callable[[list[np.ndarray], np.ndarray], np.ndarray] | None:
    """A numpy function `f(weights, x)` equal to `model(x)` for `weights = model.weights` in order,
    or None when the model is not a plain stack of Dense layers with supported activations."""
    activations = []
    for layer in model.layers:
        if isinstance(layer, keras.layers.InputLayer):
            continue
        if not isinstance(layer, keras.layers.Dense) or not layer.use_bias:
            return None
        name = keras.activations.serialize(layer.activation)
        name = name if isinstance(name, str) else name.get("config", {}).get("name", name.get("class_name"))
        if name not in _ACTIVATIONS:
            return None
        activations.append(_ACTIVATIONS[name])

    def forward(weights: list[np.ndarray], x: np.ndarray) -> np.ndarray:
        for i, act in enumerate(activations):
            x = act(x @ weights[2 * i] + weights[2 * i + 1])
        return x

    return forward
