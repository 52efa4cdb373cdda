"""Random shifts of image observations (DrQ: Kostrikov, Yarats & Fergus 2021; DrQ-v2), applied to
each batch inside the compiled update, so replay keeps the frames as they were seen."""
from __future__ import annotations

import tensorflow as tf


def edge_pad(images: tf.Tensor, pad: int) -> tf.Tensor:
    """(B, H, W, C) -> (B, H + 2 pad, W + 2 pad, C), each border pixel repeated outwards (PyTorch's
    'replicate' padding, which DrQ uses)."""
    for axis in (1, 2):
        first = tf.gather(images, [0], axis=axis)
        last = tf.gather(images, [tf.shape(images)[axis] - 1], axis=axis)
        images = tf.concat([tf.repeat(first, pad, axis=axis), images, tf.repeat(last, pad, axis=axis)], axis=axis)
    return images


def random_shift(images: tf.Tensor, offsets: tf.Tensor, pad: int) -> tf.Tensor:
    """Each image of the batch edge-padded by `pad` and cropped back to its size at its own
    `offsets` (B, 2) (row, column) in [0, 2 pad]: its content moves by pad - offset pixels down and
    right, the border repeated into the space it leaves."""
    height, width = tf.shape(images)[1], tf.shape(images)[2]
    padded = edge_pad(images, pad)
    rows = offsets[:, :1] + tf.range(height)[None]  # (B, H)
    cols = offsets[:, 1:] + tf.range(width)[None]
    return tf.gather(tf.gather(padded, rows, axis=1, batch_dims=1), cols, axis=2, batch_dims=1)


class RandomShift:
    """Shifts batches of images by up to `pad` pixels each way, the offsets drawn from its own
    generator (a checkpointed variable, so a resumed run draws the same ones)."""

    def __init__(self, pad: int, seed: int):
        self.pad = int(pad)
        self.rng = tf.random.Generator.from_seed(seed)

    def __call__(self, images: tf.Tensor) -> tf.Tensor:
        offsets = self.rng.uniform([tf.shape(images)[0], 2], 0, 2 * self.pad + 1, dtype=tf.int32)
        return random_shift(images, offsets, self.pad)
