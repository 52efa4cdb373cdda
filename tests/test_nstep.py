"""n-step returns by hand: termination and truncation inside the window, several envs and a ring that
wraps, and a cut that ends every env's window at its newest row."""
import numpy as np
import pytest
from helpers import fill

from buffers.prioritized import PrioritizedReplay
from buffers.uniform import UniformReplay

G = 0.9


def n_step_of(buf, idx):
    b = buf._batch(np.asarray(idx), np.ones(len(idx), np.float32))
    return b.reward, b.next_obs[:, 0], b.discount


def test_n_step_returns_by_hand_with_termination_and_truncation():
    # rewards r_i = i + 1; transition 4 terminates an episode, transition 7 is truncated
    buf = UniformReplay(20, 1, 1, G, np.random.default_rng(0), n_step=3)
    fill(buf, 11, terminated_at={4}, truncated_at={7})
    reward, next_obs, discount = n_step_of(buf, [0, 3, 4, 5, 6, 7, 8, 9, 10])
    expected = [
        (1 + G * 2 + G**2 * 3, 2.5, G**3),  # full window
        (4 + G * 5, 4.5, 0.0),              # termination inside the window: no bootstrap
        (5, 4.5, 0.0),                      # the terminal transition itself
        (6 + G * 7 + G**2 * 8, 7.5, G**3),  # truncation at the window's last step: bootstrap
        (7 + G * 8, 7.5, G**2),             # truncation inside: bootstrap from the final obs
        (8, 7.5, G),
        (9 + G * 10 + G**2 * 11, 10.5, G**3),
        (10 + G * 11, 10.5, G**2),          # newest data: the window is cut at the last stored step
        (11, 10.5, G),
    ]
    np.testing.assert_allclose(reward, [e[0] for e in expected], rtol=1e-6)
    np.testing.assert_allclose(next_obs, [e[1] for e in expected])
    np.testing.assert_allclose(discount, [e[2] for e in expected], rtol=1e-6)


def test_n_step_with_vector_envs_follows_each_env_and_wraps():
    buf = UniformReplay(6, 1, 1, G, np.random.default_rng(0), n_step=2)
    # two envs interleaved: env 0 observes 0, 1, 2, ...; env 1 observes 100, 101, ...; 4 steps -> wraps
    for t in range(4):
        buf.add([[t], [100 + t]], [[0], [0]], [t, 100 + t], [[t + 0.5], [100 + t + 0.5]], [False, False], [False, False])
    # rows now: [t2e0, t2e1, t3e0, t3e1, t1e0?...] -> find each by obs
    obs = buf.field("obs")[:, 0]
    row = {int(o): i for i, o in enumerate(obs)}
    reward, next_obs, discount = n_step_of(buf, [row[1], row[101], row[3]])
    np.testing.assert_allclose(reward, [1 + G * 2, 101 + G * 102, 3])
    np.testing.assert_allclose(next_obs, [2.5, 102.5, 3.5])
    np.testing.assert_allclose(discount, [G**2, G**2, G])


@pytest.mark.parametrize("cls", [UniformReplay, PrioritizedReplay])
def test_cut_episodes_ends_every_envs_window_at_its_newest_row(cls):
    """Envs reset between two adds (resume with envs that could not be saved): an n-step window
    must not run from the cut episode into the new one."""
    buf = cls(20, 1, 1, G, np.random.default_rng(0), n_step=3)
    for t in range(3):
        buf.add([[t], [100 + t]], [[0], [0]], [t, 100 + t], [[t + 0.5], [100 + t + 0.5]], [False, False], [False, False])
    buf.cut_episodes()
    for t in range(50, 52):  # the new episodes
        buf.add([[t], [100 + t]], [[0], [0]], [t, 100 + t], [[t + 0.5], [100 + t + 0.5]], [False, False], [False, False])
    obs = buf.field("obs")[:, 0]
    row = {int(o): i for i, o in enumerate(obs)}
    reward, next_obs, discount = n_step_of(buf, [row[1], row[101], row[2], row[50]])
    np.testing.assert_allclose(reward, [1 + G * 2, 101 + G * 102, 2, 50 + G * 51])
    np.testing.assert_allclose(next_obs, [2.5, 102.5, 2.5, 51.5])  # bootstrap from the cut episode's last obs
    np.testing.assert_allclose(discount, [G**2, G**2, G, G**2])
    np.testing.assert_array_equal(buf.field("truncated"), [0, 0, 0, 0, 1, 1, 0, 0, 0, 0])
