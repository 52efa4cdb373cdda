"""MR.Q's maths (agents/losses.py) against values computed by hand."""

import math

import numpy as np
import pytest
import tensorflow as tf

from agents import losses

BINS = tf.constant([-3.0, -1.0, 0.0, 2.0, 5.0])


def test_reward_bins_are_evenly_spaced_in_symlog_space():
    bins = losses.two_hot_bins(-10, 10, 65)
    assert bins.shape == (65,) and bins[32] == 0.0
    np.testing.assert_allclose([bins[0], bins[33], bins[-1]], [-(math.e ** 10 - 1), math.e ** 0.3125 - 1, math.e ** 10 - 1],
                               rtol=1e-6)
    np.testing.assert_allclose(bins, -bins[::-1])


def test_two_hot_splits_a_value_between_its_two_bins():
    x = tf.constant([0.5, -2.0, 2.0, 7.0, -4.0, -3.0])
    expected = [[0, 0, 0.75, 0.25, 0],  # 0.5 is a quarter of the way from 0 to 2
                [0.5, 0.5, 0, 0, 0],
                [0, 0, 0, 1, 0],  # on a bin: one-hot
                [0, 0, 0, 0, 1],  # beyond the ends: the end bin
                [1, 0, 0, 0, 0],
                [1, 0, 0, 0, 0]]
    encoded = losses.two_hot(x, BINS)
    np.testing.assert_allclose(encoded, expected, atol=1e-7)
    np.testing.assert_allclose(tf.linalg.matvec(encoded[:4], BINS)[:3], [0.5, -2.0, 2.0], rtol=1e-6)


def test_two_hot_mean_and_cross_entropy():
    np.testing.assert_allclose(losses.two_hot_mean(tf.zeros([1, 5]), BINS), [0.6], rtol=1e-6)  # (-3-1+0+2+5)/5
    logits = tf.constant([[1.0, 2.0, 3.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0, 0.0]])
    lse = math.log(math.e + math.e ** 2 + math.e ** 3 + 2)
    ce = losses.two_hot_cross_entropy(logits, tf.constant([0.5, -2.0]), BINS)
    np.testing.assert_allclose(ce, [-(0.75 * (3 - lse) + 0.25 * (0 - lse)), math.log(5)], rtol=1e-6)


def test_masked_mse_averages_over_every_element():
    pred = tf.constant([[1.0, 2.0], [3.0, 4.0]])
    np.testing.assert_allclose(losses.masked_mse(pred, tf.zeros([2, 2]), tf.constant([1.0, 0.0])), 1.25)


def test_multi_step_return_stops_after_the_first_termination():
    reward = tf.constant([[1.0, 2.0, 8.0]] * 3)
    terminated = tf.constant([[0.0, 0.0, 0.0], [0.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    ret, not_done = losses.multi_step_return(reward, terminated, 0.5)
    # 1 + 0.5*2 + 0.25*8; the terminal step's reward counts, the one after it does not
    np.testing.assert_allclose(ret, [4.0, 2.0, 1.0])
    np.testing.assert_allclose(not_done, [1.0, 0.0, 0.0])


def test_value_target_is_in_units_of_the_reward_scale():
    target = losses.scaled_value_target(tf.constant([2.0, 2.0]), tf.constant([1.0, 0.0]), 0.9 ** 3,
                                        tf.constant([10.0, 10.0]), tf.constant(2.0), tf.constant(4.0))
    np.testing.assert_allclose(target, [(2 + 0.729 * 10 * 4) / 2, 1.0], rtol=1e-6)


def test_gumbel_softmax_and_realigned_actions():
    uniform = tf.constant([[math.exp(-1.0), math.exp(-math.exp(-2.0))]])  # Gumbel noise 0 and 2
    np.testing.assert_allclose(losses.gumbel_softmax(tf.constant([[1.0, 1.0]]), uniform, 2.0),
                               [[1 / (1 + math.e), math.e / (1 + math.e)]], rtol=1e-6)
    np.testing.assert_array_equal(losses.realigned_action(tf.constant([[0.1, 0.7, 0.2]]), True), [[0, 1, 0]])
    np.testing.assert_array_equal(losses.realigned_action(tf.constant([[-1.5, 0.25]]), False), [[-1.0, 0.25]])


def _ce(z, r):  # two bins [0, 1] with logits [0, z]: p(1) = sigmoid(z)
    p = 1 / (1 + math.exp(-z))
    return -((1 - r) * math.log(1 - p) + r * math.log(p)) if 0 < r < 1 else -math.log(p if r == 1 else 1 - p)


@pytest.mark.parametrize("done_weight", [0.1, 0.0])
def test_model_rollout_loss_unrolls_its_predictions_and_masks_after_termination(done_weight):
    """A model that adds the action to the embedding and reads the done flag and the reward logit
    off the result, unrolled 3 steps from embeddings 0 and 1 with actions of 1: predictions 1, 2, 3
    and 2, 3, 4. The second sample terminates at its first step, so only that step counts for it."""
    def model(zs, action):
        nxt = zs + action
        return nxt, nxt, tf.concat([tf.zeros_like(nxt), nxt], axis=1)

    zs = tf.constant([[0.0], [1.0]])
    actions = tf.ones([2, 3, 1])
    next_zs = tf.constant([[[1.0]] * 3, [[2.0]] * 3])
    reward = tf.constant([[0.0, 1.0, 0.5], [1.0, 0.0, 0.0]])
    terminated = tf.constant([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0]])
    total, parts = losses.model_rollout_loss(model, zs, actions, next_zs, reward, terminated, tf.constant([0.0, 1.0]),
                                             1.0, 0.1, tf.constant(done_weight))
    dynamics = 0 + (1 + 0) / 2 + (4 + 0) / 2
    done = (1 + 1) / 2 + (4 + 0) / 2 + (9 + 0) / 2
    rewards = (_ce(1, 0) + _ce(2, 1)) / 2 + _ce(2, 1) / 2 + _ce(3, 0.5) / 2
    np.testing.assert_allclose([parts["dynamics"], parts["done"], parts["reward"]], [dynamics, done, rewards], rtol=1e-6)
    np.testing.assert_allclose(total, dynamics + 0.1 * rewards + done_weight * done, rtol=1e-6)
