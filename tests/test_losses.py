"""The maths of the updates against values computed by hand."""

import numpy as np
import pytest
import tensorflow as tf

from agents import losses
from agents.ddpg import DDPG
from agents.deterministic import deterministic_actor_loss
from agents.td3 import TD3
from buffers.types import Batch
from hand_nets import policy, q_value, random_weights
from helpers import compiled, one
from networks.mlp import mlp


def test_td_target_bootstraps_unless_terminated():
    reward = tf.constant([1.0, 2.0, -1.0])
    discount = tf.constant([0.99, 0.0, 0.99])  # middle transition terminated
    next_value = tf.constant([10.0, 10.0, -5.0])
    np.testing.assert_allclose(losses.td_target(reward, discount, next_value), [10.9, 2.0, -5.95], rtol=1e-6)


def test_scale_action_maps_tanh_range_onto_box():
    low, high = tf.constant([-2.0, 0.0]), tf.constant([2.0, 1.0])
    out = losses.scale_action(tf.constant([[-1.0, -1.0], [0.0, 0.0], [1.0, 1.0]]), low, high)
    np.testing.assert_allclose(out, [[-2.0, 0.0], [0.0, 0.5], [2.0, 1.0]])


def test_soft_update_moves_target_by_tau():
    target, online = tf.Variable([0.0, 10.0]), tf.Variable([1.0, 0.0])
    losses.soft_update([target], [online], 0.1)
    np.testing.assert_allclose(target.numpy(), [0.1, 9.0], rtol=1e-6)


def test_losses_by_hand():
    q1, q2, y = tf.constant([1.0, 2.0]), tf.constant([0.0, 4.0]), tf.constant([1.0, 1.0])
    assert float(losses.td3_critic_loss(q1, q2, y)) == pytest.approx((0 + 1) / 2 + (1 + 9) / 2)
    assert float(deterministic_actor_loss(tf.constant([1.0, 3.0]))) == pytest.approx(-2.0)


# --- whole updates on tiny constant-initialised networks ---------------------------------------

W = 0.1  # every kernel entry; every bias is zero


def tiny_net(input_dim, output_dim, output_activation=None, l2=0.0, name="mlp"):
    model = mlp(input_dim, output_dim, hidden=[2], activation="relu", output_activation=output_activation, l2=l2, name=name)
    model.set_weights([np.full_like(w, W) if w.ndim == 2 else np.zeros_like(w) for w in model.get_weights()])
    return model


def q_by_hand(obs, action):
    """Critic [s, a] -> 2 relu units -> 1, all kernels W, biases 0."""
    h = np.maximum(W * (obs.sum(-1) + action.sum(-1)), 0.0)
    return 2 * W * h


def actor_by_hand(obs, low=-2.0, high=2.0):
    h = np.maximum(W * obs.sum(-1), 0.0)
    return low + (np.tanh(2 * W * h) + 1) * 0.5 * (high - low)


BATCH = Batch(
    obs=np.array([[1.0], [2.0]], np.float32),
    action=np.array([[0.5], [-1.0]], np.float32),
    reward=np.array([1.0, -0.5], np.float32),
    next_obs=np.array([[3.0], [0.5]], np.float32),
    discount=np.array([0.99, 0.0], np.float32),
    weight=np.ones(2, np.float32),
)


def expected_critic_mse():
    next_a = actor_by_hand(BATCH.next_obs)
    y = BATCH.reward + BATCH.discount * q_by_hand(BATCH.next_obs, next_a[:, None])
    q = q_by_hand(BATCH.obs, BATCH.action)
    return np.mean((q - y) ** 2), y


@pytest.mark.parametrize("mode", ["eager", "graph"])
def test_td3_first_update_by_hand_and_policy_delay(mode):
    agent = TD3(1, np.array([-2.0]), np.array([2.0]), tiny_net, np.random.default_rng(0), target_noise=0.0)
    learner = compiled(agent, mode)
    mse, y = expected_critic_mse()
    actor_before = [w.copy() for w in agent.actor.get_weights()]
    targets_before = [w.copy() for w in agent.critic1_target.get_weights() + agent.actor_target.get_weights()]

    m = learner.update(one(BATCH))  # update 1: critics only
    assert float(m["target_q"]) == pytest.approx(float(np.mean(y)), rel=1e-5)
    assert float(m["critic_loss"]) == pytest.approx(2 * mse, rel=1e-5)  # both critics start equal
    for a, b in zip(actor_before, agent.actor.get_weights()):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(targets_before, agent.critic1_target.get_weights() + agent.actor_target.get_weights()):
        np.testing.assert_array_equal(a, b)

    learner.update(one(BATCH))  # update 2: the delayed step moves the actor and every target
    assert int(agent.updates.numpy()) == 2
    assert any(not np.array_equal(a, b) for a, b in zip(actor_before, agent.actor.get_weights()))
    moved = agent.critic1_target.get_weights() + agent.actor_target.get_weights()
    assert any(not np.array_equal(a, b) for a, b in zip(targets_before, moved))


def test_td3_target_noise_is_clipped_and_scaled():
    """With huge smoothing noise the target action is clipped to +-noise_clip*half_range around the
    target actor's action; the critic target must stay within what that range allows."""
    agent = TD3(1, np.array([-2.0]), np.array([2.0]), tiny_net, np.random.default_rng(0),
                target_noise=100.0, noise_clip=0.5)
    m = compiled(agent).update(one(BATCH))
    a = actor_by_hand(BATCH.next_obs)
    lo = np.clip(a - 1.0, -2, 2)[:, None]
    hi = np.clip(a + 1.0, -2, 2)[:, None]
    q_lo, q_hi = q_by_hand(BATCH.next_obs, lo), q_by_hand(BATCH.next_obs, hi)
    y_lo = BATCH.reward + BATCH.discount * np.minimum(q_lo, q_hi)
    y_hi = BATCH.reward + BATCH.discount * np.maximum(q_lo, q_hi)
    assert np.mean(y_lo) - 1e-6 <= float(m["target_q"]) <= np.mean(y_hi) + 1e-6


@pytest.mark.parametrize("l2", [0.0, 0.01])
def test_ddpg_first_update_by_hand(l2):
    agent = DDPG(1, np.array([-2.0]), np.array([2.0]), tiny_net, np.random.default_rng(0), critic_l2=l2)
    mse, y = expected_critic_mse()
    m = agent.update(BATCH)
    assert float(m["critic_loss"]) == pytest.approx(mse, rel=1e-5)  # reported loss excludes the penalty
    assert float(m["target_q"]) == pytest.approx(float(np.mean(y)), rel=1e-5)
    kernels = [w for w in agent.critic.get_weights() if w.ndim == 2]
    penalty = sum(float(x) for x in agent.critic.losses)
    # weight decay l2: a penalty of l2/2 * sum(w**2), so its gradient is l2 * w (PyTorch's weight_decay)
    assert penalty == pytest.approx(l2 / 2 * sum(float(np.sum(k**2)) for k in kernels), rel=1e-5)
    # the actor's loss is -mean Q(s, pi(s)) with the critic *after* its step, the actor before its own
    pi = actor_by_hand(BATCH.obs)[:, None]
    expected = -np.mean(q_value(agent.critic.get_weights(), BATCH.obs, pi))
    assert abs(expected + np.mean(q_by_hand(BATCH.obs, pi))) > 1e-4  # the critic's step changed it
    assert float(m["actor_loss"]) == pytest.approx(expected, rel=1e-5)


def test_ddpg_target_comes_from_the_target_actor_and_critic_apart_from_the_online_ones():
    """r + discount * Q'(s', pi'(s')) on the target networks' own weights: with them drawn apart from
    the online networks (a first update cannot tell the two, the targets start as copies)."""
    agent = DDPG(1, np.array([-2.0]), np.array([2.0]), tiny_net, np.random.default_rng(0))
    rng = np.random.default_rng(1)
    agent.actor_target.set_weights(random_weights(agent.actor_target, rng, scale=1.0))
    agent.critic_target.set_weights(random_weights(agent.critic_target, rng, scale=1.0))
    actors = {"target": agent.actor_target.get_weights(), "online": agent.actor.get_weights()}
    critics = {"target": agent.critic_target.get_weights(), "online": agent.critic.get_weights()}

    def target_q(actor, critic):
        next_a = policy(actors[actor], BATCH.next_obs, -2.0, 2.0)
        return float(np.mean(BATCH.reward + BATCH.discount * q_value(critics[critic], BATCH.next_obs, next_a)))

    y = target_q("target", "target")
    for wrong in (("online", "target"), ("target", "online"), ("online", "online")):
        assert abs(target_q(*wrong) - y) > 0.02, wrong  # each wrong pair is told apart
    assert float(agent.update(BATCH)["target_q"]) == pytest.approx(y, rel=1e-5)


def test_ddpg_weight_decay_moves_kernels_the_loss_does_not():
    """With obs = 0 the critic loss has no gradient on the obs row of the critic's first kernel:
    without weight decay it stays, with it Adam's first step moves it by the learning rate
    towards 0 (Adam normalizes the step, so the penalty's size is checked by the test above)."""
    batch = BATCH._replace(obs=np.zeros_like(BATCH.obs))
    plain = DDPG(1, np.array([-2.0]), np.array([2.0]), tiny_net, np.random.default_rng(0), critic_l2=0.0)
    decayed = DDPG(1, np.array([-2.0]), np.array([2.0]), tiny_net, np.random.default_rng(0), critic_l2=0.01)
    plain.update(batch)
    decayed.update(batch)
    lr = float(decayed.critic_optimizer.learning_rate)
    np.testing.assert_array_equal(plain.critic.get_weights()[0][0], np.float32(W))
    np.testing.assert_allclose(decayed.critic.get_weights()[0][0], W - lr, rtol=1e-4)
    assert not np.allclose(plain.critic.get_weights()[0][1], W)  # the action row has a gradient


def test_ddpg_moves_actor_and_targets_every_update():
    agent = DDPG(1, np.array([-2.0]), np.array([2.0]), tiny_net, np.random.default_rng(0), tau=0.5)
    before = agent.actor_target.get_weights()[0].copy()
    agent.update(BATCH)
    after = agent.actor_target.get_weights()[0]
    online = agent.actor.get_weights()[0]
    np.testing.assert_allclose(after, 0.5 * online + 0.5 * before, rtol=1e-6)


def test_importance_weights_scale_each_samples_loss():
    pred, target = tf.constant([1.0, 3.0]), tf.constant([0.0, 0.0])
    assert float(losses.mse(pred, target, tf.constant([1.0, 0.5]))) == pytest.approx((1 + 4.5) / 2)
    w = BATCH._replace(weight=np.array([1.0, 0.0], np.float32))  # the second sample switched off
    agent = DDPG(1, np.array([-2.0]), np.array([2.0]), tiny_net, np.random.default_rng(0))
    q = q_by_hand(BATCH.obs, BATCH.action)
    y = expected_critic_mse()[1]
    assert float(agent.update(w)["critic_loss"]) == pytest.approx((q[0] - y[0]) ** 2 / 2, rel=1e-5)

