"""PPO's learner: its update compiled, what training/rollout.py drives."""
from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

from agents.compiling import compile_fn, graph_of, tracing_count
from agents.ppo.agent import PPO
from networks.normalization import ReturnScaler, RunningNormalizer


class CompiledRollout:
    """A PPO agent with the update of a whole rollout compiled (traced once), acting in numpy. With
    `obs_norm`, every observation acted on updates the running statistics and the policy, the value,
    evaluation and the export see it normalized (and clipped); with `reward_scaler`, the rollout's
    rewards are scaled by its running return statistics. Both are checkpointed with the weights."""

    def __init__(self, agent: PPO, compile: str = "graph", obs_norm: RunningNormalizer | None = None,
                 reward_scaler: ReturnScaler | None = None):
        self.agent, self.obs_norm, self.reward_scaler = agent, obs_norm, reward_scaler
        action = (tf.TensorSpec([None], tf.int32, name="action") if agent.discrete
                  else tf.TensorSpec([None, agent.action_dim], tf.float32, name="action"))
        column = lambda name: tf.TensorSpec([None], tf.float32, name=name)  # noqa: E731
        self._update = compile_fn(agent.update, [
            tf.TensorSpec([None, *agent.obs_shape], agent.obs_dtype, name="obs"), action, column("log_prob"),
            column("advantages"), column("returns"), column("value"), tf.TensorSpec([], tf.float32, name="progress"),
        ], compile)

    def update(self, rollout: dict[str, np.ndarray], progress: float) -> dict[str, float]:
        a = self.agent
        action = rollout["action"].astype(np.int32 if a.discrete else np.float32)
        floats = (np.asarray(rollout[k], np.float32) for k in ("log_prob", "advantages", "returns", "value"))
        out = self._update(np.asarray(rollout["obs"], a.obs_dtype), action, *floats, np.float32(progress))
        a.refresh()
        return {**{k: float(v) for k, v in out.items()}, **a.host_metrics()}

    def step(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The observations as the policy sees them (their statistics updated first), and its
        sampled actions, their log-probabilities and the values."""
        if self.obs_norm is not None:
            self.obs_norm.update(obs)
        seen = self._seen(obs)
        return (seen, *self.agent.step(seen))

    def values(self, obs: np.ndarray) -> np.ndarray:
        return self.agent.values(self._seen(obs))

    def scale_rewards(self, reward: np.ndarray, terminated: np.ndarray) -> np.ndarray:
        return reward if self.reward_scaler is None else self.reward_scaler(reward, terminated)

    def _seen(self, obs: np.ndarray) -> np.ndarray:
        return np.asarray(obs, self.agent.obs_dtype) if self.obs_norm is None else self.obs_norm(obs)

    def env_action(self, action):
        return self.agent.env_action(action)

    def act(self, obs: np.ndarray, explore: bool = False) -> np.ndarray:
        return self.agent.act(self._seen(obs), explore)

    def refresh(self) -> None:
        self.agent.refresh()

    def trackables(self) -> dict[str, Any]:
        extra = {"obs_norm": self.obs_norm, "reward_scaler": self.reward_scaler}
        return {**self.agent.trackables(), **{k: v for k, v in extra.items() if v is not None}}

    @property
    def trace_counts(self) -> int:
        return tracing_count(self._update)

    def update_graph(self):
        return graph_of(self._update)
