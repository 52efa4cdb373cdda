"""Prioritized replay: the sum tree against brute force, sampling frequencies and importance weights
(with alpha = 1, and with alpha = 0.5 against values computed by hand: P(i) = p_i^alpha / sum_k
p_k^alpha, weights (N * P(i))^-beta over the batch's largest, beta annealed by the transitions
stored; alpha = 1 cannot tell p^alpha from p), the largest priority for new rows, fused batches."""
import numpy as np
import pytest
from helpers import fill
from scipy import stats

from buffers.prioritized import PrioritizedReplay
from buffers.sum_tree import SumTree


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


ALPHA, BETA0, BETA_STEPS, EPS = 0.5, 0.4, 16, 1e-6


PRIORITY = np.array([0.25, 1.0, 2.25, 4.0, 6.25, 9.0, 0.01, 16.0])  # |TD error| + eps of transitions 0..7


PROB = np.sqrt(PRIORITY) / np.sqrt(PRIORITY).sum()  # (0.5, 1, 1.5, 2, 2.5, 3, 0.1, 4) / 14.6


BETA = BETA0 + (1.0 - BETA0) * len(PRIORITY) / BETA_STEPS  # 8 of 16 stored: 0.7


def prioritized_buffer(seed):
    """8 transitions (obs i for transition i) in a buffer of 16, with priorities PRIORITY set
    through the public API: the first stratified batch of 8 over 8 equal priorities holds each
    transition once, and update_priorities gives it |TD error| = PRIORITY - eps."""
    buf = PrioritizedReplay(16, 1, 1, 0.99, np.random.default_rng(seed), alpha=ALPHA, beta=BETA0,
                            beta_steps=BETA_STEPS, eps=EPS)
    for i in range(len(PRIORITY)):
        buf.add([[float(i)]], [[0.0]], [0.0], [[i + 0.5]], [False], [False])
    idx = buf.sample(8).obs[:, 0].astype(int)
    np.testing.assert_array_equal(np.sort(idx), np.arange(8))
    buf.update_priorities(-(PRIORITY[idx] - EPS))  # the sign of a TD error does not count
    return buf


def test_sampling_frequencies_follow_priorities_to_the_power_alpha():
    """40000 draws (5000 batches of 8) against P(i): chi-square with 7 degrees of freedom below its
    0.999 quantile (seeded, so the outcome is fixed; stratified batches only lower the statistic).
    With p instead of p^0.5 the statistic runs into the thousands."""
    buf = prioritized_buffer(seed=0)
    counts = np.zeros(len(PRIORITY))
    for _ in range(5000):
        counts += np.bincount(buf.sample(8).obs[:, 0].astype(int), minlength=len(PRIORITY))
    expected = PROB * counts.sum()
    chi2 = np.sum((counts - expected) ** 2 / expected)
    assert chi2 < stats.chi2.ppf(0.999, df=len(PRIORITY) - 1), (chi2, counts / counts.sum(), PROB)


def test_importance_weights_are_n_p_to_the_minus_beta_over_the_batch_max():
    """Every batch's weights are (N * P(i))^-beta / max over the batch, with N = 8 transitions
    stored, P(i) as above and beta annealed to 0.4 + 0.6 * 8/16 = 0.7."""
    buf = prioritized_buffer(seed=1)
    assert len(buf) == 8
    for _ in range(200):
        batch = buf.sample(8)
        raw = (len(PRIORITY) * PROB[batch.obs[:, 0].astype(int)]) ** -BETA
        np.testing.assert_allclose(batch.weight, raw / raw.max(), rtol=1e-5)
