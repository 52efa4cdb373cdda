"""TD7: each part against hand values (AvgL1Norm, SALE's encoder loss, LAP's loss and priorities,
value clipping, the target copies every N updates with the fixed encoders' order, the delayed actor,
the policy-checkpoint schedule), the switches that turn parts off, numpy acting of the composed
policy, training at episode ends through the loop, resume, evaluate and export, and bad input."""
import json
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from agents import losses
from agents.td7 import TD7, CheckpointSettings, CheckpointState, checkpoint_schedule
from buffers.prioritized import PrioritizedReplay
from helpers import compiled, one, random_batch
from networks.numpy_forward import forward_fn, parse_program
from networks.sale import SALE, AvgL1Norm

OBS, ACT = 3, 2
LOW, HIGH = np.array([-2.0, 0.0], np.float32), np.array([2.0, 1.0], np.float32)
SMALL = dict(zs_dim=8, encoder_hidden=16, critic_hidden=16, actor_hidden=16)


def make(seed=0, **kwargs):
    import keras

    keras.utils.set_random_seed(seed)
    return TD7(OBS, LOW, HIGH, SALE(**SMALL), np.random.default_rng(seed), **kwargs)


def batch(rng, n=32):
    return random_batch(rng, OBS, LOW, HIGH, n)


def weights(model):
    return [w.numpy().copy() for w in model.weights]


def same(a, b):
    return all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


# --- the pieces by hand ------------------------------------------------------------------------

def test_avg_l1_norm_and_lap_huber_by_hand():
    x = np.array([[1.0, -3.0], [0.0, 0.0]], np.float32)
    np.testing.assert_allclose(AvgL1Norm()(x).numpy(), [[0.5, -1.5], [0.0, 0.0]])  # mean |x| = 2; a zero row stays 0
    td = tf.constant([[0.5, 2.0], [1.0, 0.2]])
    # 0.5 * 0.25 + 2 (linear from 1, no offset), then 1 (x = 1 is linear) + 0.5 * 0.04, averaged over 2 rows
    assert float(losses.lap_huber(td, 1.0)) == pytest.approx(((0.125 + 2.0) + (1.0 + 0.02)) / 2)
    assert float(losses.squared_td(td)) == pytest.approx(((0.25 + 4.0) + (1.0 + 0.04)) / 2)


def test_lap_priorities_floor_power_no_weights_and_the_max_reset():
    buf = PrioritizedReplay(100, 1, 1, 0.99, np.random.default_rng(0), alpha=0.4, min_priority=1.0,
                            importance_weights=False, max_reset_every=3)
    for i in range(4):
        buf.add(np.full((1, 1), i), np.zeros((1, 1)), [0.0], np.zeros((1, 1)), [False], [False])
    b = buf.sample(4)
    np.testing.assert_array_equal(b.weight, np.ones(4))  # no importance weights
    idx = buf.last_indices.copy()
    buf.update_priorities(np.array([0.5, -3.0, 1.0, 9.0]))  # update 1: floors at 1, the sign dropped
    np.testing.assert_allclose(buf._tree.get(idx), np.array([1.0, 3.0, 1.0, 9.0]) ** 0.4, rtol=1e-12)
    assert buf._max_priority == 9.0
    buf.sample(4)
    buf.update_priorities(np.zeros(4))  # update 2: every sampled priority back to the floor
    assert buf._max_priority == 9.0
    buf.sample(4)
    buf.update_priorities(np.zeros(4))  # update 3: the reset, to the largest stored (all 1 now)
    assert buf._max_priority == pytest.approx(1.0)
    buf.add(np.ones((1, 1)), np.zeros((1, 1)), [0.0], np.zeros((1, 1)), [False], [False])
    assert buf._tree.get(np.array([4]))[0] == pytest.approx(1.0)  # a new transition gets the reset maximum
    other = PrioritizedReplay(100, 1, 1, 0.99, np.random.default_rng(0), alpha=0.4, min_priority=1.0,
                              importance_weights=False, max_reset_every=3)
    other.load_state_dict(buf.state_dict())
    assert other._updates_seen == 3


def test_checkpoint_schedule_by_hand():
    """The author's maybe_train_and_checkpoint over a sequence of episodes: a first episode always
    becomes the checkpoint; one below it trains without saving; at `after` updates the assessment
    grows to max_episodes and the checkpoint's lowest return is scaled by reset_weight."""
    settings = CheckpointSettings(max_episodes=3, after=250, reset_weight=0.9)
    s = CheckpointState()
    s, n, save = checkpoint_schedule(s, 100, -50.0, settings)
    assert (n, save, s.best_min_return, s.updates) == (100, True, -50.0, 100)
    s, n, save = checkpoint_schedule(s, 80, -60.0, settings)  # below the checkpoint: train, keep it
    assert (n, save, s.best_min_return) == (80, False, -50.0)
    s, n, save = checkpoint_schedule(s, 100, -40.0, settings)  # 180 <= 250 < 280: the reset comes in this phase
    assert (n, save, s.max_episodes, s.updates) == (100, True, 3.0, 280)
    assert s.best_min_return == pytest.approx(-40.0 * 0.9)
    s, n, save = checkpoint_schedule(s, 50, -30.0, settings)  # now 3 episodes assess a policy
    assert (n, save, s.episodes, s.steps) == (0, False, 1.0, 50.0)
    s, n, save = checkpoint_schedule(s, 50, -20.0, settings)
    assert (n, save) == (0, False)
    s, n, save = checkpoint_schedule(s, 50, -25.0, settings)  # min of the three -30 >= -36: saved
    assert (n, save, s.best_min_return, s.episodes, s.min_return) == (150, True, -30.0, 0.0, 1e8)
    s, n, save = checkpoint_schedule(s, 10, -31.0, settings)  # one episode below it ends the assessment early
    assert (n, save, s.updates) == (10, False, 440)


def test_the_policy_runs_in_numpy_as_one_program():
    """The acting network is the actor on the fixed encoder's zs, one Keras model of two: the numpy
    forward pass inlines both and agrees with Keras."""
    agent = make()
    model = agent.acting.network
    steps, _ = parse_program(model)
    assert {s.kind for s in steps} == {"dense", "avg_l1_norm", "concat"}
    obs = np.random.default_rng(1).normal(size=(5, OBS)).astype(np.float32)
    np.testing.assert_allclose(forward_fn(model)(model.get_weights(), obs), model(obs).numpy(), rtol=1e-5, atol=1e-6)
    zs = agent.fixed_encoder.zs(obs)
    np.testing.assert_allclose(model(obs).numpy(), agent.actor([tf.constant(obs), zs]).numpy(), rtol=1e-6)
    assert agent.acting.in_numpy and agent.eval_acting.in_numpy and agent.eval_acting is not agent.acting


def test_first_update_by_hand():
    """The encoder loss, the critic target (value clipping: the range starts at [0, 0], so the first
    target is the reward) and LAP's loss and priorities, from the networks as they were before it."""
    agent = make()
    b = batch(np.random.default_rng(2))
    action = (b.action - (HIGH + LOW) / 2) / ((HIGH - LOW) / 2)
    zs = agent.encoder.zs(b.obs).numpy()
    pred = agent.encoder.zsa(np.concatenate([zs, action], 1)).numpy()
    encoder_loss = np.mean((pred - agent.encoder.zs(b.next_obs).numpy()) ** 2)
    fixed_zs = agent.fixed_encoder.zs(b.obs).numpy()
    fixed_zsa = agent.fixed_encoder.zsa(np.concatenate([fixed_zs, action], 1)).numpy()
    q = agent.critic([tf.constant(x, tf.float32) for x in (b.obs, action, fixed_zsa, fixed_zs)]).numpy()
    td = np.abs(q - b.reward[:, None])
    metrics = agent.update(b)
    assert float(metrics["encoder_loss"]) == pytest.approx(encoder_loss, rel=1e-5)
    assert float(metrics["target_q"]) == pytest.approx(b.reward.mean(), rel=1e-6)
    assert float(metrics["critic_loss"]) == pytest.approx(np.mean(np.sum(np.where(td < 1, 0.5 * td**2, td), 1)), rel=1e-5)
    np.testing.assert_allclose(metrics["td_error"].numpy(), td.max(1), rtol=1e-5)
    # the range of the targets seen, held until the next target copy
    assert float(agent.value_max.numpy()) == pytest.approx(b.reward.max())
    assert float(agent.target_max.numpy()) == 0.0


def test_without_value_clipping_the_first_target_bootstraps():
    agent = make(value_clipping=False)
    b = batch(np.random.default_rng(2))
    assert abs(float(agent.update(b)["target_q"]) - b.reward.mean()) > 1e-3


def test_target_copies_every_n_updates_in_the_fixed_encoders_order():
    """Update 3 of target_update_every=3: the targets become the networks, the fixed target encoder
    the fixed encoder as it was, the fixed encoder the current encoder, and the clipping range the
    targets' range. Before it none moves; the actor steps on every second update."""
    learner = compiled(make(target_update_every=3))
    agent, rng = learner.agent, np.random.default_rng(3)
    fixed0, actor0 = weights(agent.fixed_encoder.zs) + weights(agent.fixed_encoder.zsa), weights(agent.actor)
    targets0 = weights(agent.actor_target) + weights(agent.critic_target) + weights(agent.fixed_target_encoder.zs)
    for n in (1, 2):
        learner.update(one(batch(rng)))
        assert same(actor0, weights(agent.actor)) == (n == 1)
        assert same(targets0, weights(agent.actor_target) + weights(agent.critic_target) +
                    weights(agent.fixed_target_encoder.zs))
        assert same(fixed0, weights(agent.fixed_encoder.zs) + weights(agent.fixed_encoder.zsa))
    learner.update(one(batch(rng)))
    assert same(weights(agent.actor_target), weights(agent.actor))
    assert same(weights(agent.critic_target), weights(agent.critic))
    assert same(weights(agent.fixed_target_encoder.zs) + weights(agent.fixed_target_encoder.zsa), fixed0)
    assert same(weights(agent.fixed_encoder.zs), weights(agent.encoder.zs))
    assert not same(fixed0[:len(agent.encoder.zs.weights)], weights(agent.encoder.zs))  # the encoder learned
    assert float(agent.target_max.numpy()) == float(agent.value_max.numpy())
    assert learner.update_trace_count == 1
    # acting holds the weights the last update handed back: the actor on the new fixed encoder
    obs = rng.normal(size=(4, OBS)).astype(np.float32)
    np.testing.assert_allclose(agent.acting(obs), agent.acting.network(obs).numpy(), rtol=1e-5, atol=1e-6)


def test_switches_remove_their_parts():
    plain = make(sale=False, fixed_encoders=False, lap=False, checkpoints=False)
    assert plain.encoder is None and plain.eval_acting is plain.acting
    assert [len(m.inputs) for m in (plain.actor, plain.critic)] == [1, 2]
    b = batch(np.random.default_rng(4))
    q = plain.critic([tf.constant(b.obs), tf.constant((b.action - (HIGH + LOW) / 2) / ((HIGH - LOW) / 2))]).numpy()
    metrics = plain.update(b)
    assert float(metrics["critic_loss"]) == pytest.approx(np.mean(np.sum((q - b.reward[:, None]) ** 2, 1)), rel=1e-5)
    assert float(metrics["encoder_loss"]) == 0.0
    shared = make(fixed_encoders=False)
    assert shared.fixed_encoder is shared.encoder and "fixed_encoder_zs" not in shared.trackables()


def test_episode_ends_make_the_acting_policy_the_checkpoint():
    learner = compiled(make(target_update_every=2))
    agent, rng = learner.agent, np.random.default_rng(5)
    obs = rng.normal(size=(4, OBS)).astype(np.float32)
    for _ in range(2):
        learner.update(one(batch(rng)))
    assert not np.allclose(agent.act(obs, False), agent.box.from_unit(agent.acting(obs)))  # still the initial actor
    assert learner.episode_end(10, -5.0) == 10  # the first episode: saved, then 10 updates
    np.testing.assert_array_equal(agent.act(obs, False), agent.box.from_unit(agent.acting(obs)).astype(np.float32))
    saved = agent.act(obs, False)
    for _ in range(2):
        learner.update(one(batch(rng)))
    assert learner.episode_end(7, -9.0) == 7  # below the checkpoint's -5: trained, not saved
    np.testing.assert_array_equal(agent.act(obs, False), saved)
    exported = agent.policy(tf.constant(obs)).numpy()
    np.testing.assert_allclose(exported, saved, rtol=1e-5, atol=1e-6)


def test_checkpoint_round_trip(tmp_path):
    learner = compiled(make(target_update_every=2))
    rng = np.random.default_rng(6)
    for _ in range(3):
        learner.update(one(batch(rng)))
    learner.episode_end(12, 1.0)
    agent = learner.agent
    path = tf.train.Checkpoint(**agent.trackables()).write(str(tmp_path / "c"))
    other = make(seed=11, target_update_every=2)
    tf.train.Checkpoint(**other.trackables()).read(path).assert_consumed()
    for name in ("actor", "critic", "critic_target"):
        assert same(weights(getattr(agent, name)), weights(getattr(other, name)))
    assert same(weights(agent.eval_acting.network), weights(other.eval_acting.network))
    np.testing.assert_array_equal(agent._schedule.numpy(), other._schedule.numpy())
    assert float(other.target_max.numpy()) == float(agent.target_max.numpy())


def test_td7_refuses_bad_settings():
    with pytest.raises(ValueError, match="network=sale"):
        TD7(OBS, LOW, HIGH, lambda *a, **k: None, np.random.default_rng(0))
    with pytest.raises(ValueError, match="policy_delay must be an integer >= 1"):
        make(policy_delay=0)
    with pytest.raises(ValueError, match="zs_dim must be a positive integer"):
        SALE(zs_dim=0)
    with pytest.raises(ValueError, match="encoder_hidden must be a positive integer"):
        SALE(encoder_hidden=-4)


# --- through the loop, train.py and evaluate.py ----------------------------------------------------

TINY = ["agent=td7", "env=pendulum", "network.zs_dim=8", "network.encoder_hidden=16", "network.critic_hidden=16",
        "network.actor_hidden=16", "batch_size=32", "eval_episodes=1", "deterministic=true", "logger.progress=false",
        "checkpoint.every=0"]


@pytest.mark.parametrize("steps_per_call", [0, 400])
def test_updates_come_at_episode_ends(make_cfg, steps_per_call):
    """Pendulum's episodes are 200 steps. As in the author's loop, the policy acts from the first
    episode end past learning_starts (1200: the episode ending at 1000 does not count) and trains at
    the next ones: two phases of 200 updates at 1400 and 1600, none in between; one batch per update
    from the LAP buffer."""
    from helpers import run_loop

    cfg = make_cfg(*TINY, "total_steps=1600", "learning_starts=1000", "eval_every=1600",
                   f"speed.steps_per_call={steps_per_call}")
    summary, run = run_loop(cfg)
    assert summary["updates"] == 400
    assert run.buffer._updates_seen == 400  # every update's priorities came back before the next batch
    assert float(run.learner.agent._schedule.numpy()[5]) == 400  # the schedule asked for them


def test_bad_input_is_refused_through_train_py(tmp_path):
    from test_runs import ROOT

    cases = {
        "buffer=uniform": "agent.lap=true",
        "buffer=prioritized": "buffer.min_priority=0",
        "network=mlp": "network=sale",
        "agent.policy_delay=0": "policy_delay must be an integer >= 1",
        "network.encoder_hidden=0": "encoder_hidden must be a positive integer",
        "num_envs=2": "num_envs=2 with agent.checkpoints=true",
        "speed.batch_shards=2": "with network=sale",
        "env=cartpole": "continuous",
    }
    for i, (override, message) in enumerate(cases.items()):
        base = [o for o in TINY if not o.startswith("network.")] if override == "network=mlp" else TINY
        proc = subprocess.run([sys.executable, "train.py", f"hydra.run.dir={tmp_path / str(i)}", *base, override,
                               "total_steps=300", "learning_starts=100"],
                              cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 2, (override, proc.stderr[-2000:])
        assert message in proc.stderr and "Traceback" not in proc.stderr, (override, proc.stderr[-2000:])


def _train(run_dir, *overrides):
    from test_runs import ROOT

    cmd = [sys.executable, "train.py", f"hydra.run.dir={run_dir}", *TINY, "learning_starts=200", "eval_every=200",
           "agent.target_update_every=50", *overrides]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_resume_is_bit_exact_and_evaluate_exports_the_checkpoint(tmp_path):
    """A run extended from its checkpoint at 600 steps ends where the uninterrupted 1000-step run
    does: networks, encoders, checkpoint policy, schedule, clipping range and LAP priorities. Then
    evaluate.py acts with, and exports, the checkpoint policy."""
    from test_runs import evaluate, final_weights, resume

    whole, extended = tmp_path / "whole", tmp_path / "extended"
    for run_dir, steps in ((whole, 1000), (extended, 600)):
        proc = _train(run_dir, f"total_steps={steps}")
        assert proc.returncode == 0, proc.stderr[-3000:]
    proc = resume(extended, "total_steps=1000")
    assert proc.returncode == 0, proc.stderr[-3000:]
    a, b = final_weights(whole), final_weights(extended)
    assert a.keys() == b.keys() and any("checkpoint_policy" in k for k in a)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)
    summary = json.loads((whole / "summary.json").read_text())
    assert summary["final_return"] == json.loads((extended / "summary.json").read_text())["final_return"]
    assert summary["updates"] == 600  # the episodes ending at 600, 800 and 1000 (the policy acts from 400)

    proc = evaluate(f"run_dir={whole}", "episodes=1", "export=true")
    assert proc.returncode == 0, proc.stderr[-3000:]
    exported = tf.saved_model.load(str(whole / "export" / "latest"))
    obs = np.random.default_rng(0).normal(size=(4, 3)).astype(np.float32)
    assert exported(obs).numpy().shape == (4, 1)
