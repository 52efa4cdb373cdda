"""The dtype of the networks' matmuls and convolutions while an update is traced (`update_precision`).

`bfloat16` casts the input and the kernel of every dense matmul and every convolution to bfloat16,
computes them there (oneDNN's bfloat16 kernels on an x86 CPU with AVX512-BF16 or AMX, tensor cores
on a GPU) and casts the result back to float32. Everything else stays float32: the weights, biases,
activations, losses, gradients as they reach the optimizer, and Adam. The setting holds only while the update
is traced (`matmul_precision(...)` around it), so acting, evaluation and export run the same
weights in float32.
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator

import tensorflow as tf

PRECISIONS = {"float32": tf.float32, "bfloat16": tf.bfloat16}
_stack: list[tf.DType] = []


def check_precision(name: str) -> str:
    if name not in PRECISIONS:
        raise ValueError(
            f"update_precision must be one of {', '.join(PRECISIONS)}, got {name!r}; set "
            f"update_precision=float32 (the default) or bfloat16 (the update's matmuls and convolutions in bfloat16)."
        )
    return name


@contextlib.contextmanager
def matmul_precision(name: str) -> Iterator[None]:
    """Dense matmuls built inside this context run in `name`'s dtype."""
    _stack.append(PRECISIONS[check_precision(name)])
    try:
        yield
    finally:
        _stack.pop()


def matmul_dtype(dtype: tf.DType) -> tf.DType | None:
    """The dtype that matmuls on inputs of `dtype` run in here, or None where that is `dtype` itself."""
    return _stack[-1] if _stack and _stack[-1] != dtype else None


def matmul(x: tf.Tensor, kernel: tf.Tensor, dtype: tf.DType) -> tf.Tensor:
    """`x @ kernel` computed in `dtype`, returned in `x`'s dtype."""
    return in_dtype(tf.matmul, x, kernel, dtype)


def in_dtype(op, x: tf.Tensor, kernel: tf.Tensor, dtype: tf.DType) -> tf.Tensor:
    """`op(x, kernel)` (a matmul or a convolution) computed in `dtype`, returned in `x`'s dtype."""
    return tf.cast(op(tf.cast(x, dtype), tf.cast(kernel, dtype)), x.dtype)
