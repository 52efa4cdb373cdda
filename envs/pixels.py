"""Wrappers for image observations.

`StackFrames` makes an observation of the last k frames, concatenated on the channel axis (H, W,
k * C), the newest last: the layout the CNNs take and the replay keeps one frame of per step
(buffers/frames.py). A reset fills the stack with the first frame, as gymnasium's
FrameStackObservation does by default.
"""
from __future__ import annotations

from collections import deque

import gymnasium as gym
import numpy as np


class StackFrames(gym.ObservationWrapper):
    def __init__(self, env: gym.Env, k: int):
        super().__init__(env)
        space = env.observation_space
        if not (isinstance(space, gym.spaces.Box) and len(space.shape) in (2, 3)):
            raise ValueError(f"env.frame_stack stacks image observations (H, W) or (H, W, C), but this env's "
                             f"observation space is {space}")
        self.k = int(k)
        frame = space.shape if len(space.shape) == 3 else (*space.shape, 1)
        low = np.broadcast_to(space.low, space.shape).reshape(frame)
        high = np.broadcast_to(space.high, space.shape).reshape(frame)
        self.observation_space = gym.spaces.Box(np.concatenate([low] * self.k, -1), np.concatenate([high] * self.k, -1),
                                                dtype=space.dtype)
        self.frames: deque = deque(maxlen=self.k)
        self._frame_shape = frame

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        frame = np.asarray(obs).reshape(self._frame_shape)
        self.frames = deque([frame] * self.k, maxlen=self.k)
        return self._stacked(), info

    def observation(self, observation):
        self.frames.append(np.asarray(observation).reshape(self._frame_shape))
        return self._stacked()

    def _stacked(self) -> np.ndarray:
        return np.concatenate(list(self.frames), axis=-1)
