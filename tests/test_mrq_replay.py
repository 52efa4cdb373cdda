"""MR.Q's replay as its author's buffer.py samples it: the sampling mask (buffer.mask_horizon) and
batches drawn i.i.d. by priority (buffer.stratified=false), against rows and draws worked out by hand."""
import numpy as np
import pytest
from helpers import two_env_stream

from buffers.prioritized import PrioritizedReplay
from buffers.types import Batch
from buffers.uniform import UniformReplay

H = 5  # the author's mask: max(enc_horizon, Q_horizon)
# per env, its episodes as (length, how it ends): 8 steps cut by a time limit, 3 that terminate, 7 under way
EPISODES = [(8, "truncated"), (3, "terminated"), (7, None)]
# The author's buffer opens row i of an episode once row i + H is added, and all of a terminated
# episode's rows at its end; the last H rows of a truncated episode, and of one under way, stay shut.
OPEN_STEPS = [0, 1, 2] + [8, 9, 10] + [11, 12]


def lap(capacity, rng, mask_horizon=H, stratified=False):
    return PrioritizedReplay(capacity, 1, 1, 0.99, rng, n_step=3, alpha=0.4, min_priority=1.0, importance_weights=False,
                             stratified=stratified, mask_horizon=mask_horizon)


def uniform(capacity, rng, mask_horizon=H):
    return UniformReplay(capacity, 1, 1, 0.99, rng, n_step=3, mask_horizon=mask_horizon)


def add_episodes(buf, num_envs=1, offset=100.0):
    """EPISODES in every env; env e's observation at step t is t + offset * e (rows t * num_envs + e)."""
    t = 0
    for length, end in EPISODES:
        for k in range(length):
            last = k == length - 1
            obs = t + offset * np.arange(num_envs, dtype=np.float32)[:, None]
            buf.add(obs, np.zeros((num_envs, 1)), np.ones(num_envs), obs + 0.5,
                    np.full(num_envs, last and end == "terminated"), np.full(num_envs, last and end == "truncated"))
            t += 1


@pytest.mark.parametrize("make", [uniform, lap])
@pytest.mark.parametrize("num_envs", [1, 2])
def test_the_mask_opens_a_row_once_its_horizon_is_stored_and_draws_only_open_rows(make, num_envs):
    buf = make(200, np.random.default_rng(0))
    add_episodes(buf, num_envs)
    rows = (np.asarray(OPEN_STEPS)[:, None] * num_envs + np.arange(num_envs)).ravel()
    np.testing.assert_array_equal(np.flatnonzero(buf.mask.open), np.sort(rows))
    drawn = buf.sample(3000).obs[:, 0]
    expected = {float(t + 100 * e) for t in OPEN_STEPS for e in range(num_envs)}
    assert set(drawn.tolist()) == expected
    assert set(buf.sample_sequences(3000, H).obs[:, 0].tolist()) == expected
    if make is lap:  # a shut row's leaf holds nothing
        assert np.count_nonzero(buf._tree.get(np.arange(len(buf)))) == len(rows)


def test_without_the_mask_every_stored_row_is_drawn():
    buf = uniform(200, np.random.default_rng(0), mask_horizon=0)
    add_episodes(buf)
    assert buf.mask is None and len(set(buf.sample(3000).obs[:, 0].tolist())) == sum(n for n, _ in EPISODES)


def test_a_row_opens_with_the_priority_it_was_added_with():
    """The author's `priority[ind] = max_priority` at the add: a row shut while the largest priority
    rose opens with the one it had when added, and the largest one is that seen in any update."""
    buf = lap(100, np.random.default_rng(0))
    for t in range(H + 1):  # row 0 opens at the 6th add
        buf.add([[t]], [[0.0]], [1.0], [[t + 0.5]], [False], [False])
    buf.sample(4)
    buf.update_priorities(np.full(4, 9.0))  # the largest priority is now 9
    buf.add([[H + 1.0]], [[0.0]], [1.0], [[H + 1.5]], [False], [False])  # row 1 opens, added at 1
    np.testing.assert_allclose(buf._tree.get(np.array([1, H + 1])), [1.0, 0.0])
    for t in range(H + 2, 2 * H + 2):
        buf.add([[t]], [[0.0]], [1.0], [[t + 0.5]], [False], [False])
    np.testing.assert_allclose(buf._tree.get(np.array([H + 1])), [9.0 ** 0.4])


@pytest.mark.parametrize("make", [uniform, lap])
def test_the_mask_resumes_exactly_and_a_cut_shuts_the_episodes_tail(make):
    """A buffer restored mid-episode opens the same rows as the one never saved; `cut_episodes`
    (envs reset on resume) shuts the cut episode's last rows, as a truncation does, and starts the
    next episode's count."""
    whole, saved = make(200, np.random.default_rng(0)), make(200, np.random.default_rng(0))
    add_episodes(whole, 2)
    add_episodes(saved, 2)
    restored = make(200, np.random.default_rng(0))
    restored.load_state_dict({k: np.array(v) for k, v in saved.state_dict().items()})
    for buf in (whole, restored):
        for t in range(3):
            buf.add(np.full((2, 1), 50.0 + t), np.zeros((2, 1)), np.ones(2), np.full((2, 1), 50.5 + t), [False] * 2, [False] * 2)
    np.testing.assert_array_equal(whole.mask.open, restored.mask.open)
    if make is lap:
        np.testing.assert_array_equal(whole._tree.get(np.arange(200)), restored._tree.get(np.arange(200)))
    with pytest.raises(ValueError, match="sampling mask"):
        make(200, np.random.default_rng(0), mask_horizon=0).load_state_dict(whole.state_dict())

    cut = make(200, np.random.default_rng(0))
    for t in range(8):  # one episode of 8 steps under way: rows 0-2 open
        cut.add([[t]], [[0.0]], [1.0], [[t + 0.5]], [False], [False])
    cut.cut_episodes()
    for t in range(H + 1):  # a new episode: its first row opens at its 6th add; rows 3-7 stay shut
        cut.add([[20.0 + t]], [[0.0]], [1.0], [[20.5 + t]], [False], [False])
    np.testing.assert_array_equal(np.flatnonzero(cut.mask.open), [0, 1, 2, 8])


def test_a_buffer_with_no_open_row_says_what_to_change():
    buf = lap(100, np.random.default_rng(0))
    for t in range(H):
        buf.add([[t]], [[0.0]], [1.0], [[t + 0.5]], [False], [False])
    for draw in (lambda: buf.sample(4), lambda: uniform_after(buf).sample(4)):
        with pytest.raises(ValueError, match="no transition with 5 later steps.*mask_horizon=0"):
            draw()
    with pytest.raises(ValueError, match="mask_horizon must be an integer >= 0"):
        uniform(10, np.random.default_rng(0), mask_horizon=-1)


def uniform_after(buf):
    other = uniform(100, np.random.default_rng(0))
    other.load_state_dict(buf.state_dict() | {"data": buf.state_dict()["data"]})
    return other


@pytest.mark.parametrize("stratified", [True, False])
def test_batches_drawn_iid_by_priority_or_stratified(stratified):
    """stratified=false (MR.Q's author, torch.searchsorted(cumsum, rand * total)): each index is the
    row where a uniform draw times the total mass lands, the draws independent; stratified (Schaul
    et al.): the i-th draw from the i-th of B equal slices of the mass, so rows of priority 1 and 3
    fill a batch of 4 once and three times, every time."""
    buf = lap(8, np.random.default_rng(7), mask_horizon=0, stratified=stratified)
    for t in range(2):
        buf.add([[t]], [[0.0]], [1.0], [[t + 0.5]], [False], [False])
    buf._tree.set(np.arange(2), np.array([1.0, 3.0]))
    uniforms = np.random.default_rng(7).random(4 * 50)
    counts = []
    for j in range(50):
        drawn = buf.sample(4).obs[:, 0]
        counts.append(int((drawn == 0).sum()))
        u = uniforms[4 * j: 4 * j + 4]
        values = (np.arange(4) + u) * 1.0 if stratified else u * 4.0
        np.testing.assert_array_equal(drawn, (values >= 1.0).astype(np.float32))
    assert set(counts) == {1} if stratified else len(set(counts)) > 2
    with pytest.raises(ValueError, match="stratified must be true or false"):
        lap(8, np.random.default_rng(0), stratified="no")


@pytest.mark.parametrize("as_tensors", [False, True])
def test_mrqs_inputs_map_every_observation_of_the_batch_and_the_runs(as_tensors):
    """MR.Q's update takes a batch of transitions and runs of `horizon` steps: normalization and
    random shifts (`map_obs`) reach obs and next_obs of both, every step of the runs' next_obs,
    and leave the rest as it was (numpy on the host, tensors in the graph)."""
    import tensorflow as tf

    from agents.mrq.replay import RunsBatch, TransitionsAndRuns
    from buffers.types import Sequences

    rng = np.random.default_rng(0)
    b, horizon, shape = 3, 2, (4, 4, 2)
    obs = lambda *lead: rng.integers(0, 200, (*lead, *shape)).astype(np.uint8)  # noqa: E731
    batch = RunsBatch(
        batch=Batch(obs(b), np.arange(b, dtype=np.int64), np.ones(b, np.float32), obs(b), np.ones(b, np.float32),
                    np.ones(b, np.float32)),
        runs=Sequences(obs(b), np.zeros((b, horizon), np.int64), np.ones((b, horizon), np.float32), obs(b, horizon),
                       np.zeros((b, horizon), np.float32)),
        reward_scale=np.float32(1.0), terminates=np.float32(0.0))
    given = tf.nest.map_structure(tf.constant, batch) if as_tensors else batch

    def plus_one(x):
        assert len(x.shape) == 4, "a batch of images (B, H, W, C), as the shift takes them"
        return x + 1

    mapped = tf.nest.map_structure(np.asarray, TransitionsAndRuns(horizon=horizon, n_step=1).map_obs(given, plus_one))
    for name, before, after in (("obs", batch.batch.obs, mapped.batch.obs),
                                ("next_obs", batch.batch.next_obs, mapped.batch.next_obs),
                                ("runs.obs", batch.runs.obs, mapped.runs.obs),
                                ("runs.next_obs", batch.runs.next_obs, mapped.runs.next_obs)):
        np.testing.assert_array_equal(after, before + 1, err_msg=name)
    for before, after in ((batch.batch.action, mapped.batch.action), (batch.runs.action, mapped.runs.action),
                          (batch.runs.reward, mapped.runs.reward)):
        np.testing.assert_array_equal(after, before)


@pytest.mark.parametrize("terminal", [True, False])
def test_mrq_draws_carry_the_buffers_reward_scale_and_termination_flag(terminal):
    """Each of the K updates a draw feeds gets the buffer's mean absolute reward and whether it holds
    a termination: rewards 0..5 (env 0) and 10..15 (env 1), |r| averaging (15 + 75) / 12 = 7.5."""
    from agents.mrq.replay import Runs, ScaledTransitions, TransitionsAndRuns

    buf = UniformReplay(64, 1, 1, 0.9, np.random.default_rng(0), n_step=2)
    if terminal:
        two_env_stream(buf)
    else:
        for t in range(6):
            v = np.array([t, 10 + t], np.float32)
            buf.add(v[:, None], -v[:, None], v, v[:, None] + 0.5, [False, False], [False, t == 2])
    drawn = TransitionsAndRuns(horizon=3, n_step=2).draw(buf, 4, 2)
    np.testing.assert_array_equal(drawn.reward_scale, [7.5, 7.5])
    np.testing.assert_array_equal(drawn.terminates, [float(terminal)] * 2)
    assert drawn.runs.reward.shape == (2, 4, 3) and drawn.batch.reward.shape == (2, 4)
    # the author's encoder schedule: the scale with each update's transitions, the flag with each block's runs
    scaled, runs = ScaledTransitions(horizon=3, n_step=2).draw(buf, 4, 2), Runs(horizon=3).draw(buf, 4, 2)
    np.testing.assert_array_equal(scaled.reward_scale, [7.5, 7.5])
    np.testing.assert_array_equal(runs.terminates, [float(terminal)] * 2)
    assert runs.runs.reward.shape == (2, 4, 3) and scaled.batch.reward.shape == (2, 4)
