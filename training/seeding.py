"""One seed reaches everything: Python's `random`, numpy, TensorFlow/Keras and the envs."""
from __future__ import annotations

import random

import numpy as np


def seed_everything(seed: int, deterministic: bool = False) -> np.random.Generator:
    """Seed the global generators and return the run's numpy Generator, which is passed on to
    whatever needs randomness (buffer sampling, exploration noise) instead of a global state.
    With `deterministic`, TensorFlow ops also run deterministically (same results run to run)."""
    import keras
    import tensorflow as tf

    random.seed(seed)
    np.random.seed(seed)
    keras.utils.set_random_seed(seed)  # seeds Python, numpy and TensorFlow's global seed
    if deterministic:
        tf.config.experimental.enable_op_determinism()
    return np.random.default_rng(seed)
