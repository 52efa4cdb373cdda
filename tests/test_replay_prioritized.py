"""Sum tree against brute force, prioritized sampling frequencies, n-step returns by hand."""
import numpy as np
import pytest

from buffers.prioritized import PrioritizedReplay
from buffers.sum_tree import SumTree
from buffers.uniform import UniformReplay


@pytest.mark.parametrize("capacity", [1, 5, 8, 100, 1000])
def test_sum_tree_total_and_find_match_brute_force(capacity):
    rng = np.random.default_rng(capacity)
    tree = SumTree(capacity)
    pri = rng.random(capacity) * rng.integers(0, 2, capacity)  # some zeros
    pri[0] = max(pri[0], 0.1)
    tree.set(np.arange(capacity), pri)
    assert tree.total == pytest.approx(pri.sum())
    np.testing.assert_allclose(tree.get(np.arange(capacity)), pri)
    values = rng.random(500) * pri.sum()
    brute = np.searchsorted(np.cumsum(pri), values, side="right")
    np.testing.assert_array_equal(tree.find(values), brute)
    # partial updates with duplicate indices: the last value wins, sums stay exact
    idx = rng.integers(0, capacity, 50)
    new = rng.random(50)
    tree.set(idx, new)
    for i, p in zip(idx, new):
        pri[i] = p
    assert tree.total == pytest.approx(pri.sum())
    assert set(tree.find(rng.random(200) * tree.total)) <= set(np.flatnonzero(pri > 0))


def test_sum_tree_sampling_frequencies_follow_priorities():
    tree = SumTree(6)
    pri = np.array([1.0, 0.0, 2.0, 3.0, 0.5, 3.5])
    tree.set(np.arange(6), pri)
    draws = tree.find(np.random.default_rng(0).random(200_000) * tree.total)
    freq = np.bincount(draws, minlength=6) / draws.size
    np.testing.assert_allclose(freq, pri / pri.sum(), atol=0.005)


def fill(buf, n, terminated_at=(), truncated_at=()):
    for i in range(n):
        buf.add([[float(i)]], [[0.0]], [float(i + 1)], [[i + 0.5]], [i in terminated_at], [i in truncated_at])


def test_prioritized_sampling_and_importance_weights():
    buf = PrioritizedReplay(8, 1, 1, 0.99, np.random.default_rng(0), alpha=1.0, beta=0.5, beta_steps=0)
    fill(buf, 4)
    batch = buf.sample(4)
    np.testing.assert_allclose(batch.weight, 1.0)  # new transitions all get the max priority
    buf.last_indices = np.arange(4)
    buf.update_priorities(np.array([1.0, 2.0, 3.0, 4.0]) - 1e-6)  # priorities 1..4
    counts = np.zeros(4)
    for _ in range(3000):
        b = buf.sample(8)
        counts += np.bincount(b.obs[:, 0].astype(int), minlength=4)
        # weight (N P(i))^-beta / max: with beta 1 (beta_steps=0), proportional to 1/p
        p = b.obs[:, 0] + 1.0
        np.testing.assert_allclose(b.weight, (1 / p) / (1 / p).max(), rtol=1e-5)
    np.testing.assert_allclose(counts / counts.sum(), np.arange(1, 5) / 10, atol=0.01)
    state = buf.state_dict()
    fresh = PrioritizedReplay(8, 1, 1, 0.99, np.random.default_rng(0), alpha=1.0, beta=0.5, beta_steps=0)
    fresh.load_state_dict(state)
    np.testing.assert_allclose(fresh._tree.get(np.arange(4)), [1, 2, 3, 4], rtol=1e-5)


def test_new_transitions_get_the_largest_priority_yet_seen():
    """Schaul et al.: a new transition is stored at the largest priority so far, to the power alpha
    (not at 1, and not lowered by later, smaller TD errors)."""
    buf = PrioritizedReplay(8, 1, 1, 0.99, np.random.default_rng(0), alpha=0.5, beta=0.5, beta_steps=0, eps=0.01)
    fill(buf, 4)
    buf.sample(4)
    buf.last_indices = np.arange(4)
    buf.update_priorities(np.array([3.0, -8.0, 0.5, 1.0]))  # |TD error| + eps: largest 8.01
    fill(buf, 1)
    assert buf._tree.get(np.array([4]))[0] == pytest.approx(8.01**0.5, rel=1e-6)
    buf.last_indices = np.arange(5)
    buf.update_priorities(np.full(5, 0.1))
    fill(buf, 1)
    np.testing.assert_allclose(buf._tree.get(np.arange(6)), [0.11**0.5] * 5 + [8.01**0.5], rtol=1e-6)


def test_beta_anneals_to_one_over_the_transitions_stored_not_the_batches_drawn():
    buf = PrioritizedReplay(16, 1, 1, 0.99, np.random.default_rng(0), beta=0.4, beta_steps=10)
    assert buf.beta == pytest.approx(0.4)
    fill(buf, 5)
    assert buf.beta == pytest.approx(0.7)
    buf.sample(2)
    buf.sample_batches(2, 8)  # however many batches are drawn, the clock is the env steps
    assert buf.beta == pytest.approx(0.7)
    fill(buf, 20)
    assert buf.beta == 1.0
    fresh = PrioritizedReplay(16, 1, 1, 0.99, np.random.default_rng(0), beta=0.4, beta_steps=100)
    fresh.load_state_dict(buf.state_dict())
    assert fresh.beta == pytest.approx(0.4 + 0.25 * 0.6)  # the clock is saved and restored
    state = buf.state_dict()
    del state["stored"]  # saved before the clock counted stored transitions: what the buffer holds
    fresh.load_state_dict(state)
    assert fresh.beta == pytest.approx(0.4 + 0.16 * 0.6)


def test_fused_batches_each_cover_the_whole_priority_mass():
    """The n batches of a fused phase are n batches as sample() draws them, each stratified over
    all of the buffer (not n slices of one stratified draw of n*B) and weighted by its own max."""
    def filled(seed):
        buf = PrioritizedReplay(1000, 1, 1, 0.99, np.random.default_rng(seed), alpha=1.0, beta=0.5, beta_steps=0)
        fill(buf, 1000)
        buf.last_indices = np.arange(1000)
        buf.update_priorities(1.0 + np.arange(1000) % 7)
        return buf

    fused, one_by_one = filled(3), filled(3)
    batches = fused.sample_batches(64, 4)
    assert batches.obs.shape == (4, 64, 1) and batches.weight.shape == (4, 64)
    for j in range(4):
        single = one_by_one.sample(64)  # no priority changes in between: the same draws
        np.testing.assert_array_equal(batches.obs[j], single.obs)
        np.testing.assert_array_equal(batches.weight[j], single.weight)
        assert batches.obs[j].min() < 50 and batches.obs[j].max() > 950
        assert batches.weight[j].max() == 1.0
    assert fused.last_indices.shape == (256,)
    before = fused._tree.get(np.arange(1000)).copy()
    td = -np.linspace(0.5, 10.0, 256).reshape(4, 64)  # the fused update's TD errors, one per sample, batch by batch
    fused.update_priorities(td)
    # each sample's transition gets |TD error| + eps (alpha 1); one drawn in two batches keeps the
    # later batch's, as K updates one after the other would leave it; the others keep theirs
    expected = before.copy()
    for j, i in np.ndindex(4, 64):
        expected[int(batches.obs[j, i, 0])] = abs(td[j, i]) + 1e-6
    assert len(np.unique(batches.obs)) < 256  # some transitions were drawn in two batches
    np.testing.assert_allclose(fused._tree.get(np.arange(1000)), expected, rtol=1e-12)
    assert fused._tree.total == pytest.approx(expected.sum(), rel=1e-12)
    assert fused.state_dict()["max_priority"] == pytest.approx(10.0 + 1e-6)


@pytest.mark.parametrize("kwargs,message", [({"alpha": -0.1}, "alpha"), ({"beta": 1.5}, "beta"), ({"n_step": 0}, "n_step")])
def test_bad_prioritized_settings(kwargs, message):
    with pytest.raises(ValueError, match=message):
        PrioritizedReplay(8, 1, 1, 0.99, np.random.default_rng(0), **kwargs)


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
