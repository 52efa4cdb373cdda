"""network=simba: SimBa's residual network by hand, its running observation statistics against
numpy over a stream and restored exactly, and the normalization reaching acting, the update's
batches, evaluation and the exported policy."""
import functools
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from agents.export import PolicyModule
from agents.sac import SAC
from buffers.types import Batch
from helpers import compiled, one, run_loop
from networks.normalization import EPSILON, INITIAL_COUNT, RunningNormalizer
from networks.numpy_forward import forward_fn
from networks.simba import LAYER_NORM_EPSILON, simba

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def hand_layer_norm(x, gamma, beta):
    mean = x.mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(((x - mean) ** 2).mean(-1, keepdims=True) + 1e-6) * gamma + beta


def test_one_block_network_by_hand():
    """embed -> x + W_down relu(W_up LN(x)) -> LN -> out, with weights set by hand."""
    net = simba(3, 2, width=2, blocks=1, name="critic")
    rng = np.random.default_rng(0)
    weights = [rng.normal(size=w.shape).astype(np.float32) for w in net.weights]
    net.set_weights(weights)
    (w0, b0, g1, be1, w1, b1, w2, b2, g2, be2, w3, b3) = weights
    x = rng.normal(size=(4, 3)).astype(np.float32)
    embed = x @ w0 + b0
    y = embed + np.maximum(hand_layer_norm(embed, g1, be1) @ w1 + b1, 0) @ w2 + b2
    expected = hand_layer_norm(y, g2, be2) @ w3 + b3
    np.testing.assert_allclose(net(x).numpy(), expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(forward_fn(net)(weights, x), expected, rtol=1e-5, atol=1e-5)  # acting in numpy


def test_actor_and_critics_take_their_own_width_and_depth():
    critic = simba(10, 1, width=16, blocks=3, actor_width=8, actor_blocks=1, name="critic1_target")
    actor = simba(7, 4, width=16, blocks=3, actor_width=8, actor_blocks=1, name="actor")
    def shapes(net, kind):
        return [tuple(layer.kernel.shape) for layer in net.layers if kind in layer.name and hasattr(layer, "kernel")]
    assert shapes(critic, "_up") == [(16, 64)] * 3 and shapes(critic, "_down") == [(64, 16)] * 3
    assert shapes(actor, "_up") == [(8, 32)] and shapes(actor, "_embed") == [(7, 8)] and shapes(actor, "_out") == [(8, 4)]
    norms = [layer for layer in critic.layers if isinstance(layer, tf.keras.layers.LayerNormalization)]
    assert len(norms) == 4 and {n.epsilon for n in norms} == {LAYER_NORM_EPSILON}  # 3 blocks + the final one


@pytest.mark.parametrize("kwargs,message", [
    (dict(blocks=0), "network.blocks must be an integer >= 1"),
    (dict(width=0), "network.width must be a positive integer"),
    (dict(actor_width=-1), "network.actor_width must be a positive integer"),
    (dict(actor_blocks=1.5), "network.actor_blocks must be an integer >= 1"),
])
def test_bad_sizes_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        simba(4, 1, **kwargs, name="actor" if "actor" in next(iter(kwargs)) else "critic")


def test_running_statistics_equal_numpy_over_a_stream():
    """Chunks of any size give the moments of all the data so far, with SimBa's prior (mean 0,
    variance 1, weight 1e-4) merged in: mean = sum(x) / (n + c), var = (c + sum(x^2)) / (n + c) - mean^2."""
    rng = np.random.default_rng(1)
    norm, seen = RunningNormalizer(3), []
    for size in (1, 7, 1, 50, 3, 200):
        chunk = rng.normal([5.0, -2.0, 0.1], [3.0, 0.5, 10.0], size=(size, 3))
        norm.update(chunk)
        seen.append(chunk)
        data, c = np.concatenate(seen), INITIAL_COUNT
        n = len(data)
        mean = data.sum(0) / (n + c)
        np.testing.assert_allclose(norm.mean, mean, rtol=1e-10)
        np.testing.assert_allclose(norm.var, (c + (data ** 2).sum(0)) / (n + c) - mean ** 2, rtol=1e-9)
        assert norm.count == pytest.approx(n + c, rel=1e-12)
    obs = rng.normal(size=(5, 3)).astype(np.float32)
    np.testing.assert_array_equal(norm(obs), ((obs - norm.mean) / np.sqrt(norm.var + EPSILON)).astype(np.float32))


def test_statistics_are_restored_exactly_and_refused_for_another_shape(tmp_path):
    norm = RunningNormalizer(4)
    norm.update(np.random.default_rng(2).normal(size=(33, 4)) * 7)
    path = tf.train.Checkpoint(obs_norm=norm).write(str(tmp_path / "ckpt"))
    restored = RunningNormalizer(4)
    tf.train.Checkpoint(obs_norm=restored).read(path).assert_consumed()
    np.testing.assert_array_equal(restored.mean, norm.mean)
    np.testing.assert_array_equal(restored.var, norm.var)
    assert restored.count == norm.count
    with pytest.raises(ValueError, match="observation statistics have shape"):
        tf.train.Checkpoint(obs_norm=RunningNormalizer(5)).read(path)


def make_learner(seed=0):
    net = functools.partial(simba, width=8, blocks=1, actor_width=8, actor_blocks=1)
    agent = SAC(3, np.array([-2.0], np.float32), np.array([2.0], np.float32), net, np.random.default_rng(seed))
    return compiled(agent, obs_norm=RunningNormalizer(3))


def test_acting_updates_and_export_all_see_the_normalized_observations():
    learner = make_learner()
    rng = np.random.default_rng(3)
    learner.observe(rng.normal(10.0, 5.0, size=(100, 3)))
    norm, agent = learner.obs_norm, learner.agent
    obs = rng.normal(10.0, 5.0, size=(4, 3)).astype(np.float32)
    np.testing.assert_array_equal(learner.act(obs, explore=False), agent.act(norm(obs), explore=False))
    assert not np.allclose(agent.act(obs, explore=False), agent.act(norm(obs), explore=False))  # it matters here

    batch = Batch(obs=obs, action=rng.uniform(-2, 2, (4, 1)).astype(np.float32), reward=np.ones(4, np.float32),
                  next_obs=obs[::-1].copy(), discount=np.full(4, 0.99, np.float32), weight=np.ones(4, np.float32))
    prepared = learner.prepare(one(batch))
    np.testing.assert_array_equal(prepared.obs[0], norm(obs))
    np.testing.assert_array_equal(prepared.next_obs[0], norm(obs[::-1]))
    np.testing.assert_array_equal(prepared.reward[0], batch.reward)

    exported = PolicyModule(agent, norm)(obs).numpy()
    np.testing.assert_array_equal(exported, agent.policy(tf.constant(norm(obs))).numpy())
    assert "obs_norm" in learner.trackables()


def test_the_loop_counts_every_training_observation_random_steps_included(make_cfg):
    """The statistics after a run are the moments of exactly the observations it stored (each
    step's, before learning starts too), and evaluation added none."""
    cfg = make_cfg("agent=sac", "env=pendulum", "network=simba", "network.width=16", "network.actor_width=16",
                   "total_steps=400", "learning_starts=200", "eval_every=200", "eval_episodes=1", "batch_size=32",
                   "logger.progress=false")
    summary, run = run_loop(cfg)
    obs = run.buffer.field("obs")[:400].astype(np.float64)
    norm = run.learner.obs_norm
    assert summary["steps"] == 400 and norm.count == pytest.approx(400 + INITIAL_COUNT, rel=1e-12)
    np.testing.assert_allclose(norm.mean, obs.sum(0) / (400 + INITIAL_COUNT), rtol=1e-6)


def _train(run_dir, *overrides):
    cmd = [sys.executable, "train.py", f"hydra.run.dir={run_dir}", "agent=sac", "env=pendulum", "network=simba",
           "network.width=16", "network.actor_width=16", "learning_starts=200", "eval_every=200", "eval_episodes=1",
           "batch_size=32", "deterministic=true", "logger.progress=false", "checkpoint.every=0", *overrides]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_resume_with_simba_is_bit_exact(tmp_path):
    """A run extended from its checkpoint at 400 steps ends where the uninterrupted 600-step run
    does: the same networks and optimizer state, and the same observation statistics."""
    from helpers import final_weights, resume

    whole, extended = tmp_path / "whole", tmp_path / "extended"
    for run_dir, steps in ((whole, 600), (extended, 400)):
        proc = _train(run_dir, f"total_steps={steps}")
        assert proc.returncode == 0, proc.stderr[-3000:]
    proc = resume(extended, "total_steps=600")
    assert proc.returncode == 0, proc.stderr[-3000:]
    a, b = final_weights(whole), final_weights(extended)
    assert any("obs_norm" in k for k in a) and a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)
    assert json.loads((whole / "summary.json").read_text())["final_return"] == \
        json.loads((extended / "summary.json").read_text())["final_return"]


@pytest.mark.parametrize("agent,env", [("td3", "pendulum"), ("ddpg", "pendulum"), ("sac", "pendulum"),
                                       ("dqn", "cartpole"), ("dqn", "gridworld")])
def test_every_agent_builds_acts_and_updates_on_simba(make_cfg, agent, env):
    """The tuned presets (dqn_cartpole, ...) leave the network group alone, so they compose with it."""
    import gymnasium as gym

    from envs.factory import make_env
    from training.builder import build_learner
    from training.parts import build_buffer

    cfg = make_cfg(f"agent={agent}", f"env={env}", "network=simba", "network.width=8", "network.actor_width=8")
    rng = np.random.default_rng(0)
    e = make_env(cfg.env.id, seed=0, max_episode_steps=None, kwargs=cfg.env.kwargs)
    learner = build_learner(cfg, e.observation_space, e.action_space, rng)
    buffer = build_buffer(cfg, e.observation_space, e.action_space, rng)
    obs, _ = e.reset(seed=0)
    for _ in range(40):
        learner.observe(obs[None])
        action = learner.act(obs[None], explore=True)[0]
        if isinstance(e.action_space, gym.spaces.Discrete):
            action = int(action)
        nxt, r, term, trunc, _ = e.step(action)
        buffer.add(obs[None], np.atleast_1d(action)[None], np.array([r]), nxt[None], np.array([term]), np.array([trunc]))
        obs = nxt if not (term or trunc) else e.reset()[0]
    metrics = learner.update(buffer.sample_batches(8, 2))
    assert np.isfinite(float(metrics["critic_loss" if agent != "dqn" else "loss"]))
    assert learner.agent.acting.in_numpy and learner.obs_norm.count == pytest.approx(40, abs=1e-3)
