"""CartPole-v1 in TensorFlow, for many carts at once and step for step as gymnasium's: the same
float64 state, Euler integration, termination thresholds, reward of 1 per step (the terminating
one included), float32 observations and 500-step time limit; start states drawn as gymnasium's
reset draws them. With it a whole GA generation on CartPole is one compiled call with no Python
per step (training/evolution.py `generation_in_graph`)."""
from __future__ import annotations

import math
from typing import Callable, NamedTuple

import numpy as np
import tensorflow as tf
from gymnasium.utils import seeding

GRAVITY, MASS_CART, MASS_POLE, LENGTH, FORCE, TAU = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02
TOTAL_MASS = MASS_POLE + MASS_CART
POLE_MASS_LENGTH = MASS_POLE * LENGTH
THETA_LIMIT = 12 * 2 * math.pi / 360
X_LIMIT = 2.4
TIME_LIMIT = 500  # CartPole-v1's registered max_episode_steps
STATE_DIM = 4


def cartpole_step(state: tf.Tensor, action: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """Next states (N, 4) float64, rewards (N,) and `terminated` (N,) of carts in `state` pushed
    by `action` (N,) in {0, 1}: gymnasium's CartPoleEnv.step, written for a batch."""
    x, x_dot, theta, theta_dot = tf.unstack(state, axis=1)
    force = tf.where(action == 1, tf.constant(FORCE, tf.float64), tf.constant(-FORCE, tf.float64))
    cos, sin = tf.cos(theta), tf.sin(theta)
    temp = (force + POLE_MASS_LENGTH * tf.square(theta_dot) * sin) / TOTAL_MASS
    theta_acc = (GRAVITY * sin - cos * temp) / (LENGTH * (4.0 / 3.0 - MASS_POLE * tf.square(cos) / TOTAL_MASS))
    x_acc = temp - POLE_MASS_LENGTH * theta_acc * cos / TOTAL_MASS
    x, x_dot = x + TAU * x_dot, x_dot + TAU * x_acc
    theta, theta_dot = theta + TAU * theta_dot, theta_dot + TAU * theta_acc
    terminated = (x < -X_LIMIT) | (x > X_LIMIT) | (theta < -THETA_LIMIT) | (theta > THETA_LIMIT)
    return tf.stack([x, x_dot, theta, theta_dot], axis=1), tf.ones_like(x), terminated


def start_states(seed: int, episodes: int) -> np.ndarray:
    """The start states (episodes, 4) of an env reset with `seed` and then reset after each
    episode, as gymnasium's CartPoleEnv draws them (uniform on [-0.05, 0.05])."""
    rng, _ = seeding.np_random(seed)
    return np.stack([rng.uniform(low=-0.05, high=0.05, size=(4,)) for _ in range(episodes)])


class GraphEnv(NamedTuple):
    """An env's dynamics in TensorFlow, as `training.evolution.generation_in_graph` runs them."""

    step: Callable[[tf.Tensor, tf.Tensor], tuple[tf.Tensor, tf.Tensor, tf.Tensor]]
    state_dim: int
    time_limit: int
    start_states: Callable[[int, int], np.ndarray]


def graph_env(env_id: str, max_episode_steps: int | None, kwargs: dict | None) -> GraphEnv | None:
    """The TensorFlow dynamics of `env_id` as configured, or None where there are none (only
    CartPole-v1 with its own time limit and no env kwargs)."""
    if env_id == "CartPole-v1" and max_episode_steps in (None, TIME_LIMIT) and not kwargs:
        return GraphEnv(cartpole_step, STATE_DIM, TIME_LIMIT, start_states)
    return None
