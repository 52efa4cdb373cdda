"""A trained agent's deterministic policy as a TensorFlow SavedModel, and from it as an ONNX model."""
from __future__ import annotations

import numpy as np
import tensorflow as tf

from agents.base import Agent
from networks.normalization import RunningNormalizer

FORMATS = ("savedmodel", "onnx")
ONNX_OPSET = 17  # onnxruntime 1.16 and later run it; the ops a policy uses are all in it


class ExportError(Exception):
    """An export that cannot be written as asked; the message names the cause and the fix."""


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


def export_onnx(saved_model: str, path: str, observations: np.ndarray) -> dict:
    """The SavedModel's `serving_default` (`export_policy`) as an ONNX model at `path`, input `obs`
    and output `action` as there, its variables frozen into constants (tf2onnx), and checked with
    onnxruntime: on `observations` it must give the SavedModel's actions (discrete ones equal,
    continuous ones within 1e-5). Returns {"path", "largest_difference"}."""
    try:
        import onnx
        import onnxruntime
        import tf2onnx
    except ImportError as err:
        raise ExportError(f"export=onnx needs tf2onnx and onnxruntime, an opt-in extra this environment lacks "
                          f"({err.name} is missing): run `uv sync --extra onnx` (keep your other extras, e.g. "
                          f"`uv sync --extra onnx --extra ray`), then export again. The SavedModel at {saved_model} "
                          f"is written.") from err
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    loaded = tf.saved_model.load(saved_model)  # held: its signature reads the variables it owns
    serve = loaded.signatures["serving_default"]
    frozen = convert_variables_to_constants_v2(serve)
    try:
        model, _ = tf2onnx.convert.from_graph_def(
            frozen.graph.as_graph_def(), input_names=[t.name for t in frozen.inputs],
            output_names=[t.name for t in frozen.outputs], opset=ONNX_OPSET)
    except Exception as err:  # the converter's own errors name the op it cannot express
        raise ExportError(f"tf2onnx {tf2onnx.__version__} cannot convert this policy to ONNX (opset {ONNX_OPSET}): "
                          f"{str(err).strip() or type(err).__name__}. The SavedModel at {saved_model} is written and "
                          f"is the policy to use; export=savedmodel writes only that.") from err
    rename(model.graph, {frozen.inputs[0].name: "obs", frozen.outputs[0].name: "action"})
    onnx.save(model, path)
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    ours = session.run(["action"], {"obs": observations})[0]
    theirs = serve(obs=tf.constant(observations))["action"].numpy()
    discrete = np.issubdtype(theirs.dtype, np.integer)
    difference = float(np.max(np.abs(ours.astype(np.float64) - theirs))) if ours.size else 0.0
    if ours.shape != theirs.shape or (difference > 0 if discrete else not np.allclose(ours, theirs, rtol=1e-5, atol=1e-5)):
        raise ExportError(f"the ONNX policy at {path} does not act as the SavedModel it was converted from: on "
                          f"{len(observations)} observations its actions differ by up to {difference:.3g} (shapes "
                          f"{ours.shape} and {theirs.shape}). Use the SavedModel at {saved_model}; report the agent "
                          f"and network to the project, with tf2onnx {tf2onnx.__version__}.")
    return {"path": path, "largest_difference": difference}


def rename(graph, names: dict[str, str]) -> None:
    """Rename an ONNX graph's values (its inputs, outputs and every node's references to them)."""
    for value in [*graph.input, *graph.output]:
        value.name = names.get(value.name, value.name)
    for node in graph.node:
        node.input[:] = [names.get(n, n) for n in node.input]
        node.output[:] = [names.get(n, n) for n in node.output]
