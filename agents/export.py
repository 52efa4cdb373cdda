"""A trained agent's deterministic policy as a TensorFlow SavedModel."""
from __future__ import annotations

import tensorflow as tf

from agents.base import Agent
from networks.normalization import RunningNormalizer


class PolicyModule(tf.Module):
    """`module(obs)` maps a batch of float32 observations to the agent's evaluation actions, here
    and after `tf.saved_model.save`/`load` (the function stays traced for any batch size).
    `signatures()` gives `serving_default` (input `obs`, output `action`), which TF Serving,
    `saved_model_cli` and other languages' loaders call. It tracks the acting network, the only
    one `agent.policy` reads. With `obs_norm`, observations are normalized first, under its
    statistics at export. An agent that evaluates with another network than it explores with
    (TD7's checkpoint policy) exports that one (`Needs.evaluation`)."""

    def __init__(self, agent: Agent, obs_norm: RunningNormalizer | None = None):
        super().__init__(name="policy")
        self.network = (agent.needs.evaluation or agent.acting).network
        if obs_norm is None:
            self._policy = agent.policy
        else:
            normalize = obs_norm.graph_fn()
            self._policy = lambda obs: agent.policy(normalize(obs))
        self._obs_spec = tf.TensorSpec([None, *agent.obs_shape], agent.acting.obs_dtype, name="obs")
        self.__call__.get_concrete_function(self._obs_spec)

    @tf.function(reduce_retracing=True)
    def __call__(self, obs):
        return self._policy(obs)

    def signatures(self) -> dict:
        serve = tf.function(lambda obs: {"action": self._policy(obs)}, input_signature=[self._obs_spec])
        return {"serving_default": serve.get_concrete_function()}


def export_policy(agent: Agent, directory: str, obs_norm: RunningNormalizer | None = None) -> str:
    module = PolicyModule(agent, obs_norm)
    tf.saved_model.save(module, directory, signatures=module.signatures())
    return directory
