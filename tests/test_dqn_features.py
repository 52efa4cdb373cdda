"""DQN's own features against values computed by hand in numpy: Double DQN's target (the online
network picks the next action, the target network values it) and plain DQN's max over the
target network, with the online and target networks holding different weights; Polyak averaging
of the target network with tau < 1."""
import numpy as np
import pytest

from agents.dqn import DQN
from hand_nets import builder, forward, random_weights, tf_batch, weights_of

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
