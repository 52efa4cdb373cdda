"""Multi-layer perceptrons for actors, critics and Q-networks."""
from __future__ import annotations

import math
from collections.abc import Sequence

import keras
import numpy as np

from networks import precision
from networks.batch_renorm import BatchRenorm, check_renorm
from networks.sharding import Network

INITS = ("torch", "keras", "orthogonal")


def weight_decay(coefficient: float):
    """A Keras kernel regularizer whose gradient is `coefficient * w` (Keras' L2(c) is c * sum(w**2),
    twice that), or None for 0."""
    return keras.regularizers.L2(coefficient / 2) if coefficient > 0 else None


def check_width(value, key: str, usual: str) -> int:
    """A layer width setting: a positive integer, or a ValueError naming the key and its usual value."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"network.{key} must be a positive integer ({usual}), got {value!r}")
    return value


def dense(units: int, fan_in: int, init: str, **kwargs) -> keras.layers.Dense:
    """A Dense layer of `units` on `fan_in` inputs, initialized as `init` says:
    - torch: PyTorch's nn.Linear default, kernel and bias U(+-1/sqrt(fan_in)); the reference
      implementations use it (sfujim/TD3, Stable-Baselines3's DQN/TD3, and Torch7's DQN).
    - keras: Keras' default, Glorot-uniform kernel and zero bias;
    - orthogonal: an orthogonal kernel of gain sqrt(2) and zero bias, every layer (CleanRL's
      `layer_init` default, which its PQN uses)."""
    if init not in INITS:
        raise ValueError(f"network.init must be one of {', '.join(INITS)}, got {init!r}")
    if init == "orthogonal":
        kwargs.update(kernel_initializer=keras.initializers.Orthogonal(gain=math.sqrt(2.0)), bias_initializer="zeros")
    if init == "torch":
        bound = 1.0 / math.sqrt(fan_in)
        kwargs.update(kernel_initializer=keras.initializers.RandomUniform(-bound, bound),
                      bias_initializer=keras.initializers.RandomUniform(-bound, bound))
    return Dense(int(units), **kwargs)


@keras.saving.register_keras_serializable(package="tfrl")
class Dense(keras.layers.Dense):
    """keras.layers.Dense, with its matmul in the dtype of `networks.precision.matmul_precision`
    when that is set (while an update with `update_precision=bfloat16` is traced); otherwise
    Keras' own Dense, unchanged."""

    def call(self, inputs, training=None):
        dtype = precision.matmul_dtype(inputs.dtype)
        if dtype is None:
            return super().call(inputs, training=training)
        x = precision.matmul(inputs, self.kernel, dtype)
        if self.bias is not None:
            x = x + self.bias
        return x if self.activation is None else self.activation(x)


def input_size(input_dim) -> int:
    """A dense network's input size, given as a size or as a shape of one axis."""
    shape = (input_dim,) if isinstance(input_dim, (int, np.integer)) else tuple(input_dim)
    if len(shape) != 1:
        raise ValueError(f"a dense network takes vectors, not inputs of shape {shape}; images need a convolutional "
                         f"network (network=nature_cnn or network=impala_cnn)")
    return int(shape[0])


def mlp(
    input_dim: int | Sequence[int],
    output_dim: int,
    hidden: Sequence[int] = (256, 256),
    activation: str = "relu",
    output_activation: str | None = None,
    l2: float = 0.0,
    init: str = "torch",
    name: str = "mlp",
    actor_hidden: Sequence[int] | None = None,
    batch_renorm: bool = False,
    renorm_momentum: float = 0.01,
    renorm_epsilon: float = 1e-3,
    renorm_warmup: int = 100_000,
    layer_norm: bool = False,
) -> keras.Model:
    """A dense network `input_dim -> hidden... -> output_dim`, built (its weights exist on return).

    `l2` is a weight decay coefficient on the kernels (the original DDPG's critic weight decay):
    a penalty of l2/2 * sum(w**2), whose gradient is l2 * w, as PyTorch's `weight_decay` gives the
    kernels (it decays every parameter it is given, biases too) and the DDPG paper's "L2 weight
    decay of 1e-2". It appears in `model.losses`. `init`: see `dense`.
    `actor_hidden`, when given, are the hidden sizes of a network named actor* (SB3's separate
    `net_arch` for pi and qf). `batch_renorm` puts a Batch Renormalization layer before every Dense
    layer, the input's included (CrossQ's networks, as sb3-contrib builds them), with the
    `renorm_*` settings (`networks.batch_renorm`). `layer_norm` puts a LayerNorm (PyTorch's epsilon
    1e-5) between every hidden Dense layer and its activation (PQN's network, CleanRL's pqn.py).
    """
    if not isinstance(layer_norm, bool):
        raise ValueError(f"network.layer_norm must be true or false, got {layer_norm!r}")
    if actor_hidden is not None and name.startswith("actor"):
        hidden = actor_hidden
    if any(int(h) < 1 for h in hidden):
        raise ValueError(f"network.{'actor_' if hidden is actor_hidden else ''}hidden sizes must be positive integers, "
                         f"got {list(hidden)}")
    if batch_renorm:
        check_renorm(renorm_momentum, renorm_epsilon, renorm_warmup)
    input_dim = input_size(input_dim)
    regularizer = weight_decay(l2)
    inputs = keras.Input(shape=(int(input_dim),), name=f"{name}_in")

    def renorm(x, i):
        if not batch_renorm:
            return x
        return BatchRenorm(renorm_momentum, renorm_epsilon, renorm_warmup, name=f"{name}_brn{i}")(x)

    x, fan_in = inputs, int(input_dim)
    for i, units in enumerate(hidden):
        x = dense(units, fan_in, init, activation=None if layer_norm else activation, kernel_regularizer=regularizer,
                  name=f"{name}_h{i}")(renorm(x, i))
        if layer_norm:
            x = keras.layers.LayerNormalization(epsilon=1e-5, name=f"{name}_ln{i}")(x)
            x = keras.layers.Activation(activation, name=f"{name}_act{i}")(x)
        fan_in = int(units)
    outputs = dense(
        output_dim, fan_in, init, activation=output_activation, kernel_regularizer=regularizer, name=f"{name}_out"
    )(renorm(x, len(hidden)))
    return Network(inputs, outputs, name=name)


def dueling_mlp(
    input_dim: int | Sequence[int],
    output_dim: int,
    hidden: Sequence[int] = (256, 256),
    activation: str = "relu",
    output_activation: str | None = None,
    l2: float = 0.0,
    init: str = "torch",
    name: str = "dueling",
) -> keras.Model:
    """Dueling architecture (Wang et al. 2016): a shared torso, then a value stream V(s) and an
    advantage stream A(s, a), combined as Q = V + A - mean_a A. For Q-networks (discrete actions)."""
    if output_activation is not None:
        raise ValueError("a dueling head outputs Q-values; it takes no output activation (use network=mlp for actors)")
    if not hidden or any(int(h) < 1 for h in hidden):
        raise ValueError(f"network.hidden must be a non-empty list of positive sizes, got {list(hidden)}")
    input_dim = input_size(input_dim)
    regularizer = weight_decay(l2)
    inputs = keras.Input(shape=(int(input_dim),), name=f"{name}_in")
    x, fan_in = inputs, int(input_dim)
    for i, units in enumerate(hidden[:-1]):
        x = dense(units, fan_in, init, activation=activation, kernel_regularizer=regularizer, name=f"{name}_h{i}")(x)
        fan_in = int(units)
    last = int(hidden[-1])
    v = dense(last, fan_in, init, activation=activation, kernel_regularizer=regularizer, name=f"{name}_v_h")(x)
    v = dense(1, last, init, kernel_regularizer=regularizer, name=f"{name}_v")(v)
    a = dense(last, fan_in, init, activation=activation, kernel_regularizer=regularizer, name=f"{name}_a_h")(x)
    a = dense(output_dim, last, init, kernel_regularizer=regularizer, name=f"{name}_a")(a)
    q = DuelingCombine(name=f"{name}_out")([v, a])
    return Network(inputs, q, name=name)


@keras.saving.register_keras_serializable(package="tfrl")
class DuelingCombine(keras.layers.Layer):
    """Q = V + A - mean(A): the mean-subtracted aggregation of the dueling paper."""

    def call(self, inputs):
        v, a = inputs
        return v + a - keras.ops.mean(a, axis=-1, keepdims=True)
