"""What TensorFlow, Keras and numpy's BLAS read from the process environment once, when they load.
Every entrypoint (train.py, evaluate.py, the benchmarks, the tests) calls `prepare_process()` before
anything imports them; this module imports none of them."""
from __future__ import annotations

import os


def prepare_process() -> None:
    # The agents are TensorFlow code. Keras 3 picks its backend when it loads, from KERAS_BACKEND or
    # ~/.keras/keras.json, so a shell or a home directory set up for JAX or PyTorch would break them.
    os.environ["KERAS_BACKEND"] = "tensorflow"
    # Keep TF's C++ INFO/WARNING lines off the console. (A few lines TF 2.21 prints while loading,
    # before its logging is set up, ignore this and still appear.)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    # numpy's OpenBLAS: one thread. Acting in numpy (networks/numpy_forward.py) is its only heavy user
    # here, and its pool's threads spin after each call, on the cores TF's update runs on next: a
    # Nature CNN's update in the loop took twice its time alone. TF's own pools are set apart
    # (`speed.threads`). Set OPENBLAS_NUM_THREADS in the shell to choose otherwise.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
