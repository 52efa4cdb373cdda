"""PPO's networks (`network=ppo`): one model from an observation to the policy's outputs (action
means, or logits) with the value after them, as CleanRL builds them. Vector observations get a
separate actor and critic MLP (ppo.py, ppo_continuous_action.py); images a Nature CNN trunk that
both heads share (ppo_atari.py). Every layer is initialized orthogonally with zero biases, gain
sqrt(2) in the hidden layers, 0.01 on the policy's output and 1 on the value's (CleanRL's
`layer_init`; SB3's `ortho_init`), or with `ortho_init=False` as PyTorch's nn.Linear default (kernel
and bias U(+-1/sqrt(fan_in)), SB3's `ortho_init=False`, which the RL Zoo's tuned MuJoCo PPO uses). One model of both lets acting run the trunk once a step in numpy
(agents/acting.py) and the update once a minibatch."""
from __future__ import annotations

import math
from typing import Sequence

import keras

from networks.cnn import Conv2D, check_convs, image_shape, scaled_input
from networks.mlp import Dense, check_width, dense

ACTIVATIONS = ("tanh", "relu")
NATURE_CONVS = ((32, 8, 4), (64, 4, 2), (64, 3, 1))
HIDDEN_GAIN = math.sqrt(2.0)


def orthogonal(gain: float) -> dict:
    return dict(kernel_initializer=keras.initializers.Orthogonal(gain=gain), bias_initializer="zeros")


def mlp_branch(x, output_dim: int, hidden: Sequence[int], activation: str, output_gain: float, name: str,
               ortho_init: bool = True):
    def layer(units, fan_in, gain, **kwargs):
        if ortho_init:
            return Dense(units, **orthogonal(gain), **kwargs)
        return dense(units, fan_in, "torch", **kwargs)

    fan_in = x.shape[-1]
    for i, width in enumerate(hidden):
        x = layer(width, fan_in, HIDDEN_GAIN, activation=activation, name=f"{name}_hidden{i}")(x)
        fan_in = width
    return layer(output_dim, fan_in, output_gain, name=f"{name}_out")(x)


def policy_value_mlp(obs_dim: int, outputs: int, hidden: Sequence[int], activation: str,
                     ortho_init: bool = True) -> keras.Model:
    """A separate actor and critic MLP on the same observation."""
    obs = keras.Input((obs_dim,), name="obs")
    actor = mlp_branch(obs, outputs, hidden, activation, 0.01, "actor", ortho_init)
    critic = mlp_branch(obs, 1, hidden, activation, 1.0, "critic", ortho_init)
    return keras.Model(obs, [actor, critic], name="ppo")


def policy_value_cnn(shape: tuple[int, int, int], outputs: int, convs: Sequence[Sequence[int]],
                     features: int) -> keras.Model:
    """The shared trunk (ReLU convolutions with valid padding, flattened, one ReLU dense layer of
    `features`) and the policy's and value's linear heads on it."""
    h, w, _ = shape
    image, x = scaled_input(shape, "trunk")
    for i, (filters, kernel, stride) in enumerate(check_convs(convs)):
        if kernel > min(h, w):
            raise ValueError(f"network.convs layer {i} ({kernel}x{kernel}) does not fit its {h}x{w} input; use "
                             f"smaller kernels for these images (MinAtar's 10x10: network.convs=[[16,3,1]])")
        x = Conv2D(filters, kernel, stride, activation="relu", name=f"trunk_conv{i}", **orthogonal(HIDDEN_GAIN))(x)
        h, w = (h - kernel) // stride + 1, (w - kernel) // stride + 1
    x = keras.layers.Flatten(name="trunk_flat")(x)
    x = Dense(features, activation="relu", name="trunk_features", **orthogonal(HIDDEN_GAIN))(x)
    actor = Dense(outputs, name="actor_out", **orthogonal(0.01))(x)
    critic = Dense(1, name="critic_out", **orthogonal(1.0))(x)
    return keras.Model(image, [actor, critic], name="ppo")


class PPONetworks:
    """The builder of PPO's policy-value model: for vectors, actor and critic MLPs of `hidden` with
    `activation`; for images (H, W, C), the trunk of `convs` and `features` shared by both heads.
    `ortho_init`: orthogonal layers (CleanRL, SB3's default), or PyTorch's default (vectors only)."""

    def __init__(self, hidden: Sequence[int] = (64, 64), activation: str = "tanh",
                 convs: Sequence[Sequence[int]] = NATURE_CONVS, features: int = 512, ortho_init: bool = True):
        self.hidden = [check_width(w, "hidden", "64 in CleanRL and SB3") for w in hidden]
        if activation not in ACTIVATIONS:
            raise ValueError(f"network.activation must be one of {', '.join(ACTIVATIONS)}, got {activation!r}")
        self.activation = activation
        self.convs = check_convs(convs)
        self.features = check_width(features, "features", "512 in CleanRL's Atari PPO")
        if not isinstance(ortho_init, bool):
            raise ValueError(f"network.ortho_init must be true or false, got {ortho_init!r}")
        self.ortho_init = ortho_init

    def policy_value(self, obs_shape: Sequence[int], outputs: int) -> keras.Model:
        """obs -> [policy outputs (B, `outputs`), value (B, 1)]."""
        if len(obs_shape) == 1:
            return policy_value_mlp(int(obs_shape[0]), outputs, self.hidden, self.activation, self.ortho_init)
        if not self.ortho_init:
            raise ValueError("network.ortho_init=false is for vector observations (the RL Zoo's MuJoCo PPO); PPO's "
                             "image network is CleanRL's, initialized orthogonally: leave network.ortho_init=true")
        return policy_value_cnn(image_shape(obs_shape), outputs, self.convs, self.features)

    def __call__(self, *args, name: str = "network", **kwargs):
        raise ValueError(f"network=ppo builds PPO's actor and critic (agent=ppo), not a network by input and output "
                         f"size as this agent asks for its {name!r}; use network=mlp (or simba, or a CNN) with it.")
