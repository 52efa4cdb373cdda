"""The GA's learner: its two graph calls compiled, what training/evolution.py drives."""
from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

from agents.compiling import compile_fn, tracing_count
from networks.normalization import RunningNormalizer


class CompiledPopulation:
    """A population agent (agents/ga/agent.py) with its two graph calls compiled, each traced once:
    `population_act` (all individuals' actions in one call per env step) and `evolve` (one
    generation's operators). Evaluation acts with the agent's best individual in numpy. With
    `obs_norm`, every individual and the best one see normalized observations, the statistics
    updated from every observation of training (`observe`)."""

    def __init__(self, agent, compile: str = "graph", numpy_acting: bool = True,
                 obs_norm: RunningNormalizer | None = None):
        self.agent = agent
        self.obs_norm = obs_norm
        agent.acting.use_numpy(numpy_acting)
        obs = tf.TensorSpec([agent.population, *agent.obs_shape], tf.float32, name="obs")
        self._act = compile_fn(agent.population_act, [obs], compile)
        self._evolve = compile_fn(agent.evolve, [tf.TensorSpec([agent.population], tf.float32, name="fitness")], compile)

    def population_act(self, obs: np.ndarray) -> np.ndarray:
        obs = np.asarray(obs if self.obs_norm is None else self.obs_norm(obs), np.float32)
        return self._act(obs).numpy()

    def evolve(self, fitness: np.ndarray) -> None:
        self._evolve(np.asarray(fitness, np.float32))
        self.agent.acting.refresh()

    def act(self, obs: np.ndarray, explore: bool = False) -> np.ndarray:
        return self.agent.act(obs if self.obs_norm is None else self.obs_norm(obs), explore)

    def observe(self, obs: np.ndarray) -> None:
        if self.obs_norm is not None:
            self.obs_norm.update(obs)

    def refresh(self) -> None:
        self.agent.acting.refresh()

    def trackables(self) -> dict[str, Any]:
        return {**self.agent.trackables(), **({"obs_norm": self.obs_norm} if self.obs_norm is not None else {})}

    @property
    def trace_counts(self) -> tuple[int, int]:
        """How many times `population_act` and `evolve` have been traced (0 in eager mode)."""
        return tracing_count(self._act), tracing_count(self._evolve)

    def update_graph(self):
        return None
