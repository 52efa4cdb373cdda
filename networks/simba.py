"""SimBa networks (Lee et al., ICLR 2025, "SimBa: Simplicity Bias for Scaling Up Parameters in Deep
Reinforcement Learning"), after the authors' code (SonyResearch/simba, `SACEncoder`).

    x -> Dense(width) -> [x + Dense(width)(relu(Dense(4 * width)(LayerNorm(x))))] * blocks
      -> LayerNorm -> Dense(output)

The first and the output layers are initialized orthogonally (gain 1), the blocks' layers He-normal
(truncated), biases at zero; LayerNorm's epsilon is flax's 1e-6. The observation normalization with
running statistics, SimBa's third part, is not a layer: it sits before every network of the agent
(`network.obs_norm`, networks/normalization.py), so the statistics are one set, shared by the
actor and the critics as in the authors' agent wrapper.

The paper's actor is narrower and shallower than its critics (1 block of 128 against 2 of 512):
a network whose name starts with "actor" takes `actor_width` and `actor_blocks`.
"""
from __future__ import annotations

from collections.abc import Sequence

import keras

from networks.mlp import Dense, input_size, weight_decay
from networks.sharding import Network

LAYER_NORM_EPSILON = 1e-6  # flax.linen.LayerNorm's default (Keras' is 1e-3)


def check_shape(width, blocks, what: str) -> tuple[int, int]:
    if isinstance(width, bool) or not isinstance(width, int) or width < 1:
        raise ValueError(f"network.{what}width must be a positive integer (the paper's: 512 for critics, "
                         f"128 for the actor), got {width!r}")
    if isinstance(blocks, bool) or not isinstance(blocks, int) or blocks < 1:
        raise ValueError(f"network.{what}blocks must be an integer >= 1 (a SimBa network has at least one "
                         f"residual block; the paper's: 2 for critics, 1 for the actor), got {blocks!r}")
    return width, blocks


def residual_block(x, width: int, name: str, regularizer=None):
    """x + Dense(width)(relu(Dense(4 width)(LayerNorm(x)))): SimBa's pre-LN residual feed-forward block."""
    h = keras.layers.LayerNormalization(epsilon=LAYER_NORM_EPSILON, name=f"{name}_ln")(x)
    h = Dense(4 * width, activation="relu", kernel_initializer="he_normal", kernel_regularizer=regularizer,
              name=f"{name}_up")(h)
    h = Dense(width, kernel_initializer="he_normal", kernel_regularizer=regularizer, name=f"{name}_down")(h)
    return keras.layers.Add(name=f"{name}_add")([x, h])


def simba(
    input_dim: int | Sequence[int],
    output_dim: int,
    width: int = 512,
    blocks: int = 2,
    actor_width: int = 128,
    actor_blocks: int = 1,
    output_activation: str | None = None,
    l2: float = 0.0,
    name: str = "simba",
) -> keras.Model:
    """A SimBa network `input_dim -> output_dim`, built. `l2`: as `networks.mlp.mlp`'s."""
    actor = name.startswith("actor")
    width, blocks = check_shape(actor_width, actor_blocks, "actor_") if actor else check_shape(width, blocks, "")
    regularizer = weight_decay(l2)
    input_dim = input_size(input_dim)
    inputs = keras.Input(shape=(input_dim,), name=f"{name}_in")
    x = Dense(width, kernel_initializer=keras.initializers.Orthogonal(1.0), kernel_regularizer=regularizer,
              name=f"{name}_embed")(inputs)
    for i in range(blocks):
        x = residual_block(x, width, f"{name}_block{i}", regularizer)
    x = keras.layers.LayerNormalization(epsilon=LAYER_NORM_EPSILON, name=f"{name}_ln")(x)
    outputs = Dense(output_dim, activation=output_activation, kernel_initializer=keras.initializers.Orthogonal(1.0),
                    kernel_regularizer=regularizer, name=f"{name}_out")(x)
    return Network(inputs, outputs, name=name)
