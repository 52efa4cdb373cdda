"""SAC: its maths against hand-computed values, the squashed log density against the density by
its definition, the learned temperature, acting and the contract the loop relies on."""
import functools
import math

import numpy as np
import pytest
import tensorflow as tf

from agents import losses
from agents.sac import SAC
from buffers.types import Batch
from helpers import compiled, one, random_batch
from networks.mlp import mlp

OBS, ACT = 3, 2
LOW, HIGH = np.array([-2.0, 0.0], np.float32), np.array([2.0, 1.0], np.float32)
net = functools.partial(mlp, hidden=[16, 16])


def make(seed=0, **kwargs):
    import keras

    keras.utils.set_random_seed(seed)
    return SAC(OBS, LOW, HIGH, net, np.random.default_rng(seed), **kwargs)


def batch(rng, n=32):
    return random_batch(rng, OBS, LOW, HIGH, n)


def normal_logpdf(x, mean, std):
    return -0.5 * ((x - mean) / std) ** 2 - np.log(std) - 0.5 * np.log(2 * np.pi)


def test_squashed_log_density_is_the_density_of_tanh_of_a_gaussian():
    """log p(a) for a = tanh(u), u ~ N(m, s): the Gaussian's log density at u minus log tanh'(u), with
    tanh' taken by a central difference; summed over dimensions. Far out (|u| = 12, where tanh
    rounds to 1 in float32) it stays finite."""
    mean = np.array([[0.3, -1.2], [2.0, 0.0]], np.float64)
    log_std = np.array([[-0.5, 0.4], [0.1, -2.0]], np.float64)
    noise = np.array([[0.7, -0.2], [1.5, 0.3]], np.float64)
    a, logp = losses.squashed_gaussian(tf.constant(mean, tf.float32), tf.constant(log_std, tf.float32),
                                       tf.constant(noise, tf.float32))
    u = mean + np.exp(log_std) * noise
    h = 1e-5
    dtanh = (np.tanh(u + h) - np.tanh(u - h)) / (2 * h)
    expected = (normal_logpdf(u, mean, np.exp(log_std)) - np.log(dtanh)).sum(-1)
    np.testing.assert_allclose(a.numpy(), np.tanh(u), rtol=1e-6)
    np.testing.assert_allclose(logp.numpy(), expected, rtol=1e-5, atol=1e-5)
    _, far = losses.squashed_gaussian(tf.constant([[12.0]]), tf.constant([[0.0]]), tf.constant([[0.0]]))
    assert np.isfinite(far.numpy()).all() and far.numpy()[0] > 10  # log density near the edge: large, finite


def test_log_std_bounds_are_cleanrls():
    raw = tf.constant([-100.0, 0.0, 100.0])
    np.testing.assert_allclose(losses.bounded_log_std(raw).numpy(), [-5.0, -1.5, 2.0], atol=1e-6)


def test_soft_value_actor_and_temperature_losses_by_hand():
    next_q, next_logp = np.array([1.0, -2.0], np.float32), np.array([0.5, -1.0], np.float32)
    np.testing.assert_allclose(losses.soft_value(tf.constant(next_q), 0.2, tf.constant(next_logp)).numpy(), [0.9, -1.8], rtol=1e-6)
    logp, q = np.array([-1.0, 0.5, 2.0], np.float32), np.array([3.0, -1.0, 0.0], np.float32)
    assert float(losses.sac_actor_loss(0.5, logp, q)) == pytest.approx(np.mean(0.5 * logp - q), rel=1e-6)
    log_alpha = tf.Variable(math.log(0.3))
    with tf.GradientTape() as tape:
        loss = losses.temperature_loss(log_alpha, tf.constant(logp), -2.0)
    assert float(loss) == pytest.approx(-math.log(0.3) * np.mean(logp - 2.0), rel=1e-5)
    # the gradient moves log alpha only: d/dlog_alpha = -mean(log pi + target_entropy)
    assert float(tape.gradient(loss, log_alpha)) == pytest.approx(-np.mean(logp - 2.0), rel=1e-5)


def test_first_update_by_hand():
    """The critic target with its entropy term, the temperature's step and the targets' Polyak
    move, recomputed from the networks' weights before the update and the update's own noise."""
    agent = make(init_alpha=0.5, tau=0.1)
    rng = np.random.default_rng(1)
    b = batch(rng)
    # the two samples the update draws, in its order: pi(.|s) first, then pi(.|s'); same generator state
    probe = tf.random.Generator.from_state(agent._tf_rng.state.numpy(), agent._tf_rng.algorithm)
    noise_obs = probe.normal([32, ACT]).numpy()
    noise_next = probe.normal([32, ACT]).numpy()
    w = {k: [x.copy() for x in getattr(agent, k).get_weights()] for k in ("actor", "critic1_target", "critic2_target", "critic1")}

    def forward(ws, x):
        for i in range(0, len(ws) - 2, 2):
            x = np.maximum(x @ ws[i] + ws[i + 1], 0)
        return x @ ws[-2] + ws[-1]

    def sample(obs, noise):
        out = forward(w["actor"], obs)
        mean, raw = out[:, :ACT], out[:, ACT:]
        log_std = -5 + 3.5 * (np.tanh(raw) + 1)
        u = mean + np.exp(log_std) * noise
        logp = (normal_logpdf(u, mean, np.exp(log_std)) - np.log(1 - np.tanh(u) ** 2)).sum(-1)
        return np.tanh(u) * (HIGH - LOW) / 2 + (HIGH + LOW) / 2, logp

    _, logp = sample(b.obs, noise_obs)
    next_a, next_logp = sample(b.next_obs, noise_next)
    q_next = np.minimum(*(forward(w[c], np.concatenate([b.next_obs, next_a], 1))[:, 0] for c in ("critic1_target", "critic2_target")))
    y = b.reward + b.discount * (q_next - 0.5 * next_logp)
    q1 = forward(w["critic1"], np.concatenate([b.obs, b.action], 1))[:, 0]

    m = agent.update(Batch(*(tf.constant(x) for x in b)))
    assert float(m["alpha"]) == pytest.approx(0.5, rel=1e-6)  # the temperature before its own step
    assert float(m["target_q"]) == pytest.approx(float(np.mean(y)), rel=1e-4, abs=1e-4)
    assert float(m["q1"]) == pytest.approx(float(np.mean(q1)), rel=1e-4, abs=1e-5)
    assert float(m["entropy"]) == pytest.approx(float(-np.mean(logp)), rel=1e-4, abs=1e-4)
    # Adam's first step moves log alpha by lr against the sign of its gradient -mean(log pi - |A|)
    step = -3e-4 * np.sign(-np.mean(logp + agent.target_entropy))
    assert float(agent.log_alpha.numpy()) == pytest.approx(math.log(0.5) + step, abs=1e-6)
    for online, target, before in ((agent.critic1, agent.critic1_target, w["critic1_target"]),):
        for o, t, t0 in zip(online.get_weights(), target.get_weights(), before):
            np.testing.assert_allclose(t, t0 + 0.1 * (o - t0), rtol=1e-5, atol=1e-6)


def test_target_entropy_auto_and_bad_values():
    assert make().target_entropy == -2.0
    assert make(target_entropy=-0.5).target_entropy == -0.5
    for bad in ("high", float("nan"), True):
        with pytest.raises(ValueError, match="target_entropy must be a number or auto"):
            make(target_entropy=bad)
    with pytest.raises(ValueError, match="init_alpha must be a positive number"):
        make(init_alpha=0.0)


def test_acting_is_tanh_of_the_mean_or_of_a_seeded_sample_in_the_box():
    agent = make()
    obs = np.random.default_rng(2).normal(size=(2000, OBS)).astype(np.float32)
    out = agent.actor(obs).numpy()
    greedy = agent.act(obs, explore=False)
    np.testing.assert_allclose(greedy, np.tanh(out[:, :ACT]) * (HIGH - LOW) / 2 + (HIGH + LOW) / 2, rtol=1e-5, atol=1e-6)
    noisy = agent.act(obs, explore=True)
    assert noisy.shape == (2000, ACT) and np.all(noisy >= LOW) and np.all(noisy <= HIGH)
    # the pre-squash spread is the policy's std: atanh of the rescaled action, minus the mean
    u = np.arctanh(np.clip((noisy - (HIGH + LOW) / 2) / ((HIGH - LOW) / 2), -0.999999, 0.999999))
    std = np.exp(-5 + 3.5 * (np.tanh(out[:, ACT:]) + 1))
    z = (u - out[:, :ACT]) / std
    assert abs(z.mean()) < 0.1 and abs(z.std() - 1) < 0.1
    np.testing.assert_array_equal(make(seed=3).act(obs, True), make(seed=3).act(obs, True))  # the run's generator


def test_compiled_update_is_traced_once_and_acting_follows_it():
    learner = compiled(make())
    rng = np.random.default_rng(4)
    for n in (32, 32, 17):
        metrics = learner.update(one(batch(rng, n)))
    assert learner.update_trace_count == 1 and int(learner.agent.updates.numpy()) == 3
    assert metrics["td_error"].shape == (17,)
    obs = rng.normal(size=(5, OBS)).astype(np.float32)
    expected = np.tanh(learner.agent.actor(obs).numpy()[:, :ACT]) * (HIGH - LOW) / 2 + (HIGH + LOW) / 2
    np.testing.assert_allclose(learner.act(obs, False), expected, rtol=1e-5, atol=1e-6)


def test_checkpoint_holds_the_temperature_and_its_optimizer(tmp_path):
    agent = make(init_alpha=0.3)
    compiled(agent).update(one(batch(np.random.default_rng(5))))
    path = tf.train.Checkpoint(**agent.trackables()).write(str(tmp_path / "c"))
    other = make(seed=9)
    tf.train.Checkpoint(**other.trackables()).read(path).assert_consumed()
    assert float(other.log_alpha.numpy()) == float(agent.log_alpha.numpy())
    assert int(other.alpha_optimizer.iterations.numpy()) == 1
