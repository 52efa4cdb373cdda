"""TD3's own features against values computed by hand in numpy: the clipped double-Q target, the
actor on Q1 only, the policy delay (the actor and all three targets still on odd updates), Polyak
averaging by tau, and the smoothing and exploration noises scaled by the action half-range.

Every network gets weights of its own (critic 2 and the targets differ from critic 1 and the
actor), so a target or loss built from the wrong network gives another number."""
import types

import numpy as np
import pytest
import tensorflow as tf

from agents.ddpg import DDPG
from agents.td3 import TD3, clipped_double_q, smoothed_target_action
from hand_nets import builder, policy, q_value, random_weights, tf_batch, weights_of

OBS = 2
LOW, HIGH = np.array([-1.0, -2.0]), np.array([1.0, 2.0])  # half-ranges 1 and 2
TAU, ACTOR_LR, CRITIC_LR = 0.3, 0.01, 0.01
NETS = ("actor", "actor_target", "critic1", "critic2", "critic1_target", "critic2_target")
PAIRS = (("actor_target", "actor"), ("critic1_target", "critic1"), ("critic2_target", "critic2"))


def make(cls, network, low=LOW, high=HIGH, obs_dim=OBS, **kwargs):
    """The one place these tests construct an agent (TD3 or DDPG, same leading arguments)."""
    return cls(obs_dim, np.asarray(low, np.float32), np.asarray(high, np.float32), network,
               np.random.default_rng(0), **kwargs)


# --- the target, the actor's loss, the delay and Polyak averaging ------------------------------


def hand_target(w, b):
    """r + discount * min(Q1', Q2')(s', pi'(s')) (no smoothing noise), and Q1', Q2'."""
    next_action = policy(w["actor_target"], b["next_obs"], LOW, HIGH)
    q1t = q_value(w["critic1_target"], b["next_obs"], next_action)
    q2t = q_value(w["critic2_target"], b["next_obs"], next_action)
    return b["reward"] + b["discount"] * np.minimum(q1t, q2t), q1t, q2t


def hand_actor_loss(actor_w, critic_w, obs):
    """-mean Q(s, pi(s))."""
    return -np.mean(q_value(critic_w, obs, policy(actor_w, obs, LOW, HIGH)))


def numeric_gradient(f, weights, h=1e-6):
    """Central differences of f(weights) with respect to every entry, in float64."""
    weights = [np.asarray(w, np.float64) for w in weights]
    grads = []
    for i, w in enumerate(weights):
        g = np.zeros(w.shape)
        for idx in np.ndindex(w.shape):
            plus, minus = [x.copy() for x in weights], [x.copy() for x in weights]
            plus[i][idx] += h
            minus[i][idx] -= h
            g[idx] = (f(plus) - f(minus)) / (2 * h)
        grads.append(g)
    return grads


@pytest.fixture(scope="module")
def run():
    """Two updates of a TD3 with policy_delay 2 and no smoothing noise, on one batch; every
    network's weights before, between and after them, and both updates' metrics."""
    agent = make(TD3, builder([8]), actor_lr=ACTOR_LR, critic_lr=CRITIC_LR, tau=TAU, policy_delay=2,
                 target_noise=0.0)
    rng = np.random.default_rng(1)
    for name in NETS:
        model = getattr(agent, name)
        model.set_weights(random_weights(model, rng))
    n = 16
    b = {
        "obs": rng.normal(size=(n, OBS)),
        "action": rng.uniform(LOW, HIGH, size=(n, 2)),
        "reward": rng.normal(size=n),
        "next_obs": rng.normal(size=(n, OBS)),
        "discount": np.where(np.arange(n) % 4 == 3, 0.0, 0.99),  # some terminal transitions
        "weight": rng.uniform(0.5, 1.5, size=n),  # importance weights scale each sample's term
    }
    b = {k: v.astype(np.float32) for k, v in b.items()}

    def snapshot():
        return dict(zip(NETS, weights_of(*(getattr(agent, name) for name in NETS))))

    w0 = snapshot()
    m1 = {k: np.asarray(v) for k, v in agent.update(tf_batch(**b)).items()}
    updates1, w1 = int(agent.updates.numpy()), snapshot()
    m2 = {k: np.asarray(v) for k, v in agent.update(tf_batch(**b)).items()}
    updates2, w2 = int(agent.updates.numpy()), snapshot()
    return types.SimpleNamespace(b=b, w0=w0, w1=w1, w2=w2, m1=m1, m2=m2, updates=(updates1, updates2))


@pytest.mark.parametrize("step", [1, 2])
def test_critics_regress_onto_min_of_both_target_critics(run, step):
    """Both updates: target_q is the mean of r + discount * min(Q1', Q2')(s', pi'(s')) with the
    target actor and target critics as they stand, critic_loss the IS-weighted mean squared
    errors of both critics summed, td_error per sample the larger of the two."""
    b, before, m = run.b, (run.w0, run.w1)[step - 1], (run.m1, run.m2)[step - 1]
    y, q1t, q2t = hand_target(before, b)
    live = b["discount"] > 0
    # the case is not degenerate: min picks each target critic for some samples, and the
    # target actor's action is not the actor's
    assert np.any(q1t[live] < q2t[live] - 0.05) and np.any(q2t[live] < q1t[live] - 0.05)
    assert not np.allclose(policy(before["actor"], b["next_obs"], LOW, HIGH),
                           policy(before["actor_target"], b["next_obs"], LOW, HIGH), atol=0.05)
    q1 = q_value(before["critic1"], b["obs"], b["action"])
    q2 = q_value(before["critic2"], b["obs"], b["action"])
    w = b["weight"]
    np.testing.assert_allclose(m["target_q"], np.mean(y), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(m["q1"], np.mean(q1), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(m["q2"], np.mean(q2), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(m["critic_loss"], np.mean(w * (q1 - y) ** 2) + np.mean(w * (q2 - y) ** 2),
                               rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(m["td_error"], np.maximum(np.abs(y - q1), np.abs(y - q2)), rtol=1e-4, atol=1e-5)


def test_odd_update_leaves_the_actor_and_all_three_targets_untouched(run):
    """Update 1 with policy_delay 2: the critics step, the actor, the target actor and both target
    critics keep their weights bit for bit."""
    assert run.updates == (1, 2)
    for name in ("actor", "actor_target", "critic1_target", "critic2_target"):
        for before, after in zip(run.w0[name], run.w1[name], strict=True):
            np.testing.assert_array_equal(after, before, err_msg=name)
    for name in ("critic1", "critic2"):
        assert any(not np.array_equal(a, b) for a, b in zip(run.w0[name], run.w1[name])), name


def test_delayed_update_moves_every_target_by_tau_towards_its_online_network_after_its_step(run):
    """Update 2: each target becomes target + tau * (online - target), the online network as it is
    after this update's step (which moved it, so the online weights before it would not do)."""
    for target, online in PAIRS:
        for t_before, o_before, o_after, t_after in zip(run.w1[target], run.w1[online], run.w2[online],
                                                        run.w2[target], strict=True):
            expected = t_before.astype(np.float64) + TAU * (o_after.astype(np.float64) - t_before)
            np.testing.assert_allclose(t_after, expected, rtol=1e-5, atol=1e-6, err_msg=target)
        assert any(not np.allclose(a, b, atol=1e-4) for a, b in zip(run.w1[online], run.w2[online])), online


def test_delayed_update_steps_the_actor_on_q1_only(run):
    """Update 2: actor_loss is -mean Q1(s, pi(s)) with critic 1 after its step and the actor before
    its own; the actor's step is Adam's first, -actor_lr * sign(dL/dw) for the gradient of that loss
    (computed here by central differences), which Q2, or both critics, would point elsewhere."""
    b, actor, critic1, critic2 = run.b, run.w1["actor"], run.w2["critic1"], run.w2["critic2"]
    loss = hand_actor_loss(actor, critic1, b["obs"])
    assert abs(loss - hand_actor_loss(actor, critic2, b["obs"])) > 0.05  # Q2 would give another loss
    np.testing.assert_allclose(run.m2["actor_loss"], loss, rtol=1e-4, atol=1e-5)

    g1 = np.concatenate([g.ravel() for g in numeric_gradient(lambda w: hand_actor_loss(w, critic1, b["obs"]), actor)])
    g2 = np.concatenate([g.ravel() for g in numeric_gradient(lambda w: hand_actor_loss(w, critic2, b["obs"]), actor)])
    step = np.concatenate([(a.astype(np.float64) - w).ravel() for a, w in zip(run.w2["actor"], actor)])
    clear = np.abs(g1) > 1e-4  # well above Adam's epsilon and the differences' error
    assert clear.mean() > 0.5
    assert np.any(np.sign(g2[clear]) != np.sign(g1[clear]))  # Q2's gradient would step differently
    np.testing.assert_allclose(step[clear], -ACTOR_LR * np.sign(g1[clear]), rtol=1e-2)


# --- noise scaled by the action half-range -----------------------------------------------------

NLOW, NHIGH = np.array([-3.0, 0.0]), np.array([3.0, 1.0])  # half-ranges 3 and 0.5, midpoints 0 and 0.5
NHALF, NMID = (NHIGH - NLOW) / 2, (NHIGH + NLOW) / 2


def constant_actor(action):
    """Weights of an obs -> 4 -> 2 actor whose action is `action` whatever the observation."""
    def weights(model):
        out = np.arctanh((np.asarray(action) - NMID) / NHALF)
        return [np.zeros_like(w) for w in model.get_weights()[:-1]] + [out.astype(np.float32)]
    return weights


def distance_critic(centre, scale):
    """Weights of a [s (1), a (2)] -> 4 -> 1 critic with Q(s, a) = sum_j scale_j * |a_j - centre_j|
    (relu(x) + relu(-x) = |x|)."""
    def weights(model):
        kernel = np.array([[0, 0, 0, 0], [1, -1, 0, 0], [0, 0, 1, -1]], np.float32)
        bias = np.array([-centre[0], centre[0], -centre[1], centre[1]], np.float32)
        out = np.array([[scale[0]], [scale[0]], [scale[1]], [scale[1]]], np.float32)
        return [kernel, bias, out, np.zeros(1, np.float32)]
    return weights


def noise_network(actor_action, critic_centre, critic_scale):
    actor, critic = constant_actor(actor_action), distance_critic(critic_centre, critic_scale)
    return builder([4], {"actor": actor, "actor_target": actor, "critic1": critic, "critic2": critic,
                         "critic1_target": critic, "critic2_target": critic})


def batch_at(action, n):
    """n transitions at obs 0 taking `action`, reward 0, discount 1: with critics that are 0 at
    `action`, each sample's td_error is its target, Q'(s', a'~)."""
    zeros = np.zeros((n, 1), np.float32)
    return tf_batch(zeros, np.tile(np.asarray(action, np.float32), (n, 1)), np.zeros(n), zeros, np.ones(n), np.ones(n))


def test_clipped_smoothing_noise_spans_noise_clip_times_half_range_then_the_box():
    """Huge smoothing noise, so each component is clipped to +-noise_clip * half_range = +-1.5 and
    +-0.25 around the target actor's action (2, 0.1), then to the box [-3, 3] x [0, 1]:
    dimension 1 lands on 3 (3.5 clipped) or 0.5, dimension 2 on 0.35 or 0 (-0.15 clipped). The target
    critics measure |a1 - 1.75| + |a2 - 0.175|, the same at both ends of each dimension: 1.25 + 0.175
    whichever way the noise went. Without the half-range the ends would be 2.5 / 1.5 and 0.6 / 0
    (0.75 or 0.25, 0.425 or 0.175), and without the box 3.5 (1.75) or -0.15 (0.325)."""
    centre = (1.75, 0.175)
    agent = make(TD3, noise_network((2.0, 0.1), centre, (1.0, 1.0)), NLOW, NHIGH, obs_dim=1,
                 target_noise=1e6, noise_clip=0.5)
    m = agent.update(batch_at(centre, 64))
    np.testing.assert_allclose(np.asarray(m["td_error"]), np.full(64, 1.25 + 0.175), rtol=1e-5)
    np.testing.assert_allclose(float(m["target_q"]), 1.425, rtol=1e-5)


@pytest.mark.parametrize("dim", [0, 1])
def test_smoothing_noise_std_is_target_noise_times_half_range(dim):
    """Unclipped smoothing noise around the target actor's action (the box's midpoint, 10 std from
    its edges): a target critic measuring |a_dim - mid_dim| gives each sample's |noise_dim|, whose
    root mean square over 20000 samples is target_noise * half_range (0.3 and 0.05) within 3%
    (its standard error is 0.5%)."""
    scale = np.eye(2)[dim]
    agent = make(TD3, noise_network(NMID, NMID, scale), NLOW, NHIGH, obs_dim=1, target_noise=0.1, noise_clip=100.0)
    noise = np.asarray(agent.update(batch_at(NMID, 20000))["td_error"])
    np.testing.assert_allclose(np.sqrt(np.mean(noise**2)), 0.1 * NHALF[dim], rtol=0.03)


@pytest.mark.parametrize("cls", [TD3, DDPG])
def test_exploration_noise_std_is_exploration_noise_times_half_range(cls):
    """act(explore=False) is the actor's action mapped onto the box, here (0.6, 0.4); act(explore=True)
    adds noise of std exploration_noise * half_range per dimension (0.3 and 0.05; the action is 8
    std from the box's edges, so clipping does not bias it), checked over 20000 draws within 3%
    (the standard error is 0.5%), with a mean of zero."""
    agent = make(cls, noise_network((0.6, 0.4), NMID, (1.0, 1.0)), NLOW, NHIGH, obs_dim=1, exploration_noise=0.1)
    obs = np.zeros((20000, 1), np.float32)
    greedy = agent.act(obs, explore=False)
    np.testing.assert_allclose(greedy, np.tile([0.6, 0.4], (20000, 1)), rtol=1e-5)
    noise = agent.act(obs, explore=True) - greedy
    np.testing.assert_allclose(noise.std(axis=0), 0.1 * NHALF, rtol=0.03)
    assert np.all(np.abs(noise.mean(axis=0)) < 5 * 0.1 * NHALF / np.sqrt(20000))


def test_clipped_double_q_takes_the_minimum():
    np.testing.assert_allclose(clipped_double_q(tf.constant([1.0, 5.0]), tf.constant([2.0, -3.0])), [1.0, -3.0])


def test_smoothed_target_action_clips_noise_then_action():
    half = tf.constant([2.0])  # action box [-2, 2]
    low, high = tf.constant([-2.0]), tf.constant([2.0])
    action = tf.constant([[0.5], [1.9], [-1.0]])
    noise = tf.constant([[3.0], [0.3], [-0.4]])  # clip c=0.5 scaled by half-range -> +-1.0
    out = smoothed_target_action(action, noise, 0.5, half, low, high)
    np.testing.assert_allclose(out, [[1.5], [2.0], [-1.4]], rtol=1e-6)
