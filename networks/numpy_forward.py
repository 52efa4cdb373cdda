"""Run a Keras dense network's forward pass in numpy (MLPs; SimBa's residual blocks with LayerNorm).

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


def _activation(layer: keras.layers.Dense) -> Callable[[np.ndarray], np.ndarray] | None:
    name = keras.activations.serialize(layer.activation)
    name = name if isinstance(name, str) else name.get("config", {}).get("name", name.get("class_name"))
    return _ACTIVATIONS.get(name)


def forward_fn(model: keras.Model) -> Callable[[list[np.ndarray], np.ndarray], np.ndarray] | None:
    """`dense_forward_fn`, else `graph_forward_fn`: None only if neither can run the model."""
    return dense_forward_fn(model) or graph_forward_fn(model)


def layer_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, epsilon: float) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    var = np.square(x - mean).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + epsilon) * gamma + beta


def graph_forward_fn(model: keras.Model) -> Callable[[list[np.ndarray], np.ndarray], np.ndarray] | None:
    """A numpy function `f(weights, x)` equal to `model(x)` (up to float rounding) for a functional
    model of one input whose layers are Dense (with bias and a supported activation),
    LayerNormalization over the last axis, and Add: SimBa's residual networks. None otherwise."""
    if len(model.inputs) != 1 or len(model.outputs) != 1:
        return None
    slots = {id(model.inputs[0]): 0}
    program, first_weight = [], 0

    def slot_of(tensor) -> int | None:
        return slots.get(id(tensor))

    for layer in model.layers:
        if isinstance(layer, keras.layers.InputLayer):
            continue
        ins = layer.input if isinstance(layer.input, (list, tuple)) else [layer.input]
        in_slots = [slot_of(t) for t in ins]
        if None in in_slots:
            return None
        n = len(layer.weights)
        if isinstance(layer, keras.layers.Dense):
            act = _activation(layer)
            if not layer.use_bias or act is None:
                return None
            op = (lambda w, i, x, act=act: act(x @ w[i] + w[i + 1]))
        elif isinstance(layer, keras.layers.LayerNormalization):
            if list(layer.axis) not in ([-1], [len(layer.input.shape) - 1]) or not (layer.center and layer.scale) \
                    or getattr(layer, "rms_scaling", False):
                return None
            op = (lambda w, i, x, eps=float(layer.epsilon): layer_norm(x, w[i], w[i + 1], eps))
        elif isinstance(layer, keras.layers.Add):
            op = None
        else:
            return None
        program.append((op, first_weight, in_slots))
        slots[id(layer.output)] = len(slots)
        first_weight += n
    if first_weight != len(model.weights) or slot_of(model.outputs[0]) is None:
        return None
    output = slot_of(model.outputs[0])

    def forward(weights: list[np.ndarray], x: np.ndarray) -> np.ndarray:
        values = [x]
        for op, i, in_slots in program:
            if op is None:  # Add
                values.append(sum(values[j] for j in in_slots))
            else:
                values.append(op(weights, i, values[in_slots[0]]))
        return values[output]

    return forward


def dense_forward_fn(model: keras.Model) -> Callable[[list[np.ndarray], np.ndarray], np.ndarray] | None:
    """A numpy function `f(weights, x)` equal to `model(x)` for `weights = model.weights` in order,
    or None when the model is not a plain stack of Dense layers with supported activations."""
    activations = []
    for layer in model.layers:
        if isinstance(layer, keras.layers.InputLayer):
            continue
        if not isinstance(layer, keras.layers.Dense) or not layer.use_bias:
            return None
        act = _activation(layer)
        if act is None:
            return None
        activations.append(act)

    def forward(weights: list[np.ndarray], x: np.ndarray) -> np.ndarray:
        for i, act in enumerate(activations):
            x = act(x @ weights[2 * i] + weights[2 * i + 1])
        return x

    return forward
