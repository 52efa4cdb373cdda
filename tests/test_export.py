"""Export: the SavedModel a run exports acts as the agent does, loaded without the project's code."""
import numpy as np
from helpers import evaluate


def test_exported_savedmodel_acts_like_the_agent(reference):
    import tensorflow as tf

    proc = evaluate(f"run_dir={reference}", "episodes=1", "export=true")
    assert proc.returncode == 0, proc.stderr[-3000:]
    policy = tf.saved_model.load(str(reference / "export" / "latest"))
    obs = np.random.default_rng(0).normal(size=(16, 3)).astype(np.float32)
    exported = policy(obs).numpy()
    served = policy.signatures["serving_default"](obs=tf.constant(obs))["action"].numpy()
    np.testing.assert_array_equal(served, exported)

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
