"""Proportional prioritized replay (Schaul et al. 2016) on a vectorized numpy sum tree.

Transition i is sampled with probability p_i^alpha / sum_k p_k^alpha, p_i = |TD error_i| + eps;
new transitions get the largest priority seen so far, so each is replayed at least once soon.
The loss of each sample is scaled by its importance-sampling weight (N * P(i))^-beta, divided by
the batch's largest weight; beta anneals linearly from `beta` to 1 over `beta_steps` transitions
stored (env steps, as OpenAI baselines' schedule), so `beta_steps=total_steps` reaches 1 at the end
of the run whatever the update cadence. A batch is stratified over the whole priority mass (Schaul
et al.), or with `stratified=false` drawn i.i.d. by priority (LAP's and MR.Q's authors); the n
batches of a fused phase (`sample_batches`) are n such batches, drawn from the same priorities; the
loop draws one batch per update (`draws_together` is False), so each sees the priorities of the last.

LAP (Fujimoto, Meger & Precup 2020, "An Equivalence between Loss Functions and Non-Uniform Sampling
in Experience Replay"; TD7's replay) is this buffer with three settings (conf/buffer/lap.yaml):
`min_priority` 1, so a priority is max(|TD error|, 1)**alpha, without importance weights
(`importance_weights=false`; the agent's Huber loss stands in for them), and the largest priority,
which new transitions get, reset to the largest stored every `max_reset_every` updates.

DR.Q's faded replay (Lyu et al. 2026; its buffer.py) is `fade` < 1: a row is drawn in proportion to
its priority times max(fade**age, fade_floor), its age the rows added since it was, so the newest
rows are drawn up to 1 / fade_floor times as often as equally prioritized old ones (DR.Q: 0.9999,
0.1, the floor reached after 23,025 rows). The stored priorities are unchanged; the faded mass is
the tree's times the floor plus the extra of the young rows above it, drawn from exactly.
"""
from __future__ import annotations

import math

import numpy as np

from buffers.sum_tree import SumTree
from buffers.types import Batch, split_batch
from buffers.uniform import UniformReplay


def priority(td_error: np.ndarray, eps: float, min_priority: float = 0.0) -> np.ndarray:
    """A transition's priority before the power alpha: |TD error| + eps (Schaul et al.), or with
    LAP's floor, max(|TD error|, min_priority)."""
    if min_priority > 0:
        return np.maximum(np.abs(td_error), min_priority)
    return np.abs(td_error) + eps


class PrioritizedReplay(UniformReplay):
    draws_together = False  # the loop samples each update's batch after the last update's priorities

    def __init__(
        self,
        capacity: int,
        obs_shape: int | tuple[int, ...],
        action_dim: int,
        gamma: float,
        rng: np.random.Generator,
        discrete_actions: bool = False,
        n_step: int = 1,
        alpha: float = 0.6,
        beta: float = 0.4,
        beta_steps: int = 100_000,
        eps: float = 1e-6,
        min_priority: float = 0.0,
        importance_weights: bool = True,
        max_reset_every: int = 0,
        obs_dtype=np.float32,
        frame_stack: int = 1,
        stratified: bool = True,
        mask_horizon: int = 0,
        fade: float = 1.0,
        fade_floor: float = 0.1,
    ):
        if alpha < 0:
            raise ValueError(f"buffer.alpha must be >= 0 (0 = uniform), got {alpha}")
        if not 0.0 <= beta <= 1.0:
            raise ValueError(f"buffer.beta must lie in [0, 1], got {beta}")
        if eps <= 0:
            raise ValueError(f"buffer.eps must be > 0, got {eps}")
        if isinstance(min_priority, bool) or not isinstance(min_priority, (int, float)) or min_priority < 0:
            raise ValueError(f"buffer.min_priority must be a number >= 0 (LAP: 1; 0: none), got {min_priority!r}")
        if not isinstance(importance_weights, bool):
            raise ValueError(f"buffer.importance_weights must be true or false, got {importance_weights!r}")
        if isinstance(max_reset_every, bool) or not isinstance(max_reset_every, int) or max_reset_every < 0:
            raise ValueError(f"buffer.max_reset_every must be an integer >= 0 (updates between resets of the largest "
                             f"priority; 0: never), got {max_reset_every!r}")
        if not isinstance(stratified, bool):
            raise ValueError(f"buffer.stratified must be true or false, got {stratified!r}")
        for key, value, usual in (("fade", fade, "1: none; DR.Q: 0.9999 per row added"),
                                  ("fade_floor", fade_floor, "DR.Q: 0.1")):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
                raise ValueError(f"buffer.{key} must be a number in (0, 1] ({usual}), got {value!r}")
        super().__init__(capacity, obs_shape, action_dim, gamma, rng, discrete_actions, n_step, obs_dtype, frame_stack,
                         mask_horizon)
        self.stratified = stratified
        self.alpha, self.beta0, self.beta_steps, self.eps = float(alpha), float(beta), int(beta_steps), float(eps)
        self.min_priority, self.importance_weights = float(min_priority), importance_weights
        self.max_reset_every = max_reset_every
        self._updates_seen = 0  # batches whose priorities came back: the clock of max_reset_every
        self._last_n = 0
        self._tree = SumTree(self.capacity)
        # with the mask, each row's priority**alpha, which its leaf holds once the mask opens it (0 till then)
        self._priority = np.zeros(self.capacity) if self.mask is not None else None
        self._max_priority = 1.0
        self._stored = 0  # transitions ever added: the clock of beta's annealing
        self.fade, self.fade_floor = float(fade), float(fade_floor)
        young = math.ceil(math.log(fade_floor) / math.log(fade)) if fade < 1 and fade_floor < 1 else 0
        # the weight above the floor of a row of each age younger than the floor's
        self._young_extra = np.maximum(self.fade ** np.arange(young) - self.fade_floor, 0.0)
        self.last_indices: np.ndarray | None = None

    @property
    def beta(self) -> float:
        if self.beta_steps <= 0:
            return 1.0
        return self.beta0 + min(self._stored / self.beta_steps, 1.0) * (1.0 - self.beta0)

    def add(self, obs, action, reward, next_obs, terminated, truncated) -> None:
        n = np.asarray(reward).reshape(-1).shape[0]
        idx = (self._cursor + np.arange(n)) % self.capacity
        if self._priority is None:
            super().add(obs, action, reward, next_obs, terminated, truncated)
            self._tree.set(idx, np.full(n, self._max_priority**self.alpha))
        else:
            self._priority[idx] = self._max_priority**self.alpha
            super().add(obs, action, reward, next_obs, terminated, truncated)
            rows = np.concatenate([idx, self._opened])
            self._tree.set(rows, self._priority[rows] * self.mask.open[rows])
        self._stored += n
        self._exclude_unsampled()

    def _exclude_unsampled(self) -> None:
        """Priority 0 for the rows `unsampled` names (a full ring of frames): never drawn."""
        skip = self.unsampled()
        if skip:
            self._tree.set((self._cursor + np.arange(skip)) % self.capacity, np.zeros(skip))

    def sample(self, batch_size: int) -> Batch:
        return self._sample(batch_size, 1)

    def sample_batches(self, batch_size: int, n: int) -> Batch:
        return split_batch(self._sample(batch_size, n), n)

    def _sample(self, batch_size: int, n: int) -> Batch:
        """n batches, each stratified over the whole priority mass (one draw from each of
        batch_size equal slices) and weighted by its own largest weight; the same random numbers,
        indices and weights as n calls of sample() when no priority changes between them."""
        if len(self) == 0:
            raise ValueError("cannot sample from an empty replay buffer")
        mass = self._mass()
        total = mass[0]
        if self.stratified:
            values = (np.arange(batch_size) + self._rng.random((n, batch_size))) * (total / batch_size)
        else:
            values = self._rng.random((n, batch_size)) * total
        idx = self._rows_at(values.reshape(-1), mass)
        probs = self._tree.get(idx) * self._fade_of(idx) / total
        if self.importance_weights:
            weights = ((len(self) * probs) ** (-self.beta)).reshape(n, batch_size)
            weights = (weights / weights.max(axis=1, keepdims=True)).astype(np.float32)
        else:
            weights = np.ones((n, batch_size), np.float32)
        self.last_indices, self._last_n = idx, n
        return self._batch(idx, weights.reshape(-1))

    def _draw(self, n: int) -> np.ndarray:
        """n rows drawn independently by priority (for `sample_sequences`, whose batches leave the
        priorities as they are: MR.Q updates them from its value batches only)."""
        if len(self) == 0:
            raise ValueError("cannot sample from an empty replay buffer")
        mass = self._mass()
        return self._rows_at(self._rng.random(n) * mass[0], mass)

    def _mass(self) -> tuple[float, np.ndarray | None, np.ndarray | None]:
        """What rows are drawn from: the total mass (the tree's; faded, its floor's share of it plus
        the young rows' extra), the young rows (newest first) and their extra's cumulative sum."""
        if not len(self._young_extra):
            return self._tree.total, None, None
        m = min(len(self._young_extra), len(self))
        rows = (self._cursor - 1 - np.arange(m)) % self.capacity
        extra = np.cumsum(self._tree.get(rows) * self._young_extra[:m])
        return self.fade_floor * self._tree.total + float(extra[-1]), rows, extra

    def _fade_of(self, idx: np.ndarray) -> np.ndarray | float:
        """Each row's fade weight, max(fade**age, fade_floor) (1 without fading)."""
        if not len(self._young_extra):
            return 1.0
        age = (self._cursor - 1 - idx) % self.capacity
        young = age < len(self._young_extra)
        return self.fade_floor + np.where(young, self._young_extra[np.minimum(age, len(self._young_extra) - 1)], 0.0)

    def _find(self, values: np.ndarray, mass) -> np.ndarray:
        """The rows at these points of the mass `_mass` gave: below the floor's share, the tree's
        rows at the point over the floor; above it, the young row whose extra holds the point."""
        total, rows, extra = mass
        if rows is None:
            return self._tree.find(values)
        floor_mass = self.fade_floor * self._tree.total
        idx = np.empty(len(values), np.int64)
        old = values < floor_mass
        idx[old] = self._tree.find(values[old] / self.fade_floor)
        at = np.searchsorted(extra, values[~old] - floor_mass, side="right")
        idx[~old] = rows[np.minimum(at, len(rows) - 1)]
        return idx

    def _rows_at(self, values: np.ndarray, mass) -> np.ndarray:
        """The rows at these points of the cumulative (faded) priority mass."""
        idx = np.minimum(self._find(values, mass), len(self) - 1)
        skip = self.unsampled()
        if skip:  # round-off may land on a leaf of priority 0: the first row that may be sampled instead
            idx = np.where((idx - self._cursor) % self.capacity < skip, (self._cursor + skip) % self.capacity, idx)
        if self.mask is None:
            return idx
        for _ in range(1000):  # the same for the rows the mask hides: drawn again
            hidden = ~self.mask.open[idx]
            if not hidden.any():
                return idx
            idx[hidden] = np.minimum(self._find(self._rng.random(int(hidden.sum())) * mass[0], mass), len(self) - 1)
        raise self.mask.none_open(len(self))

    def update_priorities(self, td_error) -> None:
        if self.last_indices is None:
            raise RuntimeError("update_priorities called before sample")
        p = priority(np.asarray(td_error, dtype=np.float64).reshape(-1), self.eps, self.min_priority)
        if p.shape[0] != self.last_indices.shape[0]:
            raise ValueError(f"got {p.shape[0]} TD errors for a batch of {self.last_indices.shape[0]}")
        self._tree.set(self.last_indices, p**self.alpha)
        if self._priority is not None:
            self._priority[self.last_indices] = p**self.alpha
        self._exclude_unsampled()
        self._max_priority = max(self._max_priority, float(p.max()))
        before, self._updates_seen = self._updates_seen, self._updates_seen + self._last_n
        if self.max_reset_every and before // self.max_reset_every != self._updates_seen // self.max_reset_every:
            self.reset_max_priority()

    def reset_max_priority(self) -> None:
        """The largest priority, which new transitions get, back to the largest stored (LAP in TD7,
        at each target update)."""
        if self.alpha > 0 and len(self):
            self._max_priority = float(self._tree.get(np.arange(len(self))).max()) ** (1.0 / self.alpha)

    def state_dict(self) -> dict[str, np.ndarray]:
        state = super().state_dict()
        state["priorities"] = self._tree.state_dict()["leaves"]
        if self._priority is not None:
            state["hidden_priorities"] = self._priority[: len(self)].copy()
        state["max_priority"] = np.asarray(self._max_priority)
        state["stored"] = np.asarray(self._stored, dtype=np.int64)
        state["updates_seen"] = np.asarray(self._updates_seen, dtype=np.int64)
        return state

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        super().load_state_dict(state)
        self._tree.load_state_dict({"leaves": state["priorities"]})
        if self._priority is not None:
            self._priority[:] = 0.0
            self._priority[: len(state["hidden_priorities"])] = state["hidden_priorities"]
        self._max_priority = float(state["max_priority"])
        # a state saved before the clock counted stored transitions: what the buffer holds
        self._stored = int(state["stored"]) if "stored" in state else len(self)
        self._updates_seen = int(state["updates_seen"]) if "updates_seen" in state else 0
