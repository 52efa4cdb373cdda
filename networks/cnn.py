"""Convolutional networks for image observations: the Nature DQN network (Mnih et al. 2015), its
MinAtar size (Young & Tian 2019) and the IMPALA ResNet (Espeholt et al. 2018).

They take uint8 images (H, W, C) in [0, 255], scaled to [0, 1] in the network, so replay and acting
move bytes, not floats. The head is dense layers to `output_dim` outputs, or the dueling head. A
continuous agent's critic Q(s, a) gives `action_dim`: the network then takes (image, action) and
joins the action to the image's features before the head; its actor is the same network with its
own convolutions, its output through `output_activation`. `features` puts one dense layer between
the convolutions and the join: SB3's CnnPolicy for TD3 and SAC is `features=512` with its head
`hidden=[400, 300]` (TD3) or `[256, 256]` (SAC).
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import keras

from networks import precision
from networks.mlp import INITS, DuelingCombine, dense, weight_decay
from networks.sharding import Network


def image_shape(input_shape) -> tuple[int, int, int]:
    shape = tuple(int(d) for d in (input_shape if isinstance(input_shape, Sequence) else (input_shape,)))
    if len(shape) != 3:
        raise ValueError(f"a convolutional network takes images (H, W, C), not inputs of shape {shape}; vector "
                         f"observations need a dense network (network=mlp)")
    return shape


def conv(filters: int, kernel: int, stride: int, fan_in_channels: int, init: str, padding: str = "valid",
         **kwargs) -> keras.layers.Conv2D:
    """A Conv2D layer initialized as `networks.mlp.dense` initializes a Dense layer: torch
    (PyTorch's Conv2d default, U(+-1/sqrt(fan_in)) with fan_in = kernel * kernel * channels in, as
    SB3's NatureCNN and CleanRL have it) or keras (Glorot-uniform, zero bias)."""
    if init not in INITS:
        raise ValueError(f"network.init must be one of {', '.join(INITS)}, got {init!r}")
    if init == "torch":
        bound = 1.0 / math.sqrt(kernel * kernel * fan_in_channels)
        kwargs.update(kernel_initializer=keras.initializers.RandomUniform(-bound, bound),
                      bias_initializer=keras.initializers.RandomUniform(-bound, bound))
    return Conv2D(int(filters), int(kernel), int(stride), padding=padding, **kwargs)


@keras.saving.register_keras_serializable(package="tfrl")
class Conv2D(keras.layers.Conv2D):
    """keras.layers.Conv2D, with its convolution in the dtype of `networks.precision.matmul_precision`
    when that is set (an update with `update_precision=bfloat16`), as `networks.mlp.Dense` does its
    matmul; otherwise Keras' own Conv2D, unchanged."""

    def convolution_op(self, inputs, kernel):
        dtype = precision.matmul_dtype(inputs.dtype)
        if dtype is None:
            return super().convolution_op(inputs, kernel)
        return precision.in_dtype(super().convolution_op, inputs, kernel, dtype)


def scaled_input(shape: tuple[int, int, int], name: str) -> tuple:
    """The uint8 image input and its scaling to [0, 1]: (input, scaled)."""
    inputs = keras.Input(shape, dtype="uint8", name=f"{name}_in")
    return inputs, keras.layers.Rescaling(1.0 / 255.0, name=f"{name}_scale")(inputs)


def check_convs(convs) -> list[tuple[int, int, int]]:
    """`network.convs` as [filters, kernel, stride] triples, or a ValueError naming the key."""
    try:
        layers = [tuple(int(v) for v in c) for c in convs]
    except (TypeError, ValueError):
        layers = []
    if not layers or any(len(c) != 3 or min(c) < 1 for c in layers):
        raise ValueError(f"network.convs must be a non-empty list of [filters, kernel, stride] with positive integers "
                         f"(Nature: [[32, 8, 4], [64, 4, 2], [64, 3, 1]]), got {convs!r}")
    return layers


def _network(inputs, x, fan_in: int, output_dim: int, hidden: Sequence[int], activation: str, init: str,
             dueling: bool, name: str, output_activation: str | None, action_dim: int, regularizer,
             features: int | None) -> Network:
    """The flattened convolutions `x` (`fan_in` values), through a dense layer of `features` when
    given, joined by the action when `action_dim` > 0, then through dense layers to the outputs;
    with `dueling`, a value and an advantage stream after the shared ones, each with the last hidden
    size (Wang et al. 2016, on the Nature torso)."""
    hidden = [int(h) for h in hidden]
    if any(h < 1 for h in hidden) or (dueling and not hidden):
        raise ValueError(f"network.hidden must be positive sizes{' (at least one with dueling)' if dueling else ''}, "
                         f"got {hidden}")
    if dueling and (output_activation is not None or action_dim):
        raise ValueError("a dueling head outputs Q-values of discrete actions; continuous agents take "
                         "network.dueling=false")
    if features is not None:
        if isinstance(features, bool) or not isinstance(features, int) or features < 1:
            raise ValueError(f"network.features must be a positive integer or null, got {features!r}")
        x = dense(features, fan_in, init, activation=activation, kernel_regularizer=regularizer,
                  name=f"{name}_features")(x)
        fan_in = features
    if action_dim:
        action = keras.Input((int(action_dim),), name=f"{name}_action")
        inputs, x, fan_in = [inputs, action], keras.layers.Concatenate(name=f"{name}_join")([x, action]), fan_in + int(action_dim)
    layer = lambda units, fan, act, label: dense(units, fan, init, activation=act,  # noqa: E731
                                                 kernel_regularizer=regularizer, name=f"{name}_{label}")
    for i, units in enumerate(hidden[:-1] if dueling else hidden):
        x, fan_in = layer(units, fan_in, activation, f"h{i}")(x), units
    if not dueling:
        return Network(inputs, layer(output_dim, fan_in, output_activation, "out")(x), name=name)
    last = hidden[-1]
    v = layer(1, last, None, "v")(layer(last, fan_in, activation, "v_h")(x))
    a = layer(output_dim, last, None, "a")(layer(last, fan_in, activation, "a_h")(x))
    return Network(inputs, DuelingCombine(name=f"{name}_out")([v, a]), name=name)


def conv_net(
    input_shape: Sequence[int],
    output_dim: int,
    convs: Sequence[Sequence[int]] = ((32, 8, 4), (64, 4, 2), (64, 3, 1)),
    hidden: Sequence[int] = (512,),
    activation: str = "relu",
    init: str = "torch",
    dueling: bool = False,
    name: str = "cnn",
    output_activation: str | None = None,
    action_dim: int = 0,
    l2: float = 0.0,
    features: int | None = None,
) -> keras.Model:
    """Convolutions (`convs`: [filters, kernel, stride] each, valid padding), flattened, then the
    head. The defaults are the Nature DQN network; MinAtar's is one [16, 3, 1] layer and 128 hidden.
    `l2`: weight decay on every kernel (`networks.mlp.weight_decay`)."""
    h, w, c = image_shape(input_shape)
    regularizer = weight_decay(l2)
    inputs, x = scaled_input((h, w, c), name)
    for i, (filters, kernel, stride) in enumerate(check_convs(convs)):
        if kernel > min(h, w):
            raise ValueError(f"network.convs layer {i} ({kernel}x{kernel}) does not fit its {h}x{w} input; use "
                             f"smaller kernels for these images (MinAtar's 10x10: network.convs=[[16,3,1]])")
        x = conv(filters, kernel, stride, c, init, activation=activation, kernel_regularizer=regularizer,
                 name=f"{name}_conv{i}")(x)
        h, w, c = (h - kernel) // stride + 1, (w - kernel) // stride + 1, filters
    x = keras.layers.Flatten(name=f"{name}_flat")(x)
    return _network(inputs, x, h * w * c, output_dim, hidden, activation, init, dueling, name, output_activation,
                    action_dim, regularizer, features)


def impala_cnn(
    input_shape: Sequence[int],
    output_dim: int,
    channels: Sequence[int] = (16, 32, 32),
    hidden: Sequence[int] = (256,),
    activation: str = "relu",
    init: str = "torch",
    dueling: bool = False,
    name: str = "impala",
    output_activation: str | None = None,
    action_dim: int = 0,
    l2: float = 0.0,
    features: int | None = None,
) -> keras.Model:
    """The IMPALA network: per stage a 3x3 convolution, 3x3 max-pooling with stride 2 and two
    residual blocks (relu, conv, relu, conv, added), all 'same' padding; then relu, flatten, the head."""
    h, w, c = image_shape(input_shape)
    if not channels or any(int(ch) < 1 for ch in channels):
        raise ValueError(f"network.channels must be positive integers, one per stage, got {list(channels)}")
    inputs, x = scaled_input((h, w, c), name)
    regularizer = weight_decay(l2)
    act = keras.layers.Activation(activation)
    for s, ch in enumerate(int(ch) for ch in channels):
        x = conv(ch, 3, 1, c, init, padding="same", kernel_regularizer=regularizer, name=f"{name}_s{s}_conv")(x)
        x = keras.layers.MaxPooling2D(3, 2, padding="same", name=f"{name}_s{s}_pool")(x)
        c, h, w = ch, (h + 1) // 2, (w + 1) // 2
        for b in range(2):
            y = x
            for i in range(2):
                y = conv(ch, 3, 1, ch, init, padding="same", kernel_regularizer=regularizer,
                         name=f"{name}_s{s}_b{b}_conv{i}")(act(y))
            x = keras.layers.Add(name=f"{name}_s{s}_b{b}_add")([x, y])
    x = keras.layers.Flatten(name=f"{name}_flat")(keras.layers.Activation(activation, name=f"{name}_act")(x))
    return _network(inputs, x, h * w * c, output_dim, hidden, activation, init, dueling, name, output_activation,
                    action_dim, regularizer, features)
