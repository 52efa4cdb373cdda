"""Run a Keras network's forward pass in numpy (MLPs; SimBa's residual blocks with LayerNorm;
CrossQ's Batch Renormalization in inference mode; TD7's policy, its encoder and actor models in one;
the Nature and MinAtar CNNs of networks/cnn.py, each convolution one matmul over the image's
patches). Max-pooling is left to TensorFlow: numpy's windows made the IMPALA network slower to act
than a tf.function call (benchmarks/cnn_acting.py; labs/log.md), so it acts through one.

For one observation, a tf.function call costs hundreds of microseconds of fixed overhead while
the arithmetic of a 256-256 MLP takes a few; acting in numpy on the same weights removes that
overhead from every environment step.
"""
from __future__ import annotations

from typing import Callable, NamedTuple

import keras
import numpy as np

from networks.batch_renorm import BatchRenorm
from networks.mlp import DuelingCombine

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
    """One layer of a parsed network: `kind` dense|layer_norm|add|concat|avg_l1_norm|batch_renorm,
    its first weight's index in `model.weights`, the value slots it reads, and the layer (for its
    activation and epsilon); batch_renorm runs in inference mode."""

    kind: str
    first_weight: int
    inputs: tuple[int, ...]
    layer: keras.layers.Layer


def _kind(layer: keras.layers.Layer, inputs: list) -> str | None:
    """The step a layer is, or None if the numpy forward pass cannot run it."""
    from networks.sale import AvgL1Norm

    rank = len(inputs[0].shape)
    if isinstance(layer, keras.layers.Dense):
        return "dense" if layer.use_bias and _activation(layer) is not None else None
    if isinstance(layer, keras.layers.LayerNormalization):
        affine = layer.center and layer.scale or not (layer.center or layer.scale)  # both or neither (MR.Q)
        plain = affine and not getattr(layer, "rms_scaling", False)
        return "layer_norm" if plain and list(layer.axis) in ([-1], [rank - 1]) else None
    if isinstance(layer, keras.layers.Concatenate):
        return "concat" if layer.axis in (-1, rank - 1) else None
    if isinstance(layer, keras.layers.Conv2D):
        plain = layer.use_bias and layer.groups == 1 and tuple(layer.dilation_rate) == (1, 1)
        return "conv2d" if plain and layer.data_format == "channels_last" and _activation(layer) else None
    if isinstance(layer, keras.layers.Activation):
        return "activation" if _activation(layer) is not None else None
    kinds = {keras.layers.Add: "add", AvgL1Norm: "avg_l1_norm", keras.layers.Rescaling: "rescaling",
             keras.layers.Flatten: "flatten", DuelingCombine: "dueling",
             BatchRenorm: "batch_renorm"}  # in inference mode: an affine map by the running statistics
    return next((kind for cls, kind in kinds.items() if isinstance(layer, cls)), None)


def _same_padding(x: np.ndarray, kernel: tuple[int, int], strides: tuple[int, int], value: float = 0.0) -> np.ndarray:
    """TensorFlow's 'same' padding of (B, H, W, C): the output is ceil(size / stride), the extra
    row or column after."""
    pads = [(0, 0)]
    for size, k, s in zip(x.shape[1:3], kernel, strides):
        total = max((-(-size // s) - 1) * s + k - size, 0)
        pads.append((total // 2, total - total // 2))
    return np.pad(x, pads + [(0, 0)], constant_values=value)


def _patches(x: np.ndarray, kernel: tuple[int, int], strides: tuple[int, int]) -> np.ndarray:
    """(B, H, W, C) -> (B, OH, OW, kh, kw, C) windows at the strides: a view of `x`, made with
    as_strided directly (sliding_window_view's checks cost more than the view)."""
    b, h, w, c = x.shape
    (kh, kw), (sh, sw) = kernel, strides
    sb, sy, sx, sc = x.strides
    shape = (b, (h - kh) // sh + 1, (w - kw) // sw + 1, kh, kw, c)
    return np.lib.stride_tricks.as_strided(x, shape, (sb, sy * sh, sx * sw, sy, sx, sc), writeable=False)


def conv2d(x: np.ndarray, kernel: np.ndarray, bias: np.ndarray, strides: tuple[int, int], padding: str) -> np.ndarray:
    """Keras' Conv2D (channels last) as one matmul of the image's patches with the flattened kernel."""
    kh, kw, c, f = kernel.shape
    if padding == "same":
        x = _same_padding(x, (kh, kw), strides, 0.0)
    patches = _patches(x, (kh, kw), strides)
    b, oh, ow = patches.shape[:3]
    return (patches.reshape(b * oh * ow, kh * kw * c) @ kernel.reshape(kh * kw * c, f) + bias).reshape(b, oh, ow, f)



def _inline(model: keras.Model, input_slots: list[int], base: int, program: list[Step]) -> list[int] | None:
    """Append `model`'s layers to `program`, its inputs read from `input_slots` and its weights
    from `base` on; a functional model called inside it (TD7's policy: encoder and actor) is
    inlined. Returns the slots of its outputs, or None if a layer is not one `_kind` knows."""
    offsets, first = {}, 0
    for layer in model.layers:  # model.weights is its layers' weights in this order
        offsets[id(layer)] = first
        first += len(layer.weights)
    if first != len(model.weights):
        return None
    slots = {id(t): s for t, s in zip(model.inputs, input_slots)}
    for depth in sorted(model._nodes_by_depth, reverse=True):  # Keras' topological order, inputs first
        for node in model._nodes_by_depth[depth]:
            layer = node.operation
            if isinstance(layer, keras.layers.InputLayer):
                continue
            in_slots = [slots.get(id(t), -1) for t in node.input_tensors]
            if -1 in in_slots:
                return None
            if isinstance(layer, keras.Model):
                outs = _inline(layer, in_slots, base + offsets[id(layer)], program)
                if outs is None or len(outs) != len(node.output_tensors):
                    return None
                slots.update((id(t), s) for t, s in zip(node.output_tensors, outs))
                continue
            kind = _kind(layer, node.input_tensors)
            if kind is None or len(node.output_tensors) != 1:
                return None
            program.append(Step(kind, base + offsets[id(layer)], tuple(in_slots), layer))
            slots[id(node.output_tensors[0])] = len(program)
    outs = [slots.get(id(t), -1) for t in model.outputs]
    return None if -1 in outs else outs


def parse_program(model: keras.Model, outputs: int = 1) -> tuple[list[Step], int | list[int]] | None:
    """A functional model of one input and `outputs` outputs as a program of steps (`_kind`) and
    the slot of its output, or with several the list of their slots (slot 0 is the input, slot
    k + 1 step k's value). None if it has any other layer or another number of outputs. The numpy
    forward pass (`graph_forward_fn`) and the population's batched one (`networks.population`)
    both run this program."""
    if len(model.inputs) != 1 or len(model.outputs) != outputs:
        return None
    program: list[Step] = []
    outs = _inline(model, [0], 0, program)
    return None if outs is None else (program, outs[0] if outputs == 1 else outs)


def avg_l1_norm(x: np.ndarray, epsilon: float) -> np.ndarray:
    return x / np.maximum(np.abs(x).mean(axis=-1, keepdims=True), epsilon)


def graph_forward_fn(model: keras.Model) -> Callable[[list[np.ndarray], np.ndarray], np.ndarray] | None:
    """A numpy function `f(weights, x)` equal to `model(x)` (up to float rounding) for a model
    `parse_program` reads: SimBa's residual networks, CrossQ's, TD7's policy, PPO's policy and value
    (two outputs: a tuple of them). None otherwise."""
    parsed = parse_program(model, len(model.outputs))
    if parsed is None:
        return None
    steps, output = parsed
    ops = []
    for step in steps:
        i = step.first_weight
        if step.kind == "dense":
            ops.append(lambda w, x, i=i, act=_activation(step.layer): act(x @ w[i] + w[i + 1]))
        elif step.kind == "layer_norm" and not step.layer.weights:
            ops.append(lambda w, x, eps=float(step.layer.epsilon): layer_norm(x, 1.0, 0.0, eps))
        elif step.kind == "layer_norm":
            ops.append(lambda w, x, i=i, eps=float(step.layer.epsilon): layer_norm(x, w[i], w[i + 1], eps))
        elif step.kind == "batch_renorm":
            ops.append(lambda w, x, i=i, eps=step.layer.epsilon: batch_renorm_inference(x, *w[i:i + 4], eps))
        elif step.kind == "avg_l1_norm":
            ops.append(lambda w, x, eps=step.layer.epsilon: avg_l1_norm(x, eps))
        elif step.kind == "add":
            ops.append(lambda w, *xs: sum(xs))
        elif step.kind == "conv2d":
            ops.append(lambda w, x, i=i, act=_activation(step.layer), strides=tuple(step.layer.strides),
                       padding=step.layer.padding: act(conv2d(x, w[i], w[i + 1], strides, padding)))
        elif step.kind == "activation":
            ops.append(lambda w, x, act=_activation(step.layer): act(np.array(x)))  # a copy: in-place activations
        elif step.kind == "rescaling":
            ops.append(lambda w, x, layer=step.layer: x.astype(np.float32) * np.float32(layer.scale)
                       + np.float32(layer.offset))
        elif step.kind == "flatten":
            ops.append(lambda w, x: x.reshape(x.shape[0], -1))
        elif step.kind == "dueling":
            ops.append(lambda w, v, a: v + a - a.mean(axis=-1, keepdims=True))
        else:  # concat
            ops.append(lambda w, *xs: np.concatenate(xs, axis=-1))
    # a step reading one value (most of them) takes its slot as an int: no tuple unpacking per step
    program = [(op, step.inputs[0] if len(step.inputs) == 1 else step.inputs) for op, step in zip(ops, steps)]

    def forward(weights: list[np.ndarray], x: np.ndarray) -> np.ndarray:
        values = [x]
        append = values.append
        for op, slots in program:
            append(op(weights, values[slots]) if type(slots) is int else op(weights, *[values[j] for j in slots]))
        return values[output] if type(output) is int else tuple(values[j] for j in output)

    return forward


def dense_forward_fn(model: keras.Model) -> Callable[[list[np.ndarray], np.ndarray], np.ndarray] | None:
    """A numpy function `f(weights, x)` equal to `model(x)` for `weights = model.weights` in order,
    or None when the model is not a plain stack of Dense layers with supported activations."""
    if len(model.inputs) != 1 or len(model.outputs) != 1:
        return None
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
