"""The batch that crosses from the numpy side into the compiled update."""
from __future__ import annotations

import mmap
from typing import NamedTuple, Protocol

import numpy as np


class Batch(NamedTuple):
    """A sampled minibatch. A NamedTuple, so `tf.function` traces it as a nested structure.

    `discount` already folds in termination and the horizon of the return:
    `gamma**n * (1 - terminated)`. Truncation (a time limit) is not termination, so a truncated
    transition keeps its full discount and the target still bootstraps from `next_obs`.
    """

    obs: np.ndarray  # (B, obs_dim) float32, or (B, H, W, C) uint8 images
    action: np.ndarray  # (B, action_dim) float32, or (B,) int32 for discrete actions
    reward: np.ndarray  # (B,) float32
    next_obs: np.ndarray  # as obs
    discount: np.ndarray  # (B,) float32
    weight: np.ndarray  # (B,) float32 importance-sampling weights (ones for uniform replay)


class Sequences(NamedTuple):
    """H consecutive transitions of one env from each of B sampled starts (MR.Q's encoder batches):
    the first observation, then each step's action, reward, next observation and termination.
    Steps after a sample's first termination belong to another episode (or are not yet written):
    their values are finite but meaningless, for the update to mask."""

    obs: np.ndarray  # (B, *obs_shape)
    action: np.ndarray  # (B, H, action_dim) float32, or (B, H) int32 for discrete actions
    reward: np.ndarray  # (B, H) float32
    next_obs: np.ndarray  # (B, H, *obs_shape)
    terminated: np.ndarray  # (B, H) float32


class Buffer(Protocol):
    draws_together: bool  # whether the batches of a phase may be drawn at once, or one per update (priorities)

    def add(self, obs, action, reward, next_obs, terminated, truncated) -> None: ...
    def sample(self, batch_size: int) -> Batch: ...
    def sample_batches(self, batch_size: int, n: int) -> Batch:
        """n batches of batch_size drawn together, stacked on a leading axis (for fused updates),
        each drawn as `sample` draws one."""
    def sample_sequences(self, batch_size: int, horizon: int) -> Sequences:
        """batch_size runs of `horizon` steps (see Sequences), each starting at a row drawn as `sample`
        draws, among those whose run is whole: stored, and not cut by a time limit before its last
        step (a termination ends what a run needs)."""
    def update_priorities(self, td_error) -> None:
        """New priorities for the last sampled batch(es) from the update's TD errors (no-op if uniform)."""
    def check_envs(self, num_envs: int) -> None:
        """Raise ValueError if this buffer cannot take adds of `num_envs` transitions at a time."""
    def cut_episodes(self) -> None:
        """Mark the newest transition of every env as the end of its episode (truncated): the envs
        were reset between two adds, so the next add starts new episodes."""
    def __len__(self) -> int: ...
    def state_dict(self) -> dict[str, np.ndarray]: ...
    def load_state_dict(self, state: dict[str, np.ndarray]) -> None: ...


def obs_shape_of(obs_shape) -> tuple[int, ...]:
    """One observation's shape, given as a size (vectors) or a shape: what agents and buffers take."""
    return (int(obs_shape),) if np.ndim(obs_shape) == 0 else tuple(int(d) for d in obs_shape)


def split_batch(batch: Batch, k: int) -> Batch:
    """One batch of k*B transitions as k batches of B stacked on a leading axis (a reshape, no copy
    when the arrays allow it)."""
    return Batch(*(x.reshape(k, x.shape[0] // k, *x.shape[1:]) for x in batch))


def copy_rows(dst: np.ndarray, src: np.ndarray, chunk_bytes: int = 1 << 24) -> None:
    """dst[:len(src)] = src, some rows at a time. When `src` maps a file (a restored checkpoint's
    buffer.npz), the pages copied so far are dropped from this process after each chunk, so that a
    restore holds the buffer once in memory, not once more as mapped file pages."""
    rows = max(1, chunk_bytes // max(1, src[:1].nbytes))
    mapped = getattr(src, "_mmap", None)  # np.memmap's map
    if not hasattr(mapped, "madvise"):  # not a map, or a system without madvise (Windows)
        mapped = None
    for start in range(0, len(src), rows):
        stop = min(start + rows, len(src))
        dst[start:stop] = src[start:stop]
        if mapped is not None:
            mapped.madvise(mmap.MADV_DONTNEED)  # read-only file pages: they fault back in if read again
