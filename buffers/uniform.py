"""A preallocated numpy ring buffer with uniform sampling.

Every field of a transition lives in one row of a single float32 matrix, so a sample is one
`np.take` of contiguous rows (the fastest layout measured on this machine class), and the
fields are column slices of that block. Image observations (or any that are not float vectors)
are kept apart, as frames stored once (`buffers.frames`), in their own dtype.
"""
from __future__ import annotations

import numpy as np

from buffers.frames import FrameStore
from buffers.mask import HorizonMask, check_horizon
from buffers.types import Batch, Sequences, copy_rows, obs_shape_of, split_batch


class UniformReplay:
    draws_together = True  # the n batches of a fused phase may be drawn at once (no priorities between them)

    def __init__(
        self,
        capacity: int,
        obs_shape: int | tuple[int, ...],
        action_dim: int,
        gamma: float,
        rng: np.random.Generator,
        discrete_actions: bool = False,
        n_step: int = 1,
        obs_dtype=np.float32,
        frame_stack: int = 1,
        mask_horizon: int = 0,
    ):
        if capacity < 1:
            raise ValueError(f"buffer.capacity must be at least 1, got {capacity}")
        if not isinstance(n_step, int) or n_step < 1:
            raise ValueError(f"buffer.n_step must be an integer >= 1, got {n_step!r}")
        if not 0.0 <= gamma <= 1.0:
            raise ValueError(f"gamma must lie in [0, 1], got {gamma}")
        self.capacity = int(capacity)
        self.obs_shape = obs_shape_of(obs_shape)
        vectors = len(self.obs_shape) == 1 and frame_stack == 1 and np.issubdtype(obs_dtype, np.floating)
        self.frames = None if vectors else FrameStore(self.capacity, self.obs_shape, obs_dtype, frame_stack)
        self.obs_dim = self.obs_shape[0] if vectors else 0  # obs columns in the float matrix
        self.check_envs(1)
        self._ended = np.zeros(0, bool)  # per env: whether its last added transition ended an episode
        self.action_dim = int(action_dim)
        self.gamma = float(gamma)
        self.discrete_actions = discrete_actions
        self.n_step = n_step
        self._rng = rng
        self._stride = 0  # transitions added per call (= num_envs); an env's next transition is this many rows on
        # Column layout of one row: obs | action | reward | next_obs | terminated | truncated
        o, a = self.obs_dim, self.action_dim
        self._cols = {
            "obs": slice(0, o),
            "action": slice(o, o + a),
            "reward": o + a,
            "next_obs": slice(o + a + 1, 2 * o + a + 1),
            "terminated": 2 * o + a + 1,
            "truncated": 2 * o + a + 2,
        }
        self._data = np.zeros((self.capacity, 2 * o + a + 3), dtype=np.float32)
        self._cursor = 0
        self._full = False
        # kept only once asked for (`keep_reward_stats`: MR.Q's), as each add pays for them
        self._abs_reward_sum: float | None = None  # of the stored rows, kept as rows come and go
        self._terminated = False  # whether any transition added so far terminated
        self.mask = HorizonMask(self.capacity, mask_horizon) if check_horizon(mask_horizon) else None  # MR.Q's author's
        self._opened = np.zeros(0, np.int64)  # the rows the last add opened (`mask`)

    def __len__(self) -> int:
        return self.capacity if self._full else self._cursor

    @property
    def row_bytes(self) -> int:
        """Bytes a stored transition takes: its row of the float matrix, and its frame with the
        two integers that place it (the first observations of episodes come on top, a stack each)."""
        frames = 0 if self.frames is None else self.frames.row_bytes
        return self._data.shape[1] * self._data.itemsize + frames

    def check_envs(self, num_envs: int) -> None:
        """Refuse a ring too small for stored frames added `num_envs` rows at a time: once full, its
        `window` oldest rows cannot be rebuilt, and with none left to sample every draw would fail."""
        if self.frames is not None and self.capacity <= self.frames.window(num_envs):
            window, k = self.frames.window(num_envs), self.frames.stack
            raise ValueError(f"buffer.capacity={self.capacity} is too small for frames stored once: with stacks of "
                             f"{k} frame{'s' if k > 1 else ''} from num_envs={num_envs}, the oldest {window} "
                             f"rows of a full ring cannot be rebuilt; use a capacity above {window}")

    def add(self, obs, action, reward, next_obs, terminated, truncated) -> None:
        """Add a batch of transitions, one row per environment (leading axis = num_envs)."""
        n = np.asarray(reward).reshape(-1).shape[0]
        if not self._stride:
            self.check_envs(n)
        if self._stride and n != self._stride and (self.n_step > 1 or self.frames is not None):
            need = "n-step replay" if self.n_step > 1 else "replay of stored frames"
            raise ValueError(f"{need} needs the same number of envs in every add ({self._stride}), got {n}")
        self._stride = n
        idx = (self._cursor + np.arange(n)) % self.capacity
        c, d = self._cols, self._data
        if self.frames is not None:
            starts = self._ended if len(self._ended) == n else np.ones(n, bool)
            self.frames.add(idx, obs, next_obs, starts)
            self._ended = np.asarray(terminated, bool).reshape(n) | np.asarray(truncated, bool).reshape(n)
        else:
            d[idx, c["obs"]] = np.asarray(obs, dtype=np.float32).reshape(n, self.obs_dim)
            d[idx, c["next_obs"]] = np.asarray(next_obs, dtype=np.float32).reshape(n, self.obs_dim)
        d[idx, c["action"]] = np.asarray(action, dtype=np.float32).reshape(n, self.action_dim)
        reward = np.asarray(reward, dtype=np.float32).reshape(n)
        if self._abs_reward_sum is not None:
            # rows not yet written hold zeros: taking the old rewards off is right before the ring is full too
            self._abs_reward_sum += float(np.abs(reward).sum(dtype=np.float64) - np.abs(d[idx, c["reward"]]).sum(dtype=np.float64))
            self._terminated = self._terminated or bool(np.any(terminated))
        d[idx, c["reward"]] = reward
        d[idx, c["terminated"]] = np.asarray(terminated, dtype=np.float32).reshape(n)
        d[idx, c["truncated"]] = np.asarray(truncated, dtype=np.float32).reshape(n)
        self._full = self._full or self._cursor + n >= self.capacity
        self._cursor = int((self._cursor + n) % self.capacity)
        if self.mask is not None:
            self._opened = self.mask.add(idx, np.asarray(terminated, bool).reshape(n),
                                         np.asarray(truncated, bool).reshape(n))

    def keep_reward_stats(self) -> None:
        """Keep, from now on, what `mean_abs_reward` and `any_terminated` report (from the rows stored so far)."""
        if self._abs_reward_sum is None:
            rows = self._data[: len(self)]
            self._abs_reward_sum = float(np.abs(rows[:, self._cols["reward"]]).sum(dtype=np.float64))
            self._terminated = bool(np.any(rows[:, self._cols["terminated"]] > 0))

    def mean_abs_reward(self, eps: float = 1e-8) -> float:
        """The mean absolute reward of the stored transitions, at least `eps` (MR.Q's reward scale)."""
        self.keep_reward_stats()
        return max(self._abs_reward_sum / max(len(self), 1), eps)

    def any_terminated(self) -> bool:
        """Whether any stored transition (or any added since `keep_reward_stats`) terminated (MR.Q learns
        to predict terminations once one has)."""
        self.keep_reward_stats()
        return self._terminated

    def cut_episodes(self) -> None:
        """Mark the newest row of each env as truncated, so that n-step returns never run from an
        episode cut off by a reset (e.g. on resume with envs that could not be saved) into the
        next one; a truncated row bootstraps from its own next_obs, the real next observation."""
        if len(self) and self._stride:
            rows = (self._cursor - 1 - np.arange(self._stride)) % self.capacity
            self._data[rows, self._cols["truncated"]] = 1.0
        if self.mask is not None:
            self.mask.cut()
        if self.frames is not None:
            self._ended = np.ones(max(self._stride, 1), bool)

    def sample(self, batch_size: int) -> Batch:
        return self._batch(self._draw(batch_size), np.ones(batch_size, dtype=np.float32))

    def _draw(self, n: int) -> np.ndarray:
        """n rows drawn uniformly among those that may be sampled (with the mask: those it hides
        drawn again, so uniformly among the open ones)."""
        idx = self._draw_rows(n)
        if self.mask is None:  # every agent's sampling but MR.Q's: nothing more on this path
            return idx
        for _ in range(1000):
            hidden = ~self.mask.open[idx]
            if not hidden.any():
                return idx
            idx[hidden] = self._draw_rows(int(hidden.sum()))
        raise self.mask.none_open(len(self))

    def _draw_rows(self, n: int) -> np.ndarray:
        if len(self) == 0:
            raise ValueError("cannot sample from an empty replay buffer")
        skip = self.unsampled()
        idx = self._rng.integers(0, len(self) - skip, size=n)
        if skip:
            idx = (idx + self._cursor + skip) % self.capacity
        return idx

    def sample_sequences(self, batch_size: int, horizon: int) -> Sequences:
        """Runs of `horizon` steps from starts drawn as `sample` draws rows; a start whose run is not
        whole (`whole_runs`) is drawn again, so the starts follow the sampling distribution
        restricted to whole runs (MR.Q's masked sampling)."""
        idx = self._draw(batch_size)
        for _ in range(1000):
            redraw = ~self.whole_runs(idx, horizon)
            if not redraw.any():
                return self._sequences(idx, horizon)
            idx[redraw] = self._draw(int(redraw.sum()))
        raise ValueError(f"the replay buffer holds too few whole runs of {horizon} steps to sample from "
                         f"({len(self)} transitions); start learning later (learning_starts) or use a shorter horizon")

    def whole_runs(self, idx: np.ndarray, horizon: int) -> np.ndarray:
        """Whether the `horizon` steps of the env's stream from each row are all stored and none but
        the last was cut by a time limit, up to the first termination (after which a run needs
        nothing: the update masks it)."""
        stride, c, d = max(self._stride, 1), self._cols, self._data
        age = (self._cursor - 1 - idx) % self.capacity if self._full else (len(self) - 1 - idx)
        available = age // stride  # later transitions of the same env that are stored
        whole = np.ones(len(idx), bool)
        alive = np.ones(len(idx), bool)
        for k in range(horizon):
            row = (idx + k * stride) % self.capacity
            cut = (d[row, c["truncated"]] > 0) & (k < horizon - 1)
            whole &= ~alive | ((k <= available) & ~cut)
            alive &= d[row, c["terminated"]] == 0
        return whole

    def _sequences(self, idx: np.ndarray, horizon: int) -> Sequences:
        c, b = self._cols, len(idx)
        rows = ((idx[:, None] + np.arange(horizon) * max(self._stride, 1)) % self.capacity).reshape(-1)
        data = np.take(self._data, rows, axis=0)
        action = data[:, c["action"]]
        action = action[:, 0].astype(np.int32) if self.discrete_actions else action
        next_obs = self._next_obs(rows, data)
        return Sequences(
            obs=self._obs(idx, data[::horizon]),
            action=action.reshape(b, horizon, *action.shape[1:]),
            reward=data[:, c["reward"]].reshape(b, horizon),
            next_obs=next_obs.reshape(b, horizon, *next_obs.shape[1:]),
            terminated=data[:, c["terminated"]].reshape(b, horizon),
        )

    def unsampled(self) -> int:
        """How many rows from the cursor on are never sampled: those of a full ring of frames
        whose observations reach into overwritten rows (`buffers.frames`)."""
        return self.frames.window(self._stride) if self.frames is not None and self._full else 0

    def sample_batches(self, batch_size: int, n: int) -> Batch:
        """n batches of batch_size stacked on a leading axis: one draw of n*batch_size indices, as
        independent and uniform as n draws of batch_size."""
        return split_batch(self.sample(n * batch_size), n)

    def update_priorities(self, td_error) -> None:
        """Uniform replay has no priorities."""

    def _batch(self, idx: np.ndarray, weight: np.ndarray) -> Batch:
        c = self._cols
        rows = np.take(self._data, idx, axis=0)
        action = rows[:, c["action"]]
        action = action[:, 0].astype(np.int32) if self.discrete_actions else np.ascontiguousarray(action)
        if self.n_step == 1:
            reward = np.ascontiguousarray(rows[:, c["reward"]])
            next_obs = self._next_obs(idx, rows)
            discount = (self.gamma * (1.0 - rows[:, c["terminated"]])).astype(np.float32)
        else:
            reward, next_obs, discount = self._n_step_return(idx)
        return Batch(
            obs=self._obs(idx, rows),
            action=action,
            reward=reward,
            next_obs=next_obs,
            discount=discount,
            weight=weight,
        )

    def _n_step_return(self, idx: np.ndarray):
        """n-step targets for the transitions at `idx`, vectorized over the batch:
        reward = sum_k gamma^k r_{t+k}, bootstrapping from the last next_obs with gamma^m, where the
        window stops early (m < n) at the end of an episode (terminated: discount 0; truncated:
        bootstrap from the final observation) or at the newest stored transition of that env."""
        c, d, stride = self._cols, self._data, max(self._stride, 1)
        size = len(self)
        # steps available after each sampled row before reaching the write cursor (same env stream)
        age = (self._cursor - 1 - idx) % self.capacity if self._full else (size - 1 - idx)
        available = age // stride  # how many later transitions of the same env are stored
        reward = np.zeros(idx.shape[0], dtype=np.float64)
        scale = np.ones(idx.shape[0], dtype=np.float64)
        alive = np.ones(idx.shape[0], dtype=bool)
        last = idx.copy()
        terminated = np.zeros(idx.shape[0], dtype=bool)
        for k in range(self.n_step):
            row = (idx + k * stride) % self.capacity
            use = alive & (k <= available)
            reward += np.where(use, scale * d[row, c["reward"]], 0.0)
            last = np.where(use, row, last)
            scale = np.where(use, scale * self.gamma, scale)
            ended = (d[row, c["terminated"]] > 0) | (d[row, c["truncated"]] > 0)
            terminated |= use & (d[row, c["terminated"]] > 0)
            alive &= use & ~ended
        discount = np.where(terminated, 0.0, scale)
        return reward.astype(np.float32), self._next_obs(last), discount.astype(np.float32)

    def _obs(self, idx: np.ndarray, rows: np.ndarray) -> np.ndarray:
        if self.frames is not None:
            return self.frames.obs(idx, max(self._stride, 1))
        return np.ascontiguousarray(rows[:, self._cols["obs"]])

    def _next_obs(self, idx: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
        if self.frames is not None:
            return self.frames.next_obs(idx, max(self._stride, 1))
        rows = self._data[idx] if rows is None else rows
        return np.ascontiguousarray(rows[:, self._cols["next_obs"]])

    def field(self, name: str) -> np.ndarray:
        """The stored column(s) of one field over the filled rows, in storage order (for tests and
        tools); stored frames rebuilt into observations, zeros in the rows `unsampled` names."""
        if self.frames is not None and name in ("obs", "next_obs"):
            rows = np.arange(len(self))
            out = self._obs(rows, None) if name == "obs" else self._next_obs(rows)
            out[(rows - self._cursor) % self.capacity < self.unsampled()] = 0
            return out
        return self._data[: len(self), self._cols[name]]

    def state_dict(self) -> dict[str, np.ndarray]:
        """The buffer's contents and cursor. `data` is a view (no copy of a possibly multi-GB
        array): save it before the next `add`."""
        state = {
            "data": self._data[: len(self)],
            "cursor": np.asarray(self._cursor, dtype=np.int64),
            "full": np.asarray(self._full),
            "capacity": np.asarray(self.capacity, dtype=np.int64),
            "stride": np.asarray(self._stride, dtype=np.int64),
        }
        if self._abs_reward_sum is not None:
            state.update(abs_reward_sum=np.asarray(self._abs_reward_sum, dtype=np.float64),
                         terminated=np.asarray(self._terminated))
        if self.mask is not None:
            state.update(self.mask.state_dict(len(self)))
        if self.frames is not None:
            state.update(self.frames.state_dict(len(self)), ended=self._ended)
        return state

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        if int(state["capacity"]) != self.capacity or state["data"].shape[1] != self._data.shape[1]:
            raise ValueError(
                f"replay buffer state has capacity {int(state['capacity'])} and row width "
                f"{state['data'].shape[1]}, but this buffer has capacity {self.capacity} and row "
                f"width {self._data.shape[1]}; build the buffer with the saved run's config"
            )
        if (self.frames is not None) != ("frames" in state):
            raise ValueError("replay buffer state and this buffer differ in how they keep observations (as frames "
                             "or as vectors); build the buffer with the saved run's config")
        copy_rows(self._data, state["data"])
        self._cursor = int(state["cursor"])
        self._full = bool(state["full"])
        self._stride = int(state.get("stride", 0))
        if "abs_reward_sum" in state:  # the sums a run that kept them had: its own rounding, for an exact resume
            self._abs_reward_sum, self._terminated = float(state["abs_reward_sum"]), bool(state["terminated"])
        elif self._abs_reward_sum is not None:  # computed from the rows
            self._abs_reward_sum = None
            self.keep_reward_stats()
        if (self.mask is not None) != ("sampleable" in state):
            raise ValueError("replay buffer state and this buffer differ in the sampling mask (buffer.mask_horizon is 0 "
                             "on one side only); build the buffer with the saved run's config")
        if self.mask is not None:
            self.mask.load_state_dict(state)
        if self.frames is not None:
            self.frames.load_state_dict(state)
            self._ended = np.array(state["ended"], bool)
