"""PPO's networks (`network=ppo`): a separate actor and critic, each an MLP whose layers are
initialized orthogonally with zero biases, gains sqrt(2) in the hidden layers, 0.01 on the policy's
output and 1 on the value's (CleanRL's `layer_init`; SB3's `ortho_init`)."""
from __future__ import annotations

import math
from typing import Sequence

import keras

from networks.mlp import Dense, check_width

ACTIVATIONS = ("tanh", "relu")


def orthogonal_mlp(input_dim: int, output_dim: int, hidden: Sequence[int], activation: str, output_gain: float,
                   name: str) -> keras.Model:
    inputs = keras.Input((input_dim,), name=f"{name}_obs")
    x = inputs
    for i, width in enumerate(hidden):
        x = Dense(width, activation=activation, name=f"{name}_hidden{i}",
                  kernel_initializer=keras.initializers.Orthogonal(gain=math.sqrt(2.0)), bias_initializer="zeros")(x)
    out = Dense(output_dim, name=f"{name}_out", kernel_initializer=keras.initializers.Orthogonal(gain=output_gain),
                bias_initializer="zeros")(x)
    return keras.Model(inputs, out, name=name)


class PPONetworks:
    """The builders of PPO's actor (observation -> action mean, or logits) and critic (observation
    -> value), with the same hidden layers."""

    def __init__(self, hidden: Sequence[int] = (64, 64), activation: str = "tanh"):
        self.hidden = [check_width(w, "hidden", "64 in CleanRL and SB3") for w in hidden]
        if activation not in ACTIVATIONS:
            raise ValueError(f"network.activation must be one of {', '.join(ACTIVATIONS)}, got {activation!r}")
        self.activation = activation

    def actor(self, obs_dim: int, outputs: int) -> keras.Model:
        return orthogonal_mlp(obs_dim, outputs, self.hidden, self.activation, 0.01, "actor")

    def critic(self, obs_dim: int) -> keras.Model:
        return orthogonal_mlp(obs_dim, 1, self.hidden, self.activation, 1.0, "critic")

    def __call__(self, *args, name: str = "network", **kwargs):
        raise ValueError(f"network=ppo builds PPO's actor and critic (agent=ppo), not a network by input and output "
                         f"size as this agent asks for its {name!r}; use network=mlp (or simba, or a CNN) with it.")
