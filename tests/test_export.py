"""Export: the SavedModel a run exports acts as the agent does, loaded without the project's code; the
ONNX model converted from it (export=onnx) acts as the SavedModel, for every agent's policy."""
import numpy as np
import pytest
from helpers import evaluate

import registry


def test_exported_savedmodel_and_onnx_model_act_like_the_agent(reference):
    import tensorflow as tf

    proc = evaluate(f"run_dir={reference}", "episodes=1", "export=onnx")
    assert proc.returncode == 0, proc.stderr[-3000:]
    policy = tf.saved_model.load(str(reference / "export" / "latest"))
    obs = np.random.default_rng(0).normal(size=(16, 3)).astype(np.float32)
    exported = policy(obs).numpy()
    served = policy.signatures["serving_default"](obs=tf.constant(obs))["action"].numpy()
    np.testing.assert_array_equal(served, exported)
    onnxruntime = pytest.importorskip("onnxruntime", reason="export=onnx needs `uv sync --extra onnx`")
    session = onnxruntime.InferenceSession(str(reference / "export" / "latest.onnx"))
    np.testing.assert_allclose(session.run(["action"], {"obs": obs})[0], exported, rtol=1e-5, atol=1e-6)
    assert "ONNX:" in proc.stdout

    import gymnasium as gym
    from omegaconf import OmegaConf

    from training.builder import build_learner, describe
    from training.checkpoints import Checkpointer, resolve_checkpoint

    cfg = OmegaConf.load(reference / ".hydra" / "config.yaml")
    OmegaConf.resolve(cfg)
    env = gym.make("Pendulum-v1")
    agent = build_learner(cfg, env.observation_space, env.action_space, np.random.default_rng(0))
    Checkpointer(str(reference), agent.trackables(), describe=describe(cfg)).restore(
        resolve_checkpoint(str(reference), "latest"), agent_only=True)
    agent.refresh()
    np.testing.assert_allclose(exported, agent.act(obs, explore=False), rtol=1e-5, atol=1e-6)
    assert np.all(np.abs(exported) <= 2.0)


def image_ppo(rng):
    from agents.ppo import PPO, PPONetworks

    return PPO((12, 12, 2), PPONetworks(convs=[[4, 3, 2]], features=8), rng, num_actions=3)


@pytest.mark.parametrize("name", [*registry.AGENTS, "ppo_images"])
def test_every_agents_policy_converts_to_an_onnx_model_that_acts_as_it(tmp_path, name):
    """Each registry agent's policy (and PPO's CNN on images), exported and converted: the ONNX
    model's actions are the agent's (export_onnx itself checks them against the SavedModel)."""
    pytest.importorskip("tf2onnx", reason="export=onnx needs `uv sync --extra onnx`")
    import onnxruntime

    from agents.export import export_onnx, export_policy

    rng = np.random.default_rng(0)
    agent = image_ppo(rng) if name == "ppo_images" else registry.AGENTS[name].build(rng)
    obs = (rng.integers(0, 256, (9, 12, 12, 2), dtype=np.uint8) if name == "ppo_images"
           else rng.normal(size=(9, registry.OBS)).astype(np.float32))
    saved = export_policy(agent, str(tmp_path / "policy"))
    out = export_onnx(saved, str(tmp_path / "policy.onnx"), obs)
    actions = onnxruntime.InferenceSession(out["path"]).run(["action"], {"obs": obs})[0]
    expected = agent.act(obs, explore=False)
    if np.issubdtype(actions.dtype, np.integer):
        np.testing.assert_array_equal(actions, expected)
    else:
        np.testing.assert_allclose(actions, expected, rtol=1e-5, atol=1e-5)


def test_an_export_format_that_does_not_exist_is_named(reference):
    proc = evaluate(f"run_dir={reference}", "episodes=1", "export=tflite")
    assert proc.returncode == 2 and "export must be true (a TF SavedModel), false, or one of" in proc.stderr, proc.stderr
