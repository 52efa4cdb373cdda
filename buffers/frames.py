"""Image observations stored as frames, each frame once; stacks rebuilt at sample time.

An image observation is `stack` frames concatenated on the channel axis (H, W, stack * C), the
newest last, as the env wrappers here stack them (envs/pixels.py); a MinAtar observation is one
frame (stack 1). Consecutive observations of an episode share all but one frame, so storing both
`obs` and `next_obs` of every transition keeps each frame 2 * stack times (8x for Atari's stacks of
4). Here row i keeps one frame: the newest of `next_obs_i`. The first observation of each episode
is kept whole in a slot of its own (its older frames are the env's padding, whatever that is), and
every other observation is read back from the rows before it in the same env's stream (the Dopamine
way, with the episode's first stack stored instead of assumed).

A frame that an overwritten row held is gone, so once the ring is full the `window` oldest rows of
each pass (stack * stride of them, `stride` being the envs per add) have observations that cannot
be rebuilt: the buffers never sample them.
"""
from __future__ import annotations

import numpy as np

from buffers.types import copy_rows

class FrameStore:
    """The observations of a ring of `capacity` transitions, added `stride` rows at a time."""

    def __init__(self, capacity: int, obs_shape: tuple[int, ...], dtype, stack: int = 1):
        if not isinstance(stack, int) or isinstance(stack, bool) or stack < 1:
            raise ValueError(f"env.frame_stack must be an integer >= 1 (4 for Atari), got {stack!r}")
        obs_shape = tuple(int(d) for d in obs_shape)
        if stack > 1 and (len(obs_shape) != 3 or obs_shape[-1] % stack):
            raise ValueError(f"observations of shape {obs_shape} are not {stack} stacked frames (H, W, {stack} * C)")
        self.capacity, self.stack, self.obs_shape = int(capacity), stack, obs_shape
        self.frame_shape = obs_shape[:-1] + (obs_shape[-1] // stack,) if stack > 1 else obs_shape
        self.dtype = np.dtype(dtype)
        self.frames = np.zeros((self.capacity, *self.frame_shape), self.dtype)  # newest frame of next_obs
        self.step = np.zeros(self.capacity, np.int64)  # steps since its episode's first observation
        self.slot = np.zeros(self.capacity, np.int64)  # where that first observation is kept
        self.firsts = np.zeros((0, stack, *self.frame_shape), self.dtype)  # episodes' first observations
        self.first_row = np.zeros(0, np.int64)  # the row each first observation is for (-1: free)
        self._env_step = np.zeros(0, np.int64)  # per env: its newest row's step and slot
        self._env_slot = np.zeros(0, np.int64)

    @property
    def row_bytes(self) -> int:
        return self.frames[:1].nbytes + self.step.itemsize + self.slot.itemsize

    def window(self, stride: int) -> int:
        """Rows after the cursor of a full ring whose observations reach into overwritten rows."""
        return self.stack * max(stride, 1)

    def add(self, rows: np.ndarray, obs: np.ndarray, next_obs: np.ndarray, starts: np.ndarray) -> None:
        """The frames of one add's transitions (one per env, in env order) into `rows`; `starts`
        marks the envs whose `obs` begins an episode."""
        obs = np.asarray(obs).reshape(len(rows), *self.obs_shape)
        next_obs = np.asarray(next_obs).reshape(len(rows), *self.obs_shape)
        if len(self._env_step) != len(rows):
            self._env_step, self._env_slot = np.zeros(len(rows), np.int64), np.zeros(len(rows), np.int64)
            starts = np.ones(len(rows), bool)
        self._free(rows[self.step[rows] == 0])  # rows overwritten at an episode's start give up its slot
        self._env_step = np.where(starts, 0, self._env_step + 1)
        for env in np.flatnonzero(starts):
            self._env_slot[env] = self._keep_first(rows[env], self._frames_of(obs[env]))
        self.step[rows], self.slot[rows] = self._env_step, self._env_slot
        self.frames[rows] = self._frames_of(next_obs)[:, -1]

    def obs(self, rows: np.ndarray, stride: int) -> np.ndarray:
        return self._rebuild(rows, self.step[rows], stride)

    def next_obs(self, rows: np.ndarray, stride: int) -> np.ndarray:
        return self._rebuild(rows, self.step[rows] + 1, stride)

    def _rebuild(self, rows: np.ndarray, newest: np.ndarray, stride: int) -> np.ndarray:
        """The observation whose newest frame is the `newest`-th of each row's episode: its k-th
        frame from the end is that of position newest - k, which row start + (position - 1) *
        stride holds for positions >= 1, and the kept first observation for the rest."""
        k, c = self.stack, self.frame_shape[-1]
        position = newest[:, None] - (k - 1) + np.arange(k)  # (B, k), oldest first
        start = rows - self.step[rows] * stride
        source = (start[:, None] + (position - 1) * stride) % self.capacity
        first, slots = position < 1, self.slot[rows]
        out = None if k == 1 else np.empty((len(rows), *self.obs_shape), self.dtype)
        for j in range(k):  # frame by frame into its channels: 4x faster than stacking, then transposing
            frame = self.frames[source[:, j]]
            if first[:, j].any():
                frame[first[:, j]] = self.firsts[slots[first[:, j]], k - 1 + position[first[:, j], j]]
            if out is None:
                return frame
            out[..., j * c:(j + 1) * c] = frame
        return out

    def _frames_of(self, obs: np.ndarray) -> np.ndarray:
        """(..., H, W, k*C) -> (..., k, H, W, C); one frame is its own stack of 1."""
        if self.stack == 1:
            return np.expand_dims(obs, obs.ndim - len(self.obs_shape))
        *lead, h, w, kc = obs.shape
        return np.moveaxis(obs.reshape(*lead, h, w, self.stack, kc // self.stack), -2, -4)

    def _keep_first(self, row: int, frames: np.ndarray) -> int:
        free = np.flatnonzero(self.first_row < 0)
        if len(free) == 0:  # grow by half: slots are few (one per episode in the ring)
            grow = max(8, len(self.first_row) // 2)
            self.firsts = np.concatenate([self.firsts, np.zeros((grow, *self.firsts.shape[1:]), self.dtype)])
            self.first_row = np.concatenate([self.first_row, np.full(grow, -1, np.int64)])
            free = np.flatnonzero(self.first_row < 0)
        slot = int(free[0])
        self.firsts[slot], self.first_row[slot] = frames, row
        return slot

    def _free(self, rows: np.ndarray) -> None:
        for row in rows:
            slot = self.slot[row]
            if slot < len(self.first_row) and self.first_row[slot] == row:
                self.first_row[slot] = -1

    def state_dict(self, size: int) -> dict[str, np.ndarray]:
        # every slot, freed ones too: rows of the unsampled band may still point at a freed slot
        # (sequence reads wrap into that band), and a restored buffer must read what this one does
        return {"frames": self.frames[:size], "frame_step": self.step[:size], "frame_slot": self.slot[:size],
                "firsts": self.firsts, "first_row": self.first_row,
                "env_step": self._env_step, "env_slot": self._env_slot}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        if tuple(state["frames"].shape[1:]) != self.frame_shape or state["frames"].dtype != self.dtype:
            raise ValueError(f"replay buffer state holds frames of shape {tuple(state['frames'].shape[1:])} "
                             f"({state['frames'].dtype}), but this buffer stores {self.frame_shape} ({self.dtype}); "
                             f"build the buffer with the saved run's config")
        size = len(state["frames"])
        copy_rows(self.frames, state["frames"])
        self.step[:size], self.slot[:size] = state["frame_step"], state["frame_slot"]
        self.firsts, self.first_row = np.array(state["firsts"]), np.array(state["first_row"], np.int64)
        self._env_step, self._env_slot = np.array(state["env_step"], np.int64), np.array(state["env_slot"], np.int64)
        # checkpoints before every slot was saved kept only those in use: rows pointing past them
        # (the unsampled band) get free slots to point at
        slots = max(int(self.slot[:size].max(initial=-1)), int(self._env_slot.max(initial=-1))) + 1
        if len(self.first_row) < slots:
            more = slots - len(self.first_row)
            self.firsts = np.concatenate([self.firsts, np.zeros((more, *self.firsts.shape[1:]), self.dtype)])
            self.first_row = np.concatenate([self.first_row, np.full(more, -1, np.int64)])
