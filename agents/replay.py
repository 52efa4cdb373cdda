"""What one update takes from replay, declared by the agent (`Needs.replay`) and used by the
compiled update (its input signature, what happens to observations around the maths) and by the loop
(what it draws). Most agents take one `Batch` of transitions (`Transitions`); an agent may declare
inputs of its own as subclasses (MR.Q's in agents/mrq/replay.py) and a `Block` of updates of one of
its parts that the loop runs between updates.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import tensorflow as tf

from buffers.types import Batch, Buffer


def batch_signature(obs_shape: tuple[int, ...], action: tf.TensorSpec, obs_dtype=tf.float32) -> Batch:
    """One batch's: observations as the acting network takes them (float32 vectors, uint8 images)."""
    return Batch(
        obs=tf.TensorSpec([None, *obs_shape], obs_dtype, name="obs"),
        action=action,
        reward=tf.TensorSpec([None], tf.float32, name="reward"),
        next_obs=tf.TensorSpec([None, *obs_shape], obs_dtype, name="next_obs"),
        discount=tf.TensorSpec([None], tf.float32, name="discount"),
        weight=tf.TensorSpec([None], tf.float32, name="weight"),
    )


def stacked(signature):
    """The signature of K updates' inputs stacked on a new leading axis (K unknown: traced once for any K)."""
    return tf.nest.map_structure(lambda s: tf.TensorSpec([None, *s.shape], s.dtype, name=f"{s.name}s"), signature)


def count(batches) -> Any:
    """K, the number of updates' inputs stacked in `batches` (an int, or a tensor in a graph)."""
    first = batches
    while isinstance(first, tuple):  # NamedTuples, nested
        first = first[0]
    return first.shape[0] if isinstance(first, np.ndarray) else tf.shape(first)[0]


def flatten(batches) -> list:
    """The arrays of (nested) NamedTuples in tf.nest.flatten's order, walked directly (cheaper)."""
    if isinstance(batches, tuple):
        return [x for part in batches for x in flatten(part)]
    return [batches]


def index(batches, i):
    """The i-th update's inputs of K stacked ones (NamedTuples of arrays, nested: a direct walk
    costs a tenth of tf.nest's, which counts on a loop that updates every env step)."""
    if isinstance(batches, tuple):
        return type(batches)(*(index(x, i) for x in batches))
    return batches[i]


class Transitions:
    """One Batch of transitions per update (buffer.sample)."""

    mask_horizon = 0  # `buffer.mask_horizon=auto`: no mask

    def signature(self, obs_shape: tuple[int, ...], action: tf.TensorSpec, obs_dtype) -> Batch:
        return batch_signature(obs_shape, action, obs_dtype)

    def draw(self, buffer: Buffer, batch_size: int, k: int) -> Batch:
        return buffer.sample_batches(batch_size, k)

    def map_obs(self, batch: Batch, fn: Callable) -> Batch:
        """`fn` applied to every observation of one update's inputs (normalization, random shifts)."""
        return batch._replace(obs=fn(batch.obs), next_obs=fn(batch.next_obs))

    def check(self, buffer: Buffer) -> None:
        """Refuse a buffer that cannot give these inputs (ValueError)."""


BLOCK_BYTES = 64 << 20  # the observations of a block's draws handed over in one call, at most


@dataclass(frozen=True)
class Block:
    """Updates of one part of an agent that run `size` times in a row before every `every`-th
    update (the first included), each on its own draw of `replay`, from the buffer as it is then:
    MR.Q's encoder in its author's schedule (`target_update_every` updates at each target copy).
    The loop runs them (`Learner.run_block`), as many draws per call as BLOCK_BYTES allows."""

    every: int
    size: int
    replay: Transitions  # with draw_bytes(batch_size, obs_bytes): what one draw's observations take

    def chunks(self, batch_size: int, obs_bytes: int) -> list[int]:
        """How many of the block's draws each call takes."""
        per_call = max(1, min(self.size, BLOCK_BYTES // max(1, self.replay.draw_bytes(batch_size, obs_bytes))))
        return [min(per_call, self.size - start) for start in range(0, self.size, per_call)]

