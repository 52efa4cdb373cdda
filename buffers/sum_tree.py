"""A vectorized numpy sum tree for proportional prioritized replay (Schaul et al. 2016).

Leaves hold priorities; each internal node holds the sum of its children, so the total is at the
root and a prefix-sum search finds the leaf for a value in O(log n). Updates and searches take
whole arrays of indices and values at once: the tree is walked level by level, never leaf by leaf.
"""
from __future__ import annotations

import numpy as np


class SumTree:
    def __init__(self, capacity: int):
        if capacity < 1:
            raise ValueError(f"sum tree capacity must be at least 1, got {capacity}")
        self.capacity = int(capacity)
        self._leaf0 = 1 << int(np.ceil(np.log2(self.capacity))) if self.capacity > 1 else 1
        self._depth = int(np.log2(self._leaf0))
        self._nodes = np.zeros(2 * self._leaf0, dtype=np.float64)  # node 1 is the root

    @property
    def total(self) -> float:
        return float(self._nodes[1])

    def get(self, indices: np.ndarray) -> np.ndarray:
        return self._nodes[self._leaf0 + np.asarray(indices)]

    def set(self, indices: np.ndarray, priorities: np.ndarray) -> None:
        """Set leaf priorities; duplicate indices keep the last value."""
        idx = np.asarray(indices, dtype=np.int64).ravel()
        pri = np.asarray(priorities, dtype=np.float64).ravel()
        if np.any(pri < 0) or not np.all(np.isfinite(pri)):
            raise ValueError("priorities must be finite and non-negative")
        nodes = self._leaf0 + idx
        self._nodes[nodes] = pri
        nodes = np.unique(nodes // 2)
        while nodes[0] >= 1:
            self._nodes[nodes] = self._nodes[2 * nodes] + self._nodes[2 * nodes + 1]
            if nodes[0] == 1:
                break
            nodes = np.unique(nodes // 2)

    def find(self, values: np.ndarray) -> np.ndarray:
        """Leaf index for each value in [0, total): the first leaf whose prefix sum exceeds it."""
        values = np.asarray(values, dtype=np.float64).copy()
        nodes = np.ones(values.shape, dtype=np.int64)
        for _ in range(self._depth):
            left = 2 * nodes
            left_sum = self._nodes[left]
            go_right = values >= left_sum
            values = np.where(go_right, values - left_sum, values)
            nodes = np.where(go_right, left + 1, left)
        leaves = nodes - self._leaf0
        # float round-off can land on an empty leaf past the filled ones: step back onto a filled one
        return np.minimum(leaves, self.capacity - 1)

    def state_dict(self) -> dict[str, np.ndarray]:
        return {"leaves": self._nodes[self._leaf0 : self._leaf0 + self.capacity].copy()}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        leaves = state["leaves"]
        if leaves.shape[0] != self.capacity:
            raise ValueError(f"sum tree state has capacity {leaves.shape[0]}, this tree {self.capacity}")
        self.set(np.arange(self.capacity), leaves)
