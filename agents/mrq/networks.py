"""MR.Q's networks (Fujimoto et al. 2025, "Towards General-Purpose Model-Free Reinforcement
Learning"; facebookresearch/MRQ's `models.py`), with the author's sizes as defaults.

- The state encoder zs = f(s): an MLP for vectors; for images (uint8, scaled to [-0.5, 0.5]) four
  3x3 convolutions of 32 filters (strides 2, 2, 2, 1) and a linear layer. Its output is layer
  normalized and activated.
- The state-action encoder zsa = g(zs, za) with za = act(W a), and the linear model on zsa that
  predicts the termination, the next zs and the reward's two-hot logits.
- The policy pi(zs) (its pre-activation: the agent applies tanh or the Gumbel-softmax) and the twin
  value network Q(zsa) -> (B, 2).
Every hidden layer is layer normalized (no learned scale or offset, as F.layer_norm without
weights) before its activation; every kernel is Xavier-uniform with ReLU's gain, every bias zero.
"""
from __future__ import annotations

from typing import NamedTuple

import keras
import tensorflow as tf

from networks.cnn import Conv2D, image_shape
from networks.mlp import Dense, check_width

ACTIVATIONS = ("relu", "elu", "tanh")
CONVS = ((32, 2), (32, 2), (32, 2), (32, 1))  # filters and stride of the image encoder's 3x3 convolutions


def smallest_image(convs, kernel: int = 3) -> int:
    """The smallest side that valid `kernel`-wide convolutions at these strides leave a pixel of."""
    side = 1
    for _, stride in reversed(convs):
        side = (side - 1) * stride + kernel
    return side


def _init() -> dict:
    """The author's `weight_init`: xavier_uniform_ with gain calculate_gain('relu') = sqrt(2)."""
    return {"kernel_initializer": keras.initializers.VarianceScaling(2.0, "fan_avg", "uniform"),
            "bias_initializer": "zeros"}


def _norm(name: str) -> keras.layers.LayerNormalization:
    return keras.layers.LayerNormalization(epsilon=1e-5, center=False, scale=False, name=name)


def _ln_act(x, activation: str, name: str):
    return keras.layers.Activation(activation, name=f"{name}_act")(_norm(f"{name}_ln")(x))


def _mlp(x, output_dim: int, hidden: int, activation: str, name: str):
    """The author's BaseMLP: two hidden layers, each layer normalized then activated, and a linear output."""
    for i in range(2):
        x = _ln_act(Dense(hidden, name=f"{name}_l{i + 1}", **_init())(x), activation, f"{name}_h{i + 1}")
    return Dense(output_dim, name=f"{name}_out", **_init())(x)


def _width(value, key: str) -> int:
    return check_width(value, key, "512 in MR.Q")


class Encoder(NamedTuple):
    """MR.Q's encoders: zs = f(s); zsa = g([zs, a]); the model zsa -> (done, next zs, reward logits)."""

    zs: keras.Model
    zsa: keras.Model
    model: keras.Model

    def embed(self, zs: tf.Tensor, action: tf.Tensor) -> tf.Tensor:
        return self.zsa([zs, action])

    def predict(self, zs: tf.Tensor, action: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        """The model's (done (B, 1), next zs (B, Z), reward logits (B, bins)) for (zs, a)."""
        out = self.model(self.embed(zs, action))
        z = self.zs.outputs[0].shape[-1]
        return out[:, :1], out[:, 1:z + 1], out[:, z + 1:]

    @property
    def weights(self) -> list:
        return self.zs.weights + self.zsa.weights + self.model.weights

    @property
    def trainable_variables(self) -> list:
        return self.zs.trainable_variables + self.zsa.trainable_variables + self.model.trainable_variables


class MRQNetworks:
    """The builders of MR.Q's networks (`network=mrq`): the agent asks for each by role."""

    def __init__(self, zs_dim: int = 512, za_dim: int = 256, zsa_dim: int = 512, encoder_hidden: int = 512,
                 value_hidden: int = 512, policy_hidden: int = 512, encoder_activation: str = "elu",
                 value_activation: str = "elu", policy_activation: str = "relu", linear_value: bool = False,
                 linear_model: bool = True):
        self.zs_dim, self.za_dim, self.zsa_dim = _width(zs_dim, "zs_dim"), _width(za_dim, "za_dim"), _width(zsa_dim, "zsa_dim")
        self.encoder_hidden = _width(encoder_hidden, "encoder_hidden")
        self.value_hidden, self.policy_hidden = _width(value_hidden, "value_hidden"), _width(policy_hidden, "policy_hidden")
        for key, value in (("encoder_activation", encoder_activation), ("value_activation", value_activation),
                           ("policy_activation", policy_activation)):
            if value not in ACTIVATIONS:
                raise ValueError(f"network.{key} must be one of {', '.join(ACTIVATIONS)}, got {value!r}")
        self.encoder_activation, self.value_activation = encoder_activation, value_activation
        self.policy_activation = policy_activation
        for key, value in (("linear_value", linear_value), ("linear_model", linear_model)):
            if not isinstance(value, bool):
                raise ValueError(f"network.{key} must be true or false, got {value!r}")
        self.linear_value, self.linear_model = linear_value, linear_model

    def __call__(self, *args, name: str = "network", **kwargs):
        raise ValueError(
            f"network=mrq builds MR.Q's encoders, policy and value networks (agent=mrq), not a network by input and "
            f"output size as this agent asks for its {name!r}; use network=mlp (or simba, or a CNN) with it."
        )

    def encoder(self, obs_shape: tuple[int, ...], action_dim: int, num_bins: int, name: str,
                like: Encoder | None = None) -> Encoder:
        """The three parts (`<name>_zs`, `<name>_zsa`, `<name>_model`); with `like`, holding its weights."""
        enc = Encoder(self.state_encoder(obs_shape, f"{name}_zs"), self.state_action_encoder(action_dim, f"{name}_zsa"),
                      self._model(num_bins, f"{name}_model"))
        for mine, theirs in zip(enc, like or ()):
            mine.set_weights(theirs.get_weights())
        return enc

    def state_encoder(self, obs_shape: tuple[int, ...], name: str) -> keras.Model:
        act = self.encoder_activation
        if len(obs_shape) == 1:
            obs = keras.Input(tuple(obs_shape), name=f"{name}_obs")
            x = _mlp(obs, self.zs_dim, self.encoder_hidden, act, name)
        else:
            h, w, c = image_shape(obs_shape)
            if min(h, w) < (side := smallest_image(CONVS)):
                raise ValueError(f"MR.Q's image encoder (3x3 convolutions at strides 2, 2, 2, 1) needs images of at "
                                 f"least {side}x{side} pixels, got {h}x{w}. Render larger images where the env "
                                 f"sets their size (env=dmc: env.kwargs.image_size; env=atari: env.kwargs.screen_size); "
                                 f"MinAtar's frames are 10x10 by design, and MR.Q's author does not run it: train "
                                 f"env=minatar with agent=dqn (network=minatar_cnn).")
            obs = keras.Input((h, w, c), dtype="uint8", name=f"{name}_obs")
            x = keras.layers.Rescaling(1.0 / 255.0, offset=-0.5, name=f"{name}_scale")(obs)
            for i, (filters, stride) in enumerate(CONVS):
                x = Conv2D(filters, 3, stride, activation=act, name=f"{name}_conv{i + 1}", **_init())(x)
            x = keras.layers.Flatten(name=f"{name}_flat")(x)
            x = Dense(self.zs_dim, name=f"{name}_out", **_init())(x)
        return keras.Model(obs, _ln_act(x, act, f"{name}_zs"), name=name)

    def state_action_encoder(self, action_dim: int, name: str) -> keras.Model:
        zs = keras.Input((self.zs_dim,), name=f"{name}_zs")
        action = keras.Input((action_dim,), name=f"{name}_action")
        za = Dense(self.za_dim, activation=self.encoder_activation, name=f"{name}_za", **_init())(action)
        x = keras.layers.Concatenate(name=f"{name}_cat")([zs, za])
        return keras.Model([zs, action], _mlp(x, self.zsa_dim, self.encoder_hidden, self.encoder_activation, name),
                           name=name)

    def _model(self, num_bins: int, name: str) -> keras.Model:
        """zsa -> [done, next zs, reward logits]: one linear layer, or without `linear_model` an MLP
        per part (the design study's "Non-linear model"; the author's BaseMLP, as the encoders')."""
        zsa = keras.Input((self.zsa_dim,), name=f"{name}_zsa")
        if self.linear_model:
            out = Dense(1 + self.zs_dim + num_bins, name=f"{name}_out", **_init())(zsa)
        else:
            out = keras.layers.Concatenate(name=f"{name}_out")(
                [_mlp(zsa, width, self.encoder_hidden, self.encoder_activation, f"{name}_{part}")
                 for part, width in (("done", 1), ("zs", self.zs_dim), ("reward", num_bins))])
        return keras.Model(zsa, out, name=name)

    def policy(self, action_dim: int, name: str) -> keras.Model:
        """zs -> the policy's pre-activation (B, action_dim)."""
        zs = keras.Input((self.zs_dim,), name=f"{name}_zs")
        return keras.Model(zs, _mlp(zs, action_dim, self.policy_hidden, self.policy_activation, name), name=name)

    def value(self, name: str) -> keras.Model:
        """zsa -> both value heads (B, 2), each an MLP to `value_hidden`, normalized, activated and
        linear; with `linear_value`, each linear in zsa (the design study's "Linear value function")."""
        zsa = keras.Input((self.zsa_dim,), name=f"{name}_zsa")
        heads = []
        for k in (1, 2):
            head = f"{name}_q{k}"
            x = zsa if self.linear_value else _ln_act(
                _mlp(zsa, self.value_hidden, self.value_hidden, self.value_activation, head), self.value_activation,
                f"{head}_h3")
            heads.append(Dense(1, name=f"{head}_value", **_init())(x))
        return keras.Model(zsa, keras.layers.Concatenate(name=f"{name}_q")(heads), name=name)


def acting_policy(encoder_zs: keras.Model, policy: keras.Model, name: str) -> keras.Model:
    """obs -> policy(zs(obs)): one model of the two, sharing their weights (acting and export)."""
    obs = keras.Input(encoder_zs.inputs[0].shape[1:], dtype=encoder_zs.inputs[0].dtype, name=f"{name}_obs")
    return keras.Model(obs, policy(encoder_zs(obs)), name=name)


def copy_weights(target, online) -> None:
    """The target's weights become the online network's (in a graph: assignments)."""
    for t, o in zip(target.weights, online.weights, strict=True):
        t.assign(o)
