"""PPO's learner: its update compiled, what training/rollout.py drives."""
from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

from agents.compiling import compile_fn, graph_of, tracing_count
from agents.ppo.agent import PPO


class CompiledRollout:
    """A PPO agent with the update of a whole rollout compiled (traced once), acting in numpy."""

    obs_norm = None

    def __init__(self, agent: PPO, compile: str = "graph"):
        self.agent = agent
        action = (tf.TensorSpec([None], tf.int32, name="action") if agent.discrete
                  else tf.TensorSpec([None, agent.action_dim], tf.float32, name="action"))
        column = lambda name: tf.TensorSpec([None], tf.float32, name=name)  # noqa: E731
        self._update = compile_fn(agent.update, [
            tf.TensorSpec([None, *agent.obs_shape], tf.float32, name="obs"), action, column("log_prob"),
            column("advantages"), column("returns"), column("value"), tf.TensorSpec([], tf.float32, name="progress"),
        ], compile)

    def update(self, rollout: dict[str, np.ndarray], progress: float) -> dict[str, float]:
        a = self.agent
        action = rollout["action"].astype(np.int32 if a.discrete else np.float32)
        floats = (np.asarray(rollout[k], np.float32) for k in ("log_prob", "advantages", "returns", "value"))
        out = self._update(np.asarray(rollout["obs"], np.float32), action, *floats, np.float32(progress))
        a.refresh()
        return {k: float(v) for k, v in out.items()}

    def step(self, obs):
        return self.agent.step(obs)

    def values(self, obs):
        return self.agent.values(obs)

    def env_action(self, action):
        return self.agent.env_action(action)

    def act(self, obs: np.ndarray, explore: bool = False) -> np.ndarray:
        return self.agent.act(obs, explore)

    def refresh(self) -> None:
        self.agent.refresh()

    def trackables(self) -> dict[str, Any]:
        return self.agent.trackables()

    @property
    def trace_counts(self) -> int:
        return tracing_count(self._update)

    def update_graph(self):
        return graph_of(self._update)
