"""DQN maths by hand, its contract, and the Gridworld's rules."""
import functools

import gymnasium as gym
import numpy as np
import pytest
import tensorflow as tf
from hand_nets import builder, forward, random_weights, tf_batch, weights_of
from helpers import compiled, one, stack

from agents import losses
from agents.base import tracked
from agents.dqn import DQN
from agents.export import PolicyModule
from buffers.types import Batch
from envs.gridworld import GridworldEnv, valid_board
from networks.cnn import conv_net
from networks.mlp import dueling_mlp, mlp


def test_q_of_actions_gathers_per_row():
    q = tf.constant([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    np.testing.assert_allclose(losses.q_of_actions(q, tf.constant([2, 0])), [3.0, 4.0])


def test_double_dqn_target_by_hand():
    q_target = tf.constant([[1.0, 5.0, 2.0], [0.0, -1.0, 3.0]])
    q_online = tf.constant([[9.0, 0.0, 1.0], [0.0, 8.0, 1.0]])  # online argmax: 0 and 1
    np.testing.assert_allclose(losses.dqn_next_value(q_target, q_online), [1.0, -1.0])
    np.testing.assert_allclose(losses.dqn_next_value(q_target, None), [5.0, 3.0])  # plain max
    reward, discount = tf.constant([1.0, 2.0]), tf.constant([0.9, 0.0])
    target = losses.td_target(reward, discount, losses.dqn_next_value(q_target, q_online))
    np.testing.assert_allclose(target, [1.0 + 0.9 * 1.0, 2.0])


def test_huber_by_hand():
    pred, target = tf.constant([0.5, 3.0, -2.0]), tf.constant([0.0, 0.0, 0.0])
    # 0.5*0.25 ; 3 - 0.5 ; 2 - 0.5
    assert float(losses.huber(pred, target)) == pytest.approx((0.125 + 2.5 + 1.5) / 3)
    assert float(losses.huber(pred, target, tf.constant([2.0, 0.0, 0.0]))) == pytest.approx(0.25 / 3)


def test_linear_schedule():
    assert losses.linear_schedule(1.0, 0.1, 10, 0) == 1.0
    assert losses.linear_schedule(1.0, 0.1, 10, 5) == pytest.approx(0.55)
    assert losses.linear_schedule(1.0, 0.1, 10, 50) == pytest.approx(0.1)


W = 0.1


def tiny_q(input_dim, output_dim, name="q", **kw):
    model = mlp(input_dim, output_dim, hidden=[2], activation="relu", name=name)
    weights = []
    for w in model.get_weights():
        if w.ndim == 2 and w.shape[1] == output_dim:  # output layer: a different weight per action
            w = np.tile(np.arange(1, output_dim + 1, dtype=np.float32) * W, (w.shape[0], 1))
        elif w.ndim == 2:
            w = np.full_like(w, W)
        else:
            w = np.zeros_like(w)
        weights.append(w)
    model.set_weights(weights)
    return model


def q_by_hand(obs, n_actions=3):
    h = np.maximum(W * obs.sum(-1), 0.0)  # both hidden units equal
    return np.stack([2 * h * W * (a + 1) for a in range(n_actions)], axis=-1)


@pytest.mark.parametrize("double", [True, False])
def test_dqn_first_update_by_hand(double):
    agent = DQN(2, 3, tiny_q, np.random.default_rng(0), double=double, loss="mse", max_grad_norm=None)
    batch = Batch(
        obs=np.array([[1.0, 2.0], [3.0, 0.0]], np.float32),
        action=np.array([0, 2], np.int32),
        reward=np.array([1.0, -1.0], np.float32),
        next_obs=np.array([[2.0, 2.0], [0.0, 1.0]], np.float32),
        discount=np.array([0.99, 0.0], np.float32),
        weight=np.ones(2, np.float32),
    )
    next_q = q_by_hand(batch.next_obs)
    # online and target nets start equal, so double and plain DQN agree on the first update
    y = batch.reward + batch.discount * next_q.max(-1)
    q = q_by_hand(batch.obs)[np.arange(2), batch.action]
    m = agent.update(batch)
    assert float(m["target_q"]) == pytest.approx(y.mean(), rel=1e-5)
    assert float(m["loss"]) == pytest.approx(np.mean((q - y) ** 2), rel=1e-5)
    np.testing.assert_allclose(m["td_error"], np.abs(y - q), rtol=1e-5)


@pytest.mark.parametrize("max_grad_norm", [None, 1e-10])
def test_the_gradient_norm_clip_bounds_the_first_step(max_grad_norm):
    """Adam's first step moves each weight by lr * g / (|g| + 1e-8) (PyTorch's, agents.base.adam):
    about lr wherever |g| is far above 1e-8. Clipped to a global norm of 1e-10, no component of g
    exceeds 1e-10, so no weight moves by more than lr * 1e-10 / (1e-10 + 1e-8), a 101st of lr."""
    lr = 1e-3
    agent = DQN(2, 3, tiny_q, np.random.default_rng(0), lr=lr, loss="mse", max_grad_norm=max_grad_norm)
    before = [w.numpy().copy() for w in agent.q.trainable_variables]
    agent.update(Batch(np.array([[1.0, 2.0], [3.0, 0.0]], np.float32), np.array([0, 2], np.int32),
                       np.array([1.0, -1.0], np.float32), np.array([[2.0, 2.0], [0.0, 1.0]], np.float32),
                       np.array([0.99, 0.0], np.float32), np.ones(2, np.float32)))
    step = max(np.abs(w.numpy() - b).max() for w, b in zip(agent.q.trainable_variables, before))
    eps = 1e-8
    if max_grad_norm is None:
        assert step == pytest.approx(lr, rel=1e-3)
    else:
        assert step <= lr * max_grad_norm / (max_grad_norm + eps) * 1.01


def batch(rng, n=16, obs_dim=4, n_actions=3):
    return Batch(rng.normal(size=(n, obs_dim)).astype(np.float32), rng.integers(0, n_actions, n).astype(np.int32),
                 rng.normal(size=n).astype(np.float32), rng.normal(size=(n, obs_dim)).astype(np.float32),
                 np.full(n, 0.99, np.float32), np.ones(n, np.float32))


@pytest.mark.parametrize("network", [mlp, dueling_mlp])
def test_dqn_traced_once_and_hard_target_sync(network):
    net = functools.partial(network, hidden=[8, 8])
    agent = DQN(4, 3, net, np.random.default_rng(0), target_update_every=3)
    learner = compiled(agent)
    rng = np.random.default_rng(1)
    for i in range(1, 7):
        learner.update(one(batch(rng, n=16 + i)))
        same = all(np.array_equal(a, b) for a, b in zip(agent.q.get_weights(), agent.q_target.get_weights()))
        assert same == (i % 3 == 0), i
    assert learner.update_trace_count == 1


def test_dueling_head_combines_value_and_mean_centred_advantage():
    model = dueling_mlp(4, 3, hidden=[8, 8])
    x = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)
    q = model(x).numpy()
    trunk = model.get_layer("dueling_h0")(x)
    v = model.get_layer("dueling_v")(model.get_layer("dueling_v_h")(trunk)).numpy()
    a = model.get_layer("dueling_a")(model.get_layer("dueling_a_h")(trunk)).numpy()
    np.testing.assert_allclose(q, v + a - a.mean(-1, keepdims=True), rtol=1e-5, atol=1e-6)


def test_epsilon_greedy_schedule_and_fast_act():
    agent = DQN(4, 3, functools.partial(mlp, hidden=[8]), np.random.default_rng(0), eps_start=1.0, eps_end=0.0, eps_decay_steps=100)
    slow = DQN(4, 3, functools.partial(mlp, hidden=[8]), np.random.default_rng(0))
    slow.acting.use_numpy(False)
    slow.q.set_weights(agent.q.get_weights())
    obs = np.random.default_rng(1).normal(size=(50, 4)).astype(np.float32)
    np.testing.assert_array_equal(agent.act(obs, explore=False), slow.act(obs, explore=False))
    greedy = agent.act(obs, explore=False)
    assert agent.explore_steps.value == 0
    explored = agent.act(obs, explore=True)  # epsilon 1: uniform random
    assert agent.explore_steps.value == 50 and (explored != greedy).mean() > 0.4
    agent.act(obs, explore=True)
    assert agent.epsilon == 0.0
    np.testing.assert_array_equal(agent.act(obs, explore=True), greedy)


def test_explore_counter_is_checkpointed(tmp_path):
    agent = DQN(4, 3, functools.partial(mlp, hidden=[8]), np.random.default_rng(0))
    agent.act(np.zeros((7, 4), np.float32), explore=True)
    ckpt = tf.train.Checkpoint(**tracked(agent))
    path = ckpt.write(str(tmp_path / "c"))
    other = DQN(4, 3, functools.partial(mlp, hidden=[8]), np.random.default_rng(0))
    tf.train.Checkpoint(**tracked(other)).read(path).assert_consumed()
    assert other.explore_steps.value == 7 and other.epsilon == agent.epsilon


# --- Gridworld -------------------------------------------------------------------------------

def board(env):
    return {k: tuple(v) for k, v in env.pos.items()}


def test_static_layout_and_observation_encoding():
    env = GridworldEnv(mode="static", noise=0.0)
    obs, _ = env.reset(seed=0)
    assert board(env) == {"player": (0, 3), "goal": (0, 0), "pit": (0, 1), "wall": (1, 1)}
    planes = obs.reshape(4, 4, 4)
    assert planes.sum() == 4
    for i, sq in enumerate([(0, 3), (0, 0), (0, 1), (1, 1)]):  # player, goal, pit, wall planes
        assert planes[(i, *sq)] == 1.0
    noisy, _ = GridworldEnv(mode="static", noise=0.1).reset(seed=0)
    assert np.all((noisy - obs >= 0) & (noisy - obs < 0.1)) and not np.array_equal(noisy, obs)


def test_moves_walls_edges_pit_and_goal():
    env = GridworldEnv(mode="static", noise=0.0)
    env.reset(seed=0)
    _, r, term, _, _ = env.step(0)  # up from row 0: off the board, stays
    assert env.pos["player"] == (0, 3) and r == -1 and not term
    _, r, _, _, _ = env.step(3)  # right from column 3: off the board
    assert env.pos["player"] == (0, 3) and r == -1
    env.step(1)  # down to (1,3)
    env.step(2)  # left to (1,2)
    _, r, term, _, _ = env.step(2)  # left into the wall at (1,1): stays
    assert env.pos["player"] == (1, 2) and r == -1 and not term
    env.step(0)  # up to (0,2)
    _, r, term, _, info = env.step(2)  # left into the pit at (0,1)
    assert r == -10 and term and not info["is_success"]
    env.reset(seed=0)
    env.pos["player"] = (1, 0)
    _, r, term, _, info = env.step(0)  # up into the goal at (0,0)
    assert r == 10 and term and info["is_success"]


def test_player_and_random_modes():
    env = GridworldEnv(mode="player")
    starts = set()
    for s in range(60):
        env.reset(seed=s)
        b = board(env)
        assert {k: b[k] for k in ("goal", "pit", "wall")} == {"goal": (0, 0), "pit": (0, 1), "wall": (1, 1)}
        assert b["player"] not in {(0, 0), (0, 1), (1, 1)}
        starts.add(b["player"])
    assert len(starts) >= 10
    env = GridworldEnv(mode="random")
    layouts = set()
    for s in range(60):
        env.reset(seed=s)
        b = board(env)
        assert valid_board(b, 4) and len(set(b.values())) == 4
        layouts.add(tuple(sorted(b.items())))
    assert len(layouts) >= 50


def test_valid_board_requires_a_path_to_the_goal():
    # goal in the corner (0,0), sealed off by the pit (0,1) and the wall (1,0)
    assert not valid_board({"player": (3, 3), "goal": (0, 0), "pit": (0, 1), "wall": (1, 0)}, 4)
    assert valid_board({"player": (3, 3), "goal": (0, 0), "pit": (0, 1), "wall": (1, 1)}, 4)
    assert not valid_board({"player": (0, 0), "goal": (0, 0), "pit": (0, 1), "wall": (1, 1)}, 4)


@pytest.mark.parametrize("kwargs,message", [({"mode": "chaos"}, "mode must be one of"), ({"size": 3}, "size must be")])
def test_gridworld_bad_settings(kwargs, message):
    with pytest.raises(ValueError, match=message):
        GridworldEnv(**kwargs)


def test_fused_dueling_dqn_updates_equal_the_same_updates_one_by_one():
    """Fused updates cross a hard target copy inside the fused call at the same update as one by one,
    with the dueling network (the registry's contract tests run DQN's MLP)."""
    net = functools.partial(dueling_mlp, hidden=[8, 8])
    one_by_one = DQN(4, 3, net, np.random.default_rng(0), target_update_every=3)
    fused = DQN(4, 3, net, np.random.default_rng(0), target_update_every=3)
    fused.q.set_weights(one_by_one.q.get_weights())
    fused.q_target.set_weights(one_by_one.q_target.get_weights())
    fused.acting.refresh()
    learn_one, learn_fused = compiled(one_by_one), compiled(fused)
    rng = np.random.default_rng(1)
    for k in (4, 5):
        batches = [batch(rng) for _ in range(k)]
        for b in batches:
            m_ref = learn_one.update(one(b))
        m_fused = learn_fused.update(stack(batches))
        np.testing.assert_allclose(m_fused["loss"], m_ref["loss"], rtol=1e-5)
        assert m_fused["epsilon"] == m_ref["epsilon"]  # the host-side metric comes with fused updates too
        np.testing.assert_allclose(m_fused["td_error"][-16:], m_ref["td_error"], rtol=1e-5, atol=1e-6)
    for a, b in zip(one_by_one.q_target.get_weights() + one_by_one.q.get_weights(),
                    fused.q_target.get_weights() + fused.q.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    obs = rng.normal(size=(5, 4)).astype(np.float32)
    np.testing.assert_array_equal(fused.act(obs, False), one_by_one.act(obs, False))


@pytest.mark.parametrize("network", [mlp, dueling_mlp])
@pytest.mark.parametrize("double", [True, False])
def test_batch_shards_compute_the_same_dqn_updates(network, double):
    """Sharded: the same loss, clipped gradients, target copies and per-sample TD errors."""
    net = functools.partial(network, hidden=[8, 8])
    whole = DQN(4, 3, net, np.random.default_rng(0), target_update_every=2, double=double)
    sharded = DQN(4, 3, net, np.random.default_rng(0), target_update_every=2, double=double)
    learn_whole, learn_sharded = compiled(whole), compiled(sharded, batch_shards=2)
    sharded.q.set_weights(whole.q.get_weights())
    sharded.q_target.set_weights(whole.q_target.get_weights())
    rng = np.random.default_rng(2)
    for _ in range(5):
        b = batch(rng)
        m_ref, m_sh = learn_whole.update(one(b)), learn_sharded.update(one(b))
        for key in ("loss", "q", "target_q", "td_error"):
            np.testing.assert_allclose(m_sh[key], m_ref[key], rtol=1e-5, atol=1e-6, err_msg=key)
    for a, b in zip(whole.q_target.get_weights() + whole.q.get_weights(),
                    sharded.q_target.get_weights() + sharded.q.get_weights()):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)


def image_batch(rng, n=16, shape=(10, 10, 2), n_actions=3):
    images = lambda: rng.integers(0, 256, (n, *shape)).astype(np.uint8)  # noqa: E731
    return Batch(images(), rng.integers(0, n_actions, n).astype(np.int32), rng.normal(size=n).astype(np.float32),
                 images(), np.full(n, 0.99, np.float32), np.ones(n, np.float32))


@pytest.mark.parametrize("net, obs_shape, make_batch", [
    (functools.partial(mlp, hidden=[8, 8]), 4, batch),
    (functools.partial(dueling_mlp, hidden=[8, 8]), 4, batch),
    (functools.partial(conv_net, convs=[[4, 3, 2], [4, 3, 1]], hidden=[8]), (10, 10, 2), image_batch),
], ids=["mlp", "dueling_mlp", "cnn"])
def test_bfloat16_update_precision_for_dqn(net, obs_shape, make_batch, kernel_dtypes):
    """Every matmul and convolution of the update (forward and backward) in bfloat16, the update
    close to float32's, acting in float32."""
    f32 = DQN(obs_shape, 3, net, np.random.default_rng(0))
    bf16 = DQN(obs_shape, 3, net, np.random.default_rng(0))
    learn_f32, learn_bf16 = compiled(f32), compiled(bf16, update_precision="bfloat16")
    bf16.q.set_weights(f32.q.get_weights())
    bf16.q_target.set_weights(f32.q_target.get_weights())
    assert kernel_dtypes(learn_f32.update_graph()) == {tf.float32}
    assert kernel_dtypes(learn_bf16.update_graph()) == {tf.bfloat16}
    rng = np.random.default_rng(3)
    for _ in range(3):
        b = make_batch(rng)
        m_ref, m_bf = learn_f32.update(one(b)), learn_bf16.update(one(b))
        np.testing.assert_allclose(m_bf["loss"], m_ref["loss"], rtol=0.05)
    obs = make_batch(rng).obs[:5]
    np.testing.assert_allclose(bf16.acting(obs), bf16.q(obs).numpy(), rtol=1e-5, atol=1e-6)
    assert learn_bf16.update_trace_count == 1


def test_greedy_policy_module_acts_like_the_agent_in_this_process():
    agent = DQN(4, 3, functools.partial(mlp, hidden=[8, 8]), np.random.default_rng(0))
    compiled(agent).update(one(batch(np.random.default_rng(3))))
    obs = np.random.default_rng(4).normal(size=(7, 4)).astype(np.float32)
    np.testing.assert_array_equal(PolicyModule(agent)(obs).numpy(), agent.act(obs, explore=False))


def test_greedy_policy_saves_with_a_serving_signature(tmp_path):
    """What evaluate.py export=true writes: the SavedModel's `serving_default` (obs -> action) gives
    the greedy actions, as TF Serving or another language's loader would call it."""
    agent = DQN(4, 3, functools.partial(mlp, hidden=[8, 8]), np.random.default_rng(0))
    compiled(agent).update(one(batch(np.random.default_rng(3))))
    module = PolicyModule(agent)
    tf.saved_model.save(module, str(tmp_path), signatures=module.signatures())
    serve = tf.saved_model.load(str(tmp_path)).signatures["serving_default"]
    obs = np.random.default_rng(4).normal(size=(7, 4)).astype(np.float32)
    np.testing.assert_array_equal(serve(obs=tf.constant(obs))["action"].numpy(), agent.act(obs, explore=False))


def test_evaluation_epsilon_takes_random_actions_at_its_rate_from_its_own_seed():
    from training.evaluation import epsilon_greedy

    space = gym.spaces.Discrete(4)
    greedy = lambda obs: np.int64(3)  # noqa: E731
    assert epsilon_greedy(greedy, space, 0.0, seed=1) is greedy
    policy = epsilon_greedy(greedy, space, 0.25, seed=1)
    actions = np.array([policy(None) for _ in range(4000)])
    assert 0.25 * 0.75 - 0.03 < np.mean(actions != 3) < 0.25 * 0.75 + 0.03  # a random action is 3 a quarter of the time
    again = epsilon_greedy(greedy, space, 0.25, seed=1)
    np.testing.assert_array_equal(actions, [again(None) for _ in range(4000)])


OBS, ACTIONS, N = 3, 4, 32


def make(**kwargs):
    """The one place these tests construct DQN."""
    return DQN(OBS, ACTIONS, builder([8]), np.random.default_rng(0), **kwargs)


def differing_nets_and_batch(agent, seed=1):
    """Give the online and target networks different weights; a batch with some terminal transitions
    and importance weights other than one."""
    rng = np.random.default_rng(seed)
    agent.q.set_weights(random_weights(agent.q, rng))
    agent.q_target.set_weights(random_weights(agent.q_target, rng))
    b = {
        "obs": rng.normal(size=(N, OBS)).astype(np.float32),
        "action": rng.integers(0, ACTIONS, N).astype(np.int32),
        "reward": rng.normal(size=N).astype(np.float32),
        "next_obs": rng.normal(size=(N, OBS)).astype(np.float32),
        "discount": np.where(np.arange(N) % 5 == 4, 0.0, 0.99).astype(np.float32),
        "weight": rng.uniform(0.5, 1.5, N).astype(np.float32),
    }
    return b


@pytest.mark.parametrize("double", [True, False])
def test_dqn_target_by_hand_with_online_and_target_networks_apart(double):
    """double=True: y = r + discount * Q_target(s', argmax_a Q_online(s', a)); double=False:
    y = r + discount * max_a Q_target(s', a). Checked per sample through td_error = |y - Q(s, a)|,
    and as target_q (mean y) and the IS-weighted mse loss. The case is built so that every wrong
    pairing (the online network valuing its own choice, the target network choosing, plain max
    for double or online max for plain) gives another target."""
    agent = make(double=double, loss="mse", max_grad_norm=None, target_update_every=1000)
    b = differing_nets_and_batch(agent)
    online, target = weights_of(agent.q, agent.q_target)
    next_online, next_target = forward(online, b["next_obs"]), forward(target, b["next_obs"])
    rows, live = np.arange(N), b["discount"] > 0
    double_v = next_target[rows, next_online.argmax(1)]
    plain_v, online_max = next_target.max(1), next_online.max(1)
    for a, c in [(double_v, plain_v), (double_v, online_max), (plain_v, online_max)]:
        assert np.abs(a - c)[live].max() > 0.1  # the candidates are told apart
    y = b["reward"] + b["discount"] * (double_v if double else plain_v)
    q = forward(online, b["obs"])[rows, b["action"]]

    m = agent.update(tf_batch(**b))
    np.testing.assert_allclose(np.asarray(m["td_error"]), np.abs(y - q), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(float(m["target_q"]), y.mean(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(float(m["q"]), q.mean(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(float(m["loss"]), np.mean(b["weight"] * (q - y) ** 2), rtol=1e-4, atol=1e-5)


def test_soft_target_update_moves_the_target_by_tau_every_update():
    """tau < 1: after every update the target network is target + tau * (online - target), with the
    online network after that update's step."""
    tau = 0.25
    agent = make(tau=tau, loss="mse")
    b = differing_nets_and_batch(agent, seed=2)
    for _ in range(2):
        (t_before,) = weights_of(agent.q_target)
        agent.update(tf_batch(**b))
        online, t_after = weights_of(agent.q, agent.q_target)
        for t0, o, t1 in zip(t_before, online, t_after, strict=True):
            np.testing.assert_allclose(t1, t0.astype(np.float64) + tau * (o.astype(np.float64) - t0), rtol=1e-5, atol=1e-6)
        assert any(not np.allclose(t0, t1, atol=1e-3) for t0, t1 in zip(t_before, t_after))
