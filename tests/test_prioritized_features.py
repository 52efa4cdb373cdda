"""Proportional prioritized replay with alpha = 0.5 against values computed by hand: how often each
transition is sampled, P(i) = p_i^alpha / sum_k p_k^alpha, and the importance-sampling weights
(N * P(i))^-beta divided by the batch's largest, with beta annealed by the transitions stored.
(alpha = 1, the other tests' value, cannot tell p^alpha from p.)"""
import numpy as np
from scipy import stats

from buffers.prioritized import PrioritizedReplay

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
