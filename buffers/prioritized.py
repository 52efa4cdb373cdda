"""Proportional prioritized replay (Schaul et al. 2016) on a vectorized numpy sum tree.

Transition i is sampled with probability p_i^alpha / sum_k p_k^alpha, p_i = |TD error_i| + eps;
new transitions get the largest priority seen so far, so each is replayed at least once soon.
The loss of each sample is scaled by its importance-sampling weight (N * P(i))^-beta, divided by
the batch's largest weight; beta anneals linearly from `beta` to 1 over `beta_steps` transitions
stored (env steps, as OpenAI baselines' schedule), so `beta_steps=total_steps` reaches 1 at the end
of the run whatever the update cadence. A batch is stratified over the whole priority mass; the n
batches of a fused phase (`sample_batches`) are n such batches, drawn from the same priorities.
"""
from __future__ import annotations

import numpy as np

from buffers.sum_tree import SumTree
from buffers.types import Batch, split_batch
from buffers.uniform import UniformReplay


class PrioritizedReplay(UniformReplay):
    def __init__(
        self,
        capacity: int,
        obs_dim: int,
        action_dim: int,
        gamma: float,
        rng: np.random.Generator,
        discrete_actions: bool = False,
        n_step: int = 1,
        alpha: float = 0.6,
        beta: float = 0.4,
        beta_steps: int = 100_000,
        eps: float = 1e-6,
    ):
        if alpha < 0:
            raise ValueError(f"buffer.alpha must be >= 0 (0 = uniform), got {alpha}")
        if not 0.0 <= beta <= 1.0:
            raise ValueError(f"buffer.beta must lie in [0, 1], got {beta}")
        if eps <= 0:
            raise ValueError(f"buffer.eps must be > 0, got {eps}")
        super().__init__(capacity, obs_dim, action_dim, gamma, rng, discrete_actions, n_step)
        self.alpha, self.beta0, self.beta_steps, self.eps = float(alpha), float(beta), int(beta_steps), float(eps)
        self._tree = SumTree(self.capacity)
        self._max_priority = 1.0
        self._stored = 0  # transitions ever added: the clock of beta's annealing
        self.last_indices: np.ndarray | None = None

    @property
    def beta(self) -> float:
        if self.beta_steps <= 0:
            return 1.0
        return self.beta0 + min(self._stored / self.beta_steps, 1.0) * (1.0 - self.beta0)

    def add(self, obs, action, reward, next_obs, terminated, truncated) -> None:
        n = np.asarray(reward).reshape(-1).shape[0]
        idx = (self._cursor + np.arange(n)) % self.capacity
        super().add(obs, action, reward, next_obs, terminated, truncated)
        self._tree.set(idx, np.full(n, self._max_priority**self.alpha))
        self._stored += n

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
        total = self._tree.total
        values = (np.arange(batch_size) + self._rng.random((n, batch_size))) * (total / batch_size)
        idx = np.minimum(self._tree.find(values.reshape(-1)), len(self) - 1)
        probs = self._tree.get(idx) / total
        weights = ((len(self) * probs) ** (-self.beta)).reshape(n, batch_size)
        weights = (weights / weights.max(axis=1, keepdims=True)).astype(np.float32)
        self.last_indices = idx
        return self._batch(idx, weights.reshape(-1))

    def update_priorities(self, td_error) -> None:
        if self.last_indices is None:
            raise RuntimeError("update_priorities called before sample")
        p = np.abs(np.asarray(td_error, dtype=np.float64)).reshape(-1) + self.eps
        if p.shape[0] != self.last_indices.shape[0]:
            raise ValueError(f"got {p.shape[0]} TD errors for a batch of {self.last_indices.shape[0]}")
        self._tree.set(self.last_indices, p**self.alpha)
        self._max_priority = max(self._max_priority, float(p.max()))

    def state_dict(self) -> dict[str, np.ndarray]:
        state = super().state_dict()
        state["priorities"] = self._tree.state_dict()["leaves"]
        state["max_priority"] = np.asarray(self._max_priority)
        state["stored"] = np.asarray(self._stored, dtype=np.int64)
        return state

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        super().load_state_dict(state)
        self._tree.load_state_dict({"leaves": state["priorities"]})
        self._max_priority = float(state["max_priority"])
        # a state saved before the clock counted stored transitions: what the buffer holds
        self._stored = int(state["stored"]) if "stored" in state else len(self)
