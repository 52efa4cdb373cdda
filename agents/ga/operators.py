"""The GA's genetic operators: pure functions of tensors and a seeded in-graph generator."""
from __future__ import annotations

import tensorflow as tf


def elite_indices(fitness: tf.Tensor, elites: int) -> tf.Tensor:
    """The `elites` fittest individuals, fittest first (ties: the lower index first)."""
    return tf.math.top_k(fitness, k=elites, sorted=True).indices


def tournament_selection(fitness: tf.Tensor, count: int, size: int, gen: tf.random.Generator) -> tf.Tensor:
    """`count` parents, each the fittest of `size` individuals drawn uniformly (with replacement)."""
    contenders = gen.uniform([count, size], 0, tf.shape(fitness)[0], dtype=tf.int32)
    winner = tf.argmax(tf.gather(fitness, contenders), axis=1, output_type=tf.int32)
    return tf.gather(contenders, winner, batch_dims=1)


def truncation_selection(fitness: tf.Tensor, count: int, keep: int, gen: tf.random.Generator) -> tf.Tensor:
    """`count` parents drawn uniformly from the `keep` fittest."""
    top = tf.math.top_k(fitness, k=keep).indices
    return tf.gather(top, gen.uniform([count], 0, keep, dtype=tf.int32))


def blx_crossover(a: tf.Tensor, b: tf.Tensor, alpha: float, u: tf.Tensor) -> tf.Tensor:
    """BLX-alpha (Eshelman & Schaffer 1993): each gene uniform on [lo - alpha d, hi + alpha d], where
    lo, hi are the parents' genes and d = hi - lo; `u` is uniform on [0, 1), shaped as the parents."""
    lo, hi = tf.minimum(a, b), tf.maximum(a, b)
    d = hi - lo
    return lo - alpha * d + u * (1.0 + 2.0 * alpha) * d


def gaussian_mutation(genes: tf.Tensor, std: float, noise: tf.Tensor) -> tf.Tensor:
    """Every gene plus `std` times standard normal `noise`."""
    return genes + std * noise
