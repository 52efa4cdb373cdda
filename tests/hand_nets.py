"""Helpers for tests that check the agents against values computed by hand: a numpy forward pass
of a dense stack (float64, no TensorFlow), network builders whose networks get chosen weights at
construction, and batches as float32 tensors (int32 discrete actions)."""
from __future__ import annotations

import numpy as np
import tensorflow as tf

from buffers.types import Batch
from networks.mlp import mlp


def forward(weights, x, output_activation=None) -> np.ndarray:
    """Output of a dense stack `[kernel, bias, kernel, bias, ...]` with relu hidden layers, in float64."""
    h = np.asarray(x, np.float64)
    layers = list(zip(weights[0::2], weights[1::2]))
    for i, (kernel, bias) in enumerate(layers):
        h = h @ np.asarray(kernel, np.float64) + np.asarray(bias, np.float64)
        if i < len(layers) - 1:
            h = np.maximum(h, 0.0)
    if output_activation == "tanh":
        return np.tanh(h)
    assert output_activation is None, output_activation
    return h


def q_value(critic_weights, obs, action) -> np.ndarray:
    """A critic's Q(s, a), shape (B,): the network on [s, a]."""
    return forward(critic_weights, np.concatenate([obs, action], axis=-1))[:, 0]


def policy(actor_weights, obs, low, high) -> np.ndarray:
    """A tanh actor's action, mapped from [-1, 1] onto [low, high]."""
    low, high = np.asarray(low, np.float64), np.asarray(high, np.float64)
    return low + (forward(actor_weights, obs, "tanh") + 1.0) * 0.5 * (high - low)


def random_weights(model, rng: np.random.Generator, scale: float = 0.5) -> list[np.ndarray]:
    return [rng.normal(0.0, scale, w.shape).astype(np.float32) for w in model.get_weights()]


def builder(hidden, weights: dict | None = None):
    """A network builder as the agents take (`network(input_dim, output_dim, output_activation=...,
    name=...)`): an mlp of `hidden` relu units; a network whose name is in `weights` gets
    `weights[name](model)` as its weights when it is built."""

    def build(input_dim, output_dim, output_activation=None, name="mlp", **kwargs):
        model = mlp(input_dim, output_dim, hidden=hidden, output_activation=output_activation, name=name, **kwargs)
        if weights and name in weights:
            model.set_weights(weights[name](model))
        return model

    return build


def tf_batch(obs, action, reward, next_obs, discount, weight) -> Batch:
    """A Batch of tensors: float32, and int32 for integer (discrete) actions."""
    action = np.asarray(action)
    action = tf.constant(action, tf.int32) if np.issubdtype(action.dtype, np.integer) else tf.constant(action, tf.float32)
    f32 = lambda x: tf.constant(np.asarray(x), tf.float32)  # noqa: E731
    return Batch(f32(obs), action, f32(reward), f32(next_obs), f32(discount), f32(weight))


def weights_of(*models) -> list[list[np.ndarray]]:
    """Copies of the models' weights, now."""
    return [[np.array(w) for w in m.get_weights()] for m in models]


def numeric_gradient(f, weights, h=1e-6) -> list[np.ndarray]:
    """Central differences of the scalar f(weights) with respect to every entry of the arrays in
    `weights`, in float64."""
    weights = [np.asarray(w, np.float64) for w in weights]
    grads = []
    for i, w in enumerate(weights):
        g = np.zeros(w.shape)
        for idx in np.ndindex(w.shape):
            plus, minus = list(weights), list(weights)
            plus[i], minus[i] = w.copy(), w.copy()
            plus[i][idx] += h
            minus[i][idx] -= h
            g[idx] = (f(plus) - f(minus)) / (2 * h)
        grads.append(g)
    return grads


ADAM_FIRST_EPS = 1e-8  # agents.base.adam's epsilon, applied as PyTorch does: to sqrt(v) after its bias correction


def adam_first_step(grads, lr: float) -> list[np.ndarray]:
    """Adam's first step (any beta_1 and beta_2) for gradients `grads`: -lr * g / (|g| + eps),
    -lr * sign(g) where |g| is well above eps = 1e-8."""
    return [-lr * g / (np.abs(g) + ADAM_FIRST_EPS) for g in grads]


def flat(arrays) -> np.ndarray:
    return np.concatenate([np.asarray(a, np.float64).ravel() for a in arrays])


def assert_first_adam_step(step, g, g_wrong, lr: float, wrong: str) -> None:
    """`step` (flat) is Adam's first step on the gradient `g` (flat, by hand) where it is clear of
    Adam's epsilon and float32's error, and on at least two weights another step than `g_wrong`'s
    (the gradient of the mutation `wrong` names) would be: the check can tell them apart."""
    clear = np.abs(g) > 1e-4
    assert clear.mean() > 0.5
    assert np.sum(np.sign(g_wrong[clear]) != np.sign(g[clear])) >= 2, f"{wrong} would step alike"
    np.testing.assert_allclose(step[clear], flat(adam_first_step([g], lr))[clear], rtol=1e-3, atol=1e-6,
                               err_msg="the step: -lr * sign of the gradient")
    assert np.all(np.abs(step) <= lr * (1 + 1e-4))
