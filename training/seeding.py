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


def configure_threads(inter_op: int | None = None, intra_op: int | None = None) -> None:
    """Size TensorFlow's thread pools (None: TF's default, about one thread per core). They are
    fixed once TF has run an op, so a size that differs from the one in place then is an error
    that says so (a process runs one config; tests that build several runs use one setting)."""
    import tensorflow as tf

    from training.config import ConfigError

    for name, want, get, set_ in [
        ("inter_op", inter_op, tf.config.threading.get_inter_op_parallelism_threads,
         tf.config.threading.set_inter_op_parallelism_threads),
        ("intra_op", intra_op, tf.config.threading.get_intra_op_parallelism_threads,
         tf.config.threading.set_intra_op_parallelism_threads),
    ]:
        if want is None or get() == want:
            continue
        try:
            set_(want)
        except RuntimeError as err:
            raise ConfigError(
                f"tf_threads.{name}={want} cannot be applied: TensorFlow is already running with "
                f"{get() or 'its default'} threads in this process ({err}). Set it in a fresh process "
                f"(train.py does), or leave tf_threads.{name}=null."
            ) from err


def configure_devices() -> list[str]:
    """Let each process grow GPU memory as it needs it (so several jobs can share a GPU), before
    TensorFlow touches a device. Returns the names of the GPUs found."""
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    for gpu in gpus:
        try:
            tf.config.experimental.set_memory_growth(gpu, True)
        except RuntimeError:  # already initialized: memory growth can no longer be changed
            pass
    return [g.name for g in gpus]
