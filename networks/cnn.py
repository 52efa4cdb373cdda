"""Convolutional networks for image observations: the Nature DQN network (Mnih et al. 2015), its
MinAtar size (Young & Tian 2019) and the IMPALA ResNet (Espeholt et al. 2018).

They take uint8 images (H, W, C) in [0, 255], scaled to [0, 1] in the network, so replay and acting
move bytes, not floats. The head is dense layers to `output_dim` outputs, or the dueling head.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import keras

from networks.mlp import INITS, DuelingCombine, dense
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
    return keras.layers.Conv2D(int(filters), int(kernel), int(stride), padding=padding, **kwargs)


def _scaled_input(shape: tuple[int, int, int], name: str):
    """The uint8 image input and its scaling to [0, 1]: (input, scaled)."""
    inputs = keras.Input(shape, dtype="uint8", name=f"{name}_in")
    return inputs, keras.layers.Rescaling(1.0 / 255.0, name=f"{name}_scale")(inputs)


def _check_convs(convs) -> list[tuple[int, int, int]]:
    try:
        layers = [tuple(int(v) for v in c) for c in convs]
    except (TypeError, ValueError):
        layers = []
    if not layers or any(len(c) != 3 or min(c) < 1 for c in layers):
        raise ValueError(f"network.convs must be a non-empty list of [filters, kernel, stride] with positive integers "
                         f"(Nature: [[32, 8, 4], [64, 4, 2], [64, 3, 1]]), got {convs!r}")
    return layers


def _head(x, fan_in: int, output_dim: int, hidden: Sequence[int], activation: str, init: str, dueling: bool,
          name: str):
    """Dense layers to the outputs; with `dueling`, a value and an advantage stream after the
    shared ones, each with the last hidden size (Wang et al. 2016, on the Nature torso)."""
    hidden = [int(h) for h in hidden]
    if any(h < 1 for h in hidden) or (dueling and not hidden):
        raise ValueError(f"network.hidden must be positive sizes{' (at least one with dueling)' if dueling else ''}, "
                         f"got {hidden}")
    shared = hidden[:-1] if dueling else hidden
    for i, units in enumerate(shared):
        x = dense(units, fan_in, init, activation=activation, name=f"{name}_h{i}")(x)
        fan_in = units
    if not dueling:
        return dense(output_dim, fan_in, init, name=f"{name}_out")(x)
    last = hidden[-1]
    v = dense(1, last, init, name=f"{name}_v")(dense(last, fan_in, init, activation=activation, name=f"{name}_v_h")(x))
    a = dense(output_dim, last, init, name=f"{name}_a")(
        dense(last, fan_in, init, activation=activation, name=f"{name}_a_h")(x))
    return DuelingCombine(name=f"{name}_out")([v, a])


def conv_net(
    input_shape: Sequence[int],
    output_dim: int,
    convs: Sequence[Sequence[int]] = ((32, 8, 4), (64, 4, 2), (64, 3, 1)),
    hidden: Sequence[int] = (512,),
    activation: str = "relu",
    init: str = "torch",
    dueling: bool = False,
    name: str = "cnn",
) -> keras.Model:
    """Convolutions (`convs`: [filters, kernel, stride] each, valid padding), flattened, then the
    head. The defaults are the Nature DQN network; MinAtar's is one [16, 3, 1] layer and 128 hidden."""
    h, w, c = image_shape(input_shape)
    inputs, x = _scaled_input((h, w, c), name)
    for i, (filters, kernel, stride) in enumerate(_check_convs(convs)):
        if kernel > min(h, w):
            raise ValueError(f"network.convs layer {i} ({kernel}x{kernel}) does not fit its {h}x{w} input; use "
                             f"smaller kernels for these images (MinAtar's 10x10: network.convs=[[16,3,1]])")
        x = conv(filters, kernel, stride, c, init, activation=activation, name=f"{name}_conv{i}")(x)
        h, w, c = (h - kernel) // stride + 1, (w - kernel) // stride + 1, filters
    x = keras.layers.Flatten(name=f"{name}_flat")(x)
    return Network(inputs, _head(x, h * w * c, output_dim, hidden, activation, init, dueling, name), name=name)


def impala_cnn(
    input_shape: Sequence[int],
    output_dim: int,
    channels: Sequence[int] = (16, 32, 32),
    hidden: Sequence[int] = (256,),
    activation: str = "relu",
    init: str = "torch",
    dueling: bool = False,
    name: str = "impala",
) -> keras.Model:
    """The IMPALA network: per stage a 3x3 convolution, 3x3 max-pooling with stride 2 and two
    residual blocks (relu, conv, relu, conv, added), all 'same' padding; then relu, flatten, the head."""
    h, w, c = image_shape(input_shape)
    if not channels or any(int(ch) < 1 for ch in channels):
        raise ValueError(f"network.channels must be positive integers, one per stage, got {list(channels)}")
    inputs, x = _scaled_input((h, w, c), name)
    act = keras.layers.Activation(activation)
    for s, ch in enumerate(int(ch) for ch in channels):
        x = conv(ch, 3, 1, c, init, padding="same", name=f"{name}_s{s}_conv")(x)
        x = keras.layers.MaxPooling2D(3, 2, padding="same", name=f"{name}_s{s}_pool")(x)
        c, h, w = ch, (h + 1) // 2, (w + 1) // 2
        for b in range(2):
            y = conv(ch, 3, 1, ch, init, padding="same", name=f"{name}_s{s}_b{b}_conv0")(act(x))
            y = conv(ch, 3, 1, ch, init, padding="same", name=f"{name}_s{s}_b{b}_conv1")(act(y))
            x = keras.layers.Add(name=f"{name}_s{s}_b{b}_add")([x, y])
    x = keras.layers.Flatten(name=f"{name}_flat")(keras.layers.Activation(activation, name=f"{name}_act")(x))
    return Network(inputs, _head(x, h * w * c, output_dim, hidden, activation, init, dueling, name), name=name)
