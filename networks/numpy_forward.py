"""Run a Keras dense network's forward pass in numpy (MLPs; SimBa's residual blocks with LayerNorm;
CrossQ's Batch Renormalization in inference mode).

For one observation, a tf.function call costs hundreds of microseconds of fixed overhead while
the arithmetic of a 256-256 MLP takes a few; acting in numpy on the same weights removes that
overhead from every environment step.
"""
from __future__ import annotations

from typing import Callable, NamedTuple

import keras
import numpy as np

from networks.batch_renorm import BatchRenorm

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


def batch_renorm_inference(x: np.ndarray, scale: np.ndarray, bias: np.ndarray, running_mean: np.ndarray,
                           running_var: np.ndarray, epsilon: float) -> np.ndarray:
    return (x - running_mean) / np.sqrt(running_var + epsilon) * scale + bias


class Step(NamedTuple):
    """One layer of a parsed network: `kind` dense|layer_norm|add, its first weight's index in
    `model.weights`, the value slots it reads, and the layer (for its activation and epsilon);
    batch_renorm runs in inference mode."""

    kind: str
    first_weight: int
    inputs: tuple[int, ...]
    layer: keras.layers.Layer


def parse_program(model: keras.Model) -> tuple[list[Step], int] | None:
    """A functional model of one input as a program of Dense (with bias and a supported
    activation), LayerNormalization over the last axis, and Add steps, and the slot of its output
    (slot 0 is the input, slot k + 1 step k's value). None if it has any other layer. The numpy
    forward pass (`graph_forward_fn`) and the population's batched one (`networks.population`)
    both run this program."""
    if len(model.inputs) != 1 or len(model.outputs) != 1:
        return None
    slots = {id(model.inputs[0]): 0}
    program, first_weight = [], 0
    for layer in model.layers:
        if isinstance(layer, keras.layers.InputLayer):
            continue
        ins = layer.input if isinstance(layer.input, (list, tuple)) else [layer.input]
        in_slots = tuple(slots.get(id(t), -1) for t in ins)
        if -1 in in_slots:
            return None
        if isinstance(layer, keras.layers.Dense):
            if not layer.use_bias or _activation(layer) is None:
                return None
            kind = "dense"
        elif isinstance(layer, keras.layers.LayerNormalization):
            if list(layer.axis) not in ([-1], [len(layer.input.shape) - 1]) or not (layer.center and layer.scale) \
                    or getattr(layer, "rms_scaling", False):
                return None
            kind = "layer_norm"
        elif isinstance(layer, keras.layers.Add):
            kind = "add"
        elif isinstance(layer, BatchRenorm):
            kind = "batch_renorm"  # in inference mode: an affine map by the running statistics
        else:
            return None
        program.append(Step(kind, first_weight, in_slots, layer))
        slots[id(layer.output)] = len(slots)
        first_weight += len(layer.weights)
    if first_weight != len(model.weights) or id(model.outputs[0]) not in slots:
        return None
    return program, slots[id(model.outputs[0])]


def graph_forward_fn(model: keras.Model) -> Callable[[list[np.ndarray], np.ndarray], np.ndarray] | None:
    """A numpy function `f(weights, x)` equal to `model(x)` (up to float rounding) for a model
    `parse_program` reads: SimBa's residual networks. None otherwise."""
    parsed = parse_program(model)
    if parsed is None:
        return None
    steps, output = parsed
    ops = []
    for step in steps:
        i = step.first_weight
        if step.kind == "dense":
            ops.append(lambda w, x, i=i, act=_activation(step.layer): act(x @ w[i] + w[i + 1]))
        elif step.kind == "layer_norm":
            ops.append(lambda w, x, i=i, eps=float(step.layer.epsilon): layer_norm(x, w[i], w[i + 1], eps))
        elif step.kind == "batch_renorm":
            ops.append(lambda w, x, i=i, eps=step.layer.epsilon: batch_renorm_inference(x, *w[i:i + 4], eps))
        else:
            ops.append(None)
    program = [(op, step.inputs) for op, step in zip(ops, steps)]

    def forward(weights: list[np.ndarray], x: np.ndarray) -> np.ndarray:
        values = [x]
        for op, in_slots in program:
            if op is None:  # Add
                values.append(sum(values[j] for j in in_slots))
            else:
                values.append(op(weights, values[in_slots[0]]))
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
