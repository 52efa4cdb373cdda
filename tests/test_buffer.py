import os
import subprocess
import sys

import numpy as np
import pytest
from helpers import two_env_stream

from buffers.uniform import UniformReplay
from envs.factory import make_vector_env, transition_next_obs


def filled(capacity=5, n=7, obs_dim=2, action_dim=1, gamma=0.9):
    buf = UniformReplay(capacity, obs_dim, action_dim, gamma, np.random.default_rng(0))
    for i in range(n):
        buf.add(np.full((1, obs_dim), i), np.full((1, action_dim), -i), [i * 10.0], np.full((1, obs_dim), i + 0.5), [i == 3], [i == 4])
    return buf


def test_ring_buffer_wraps_around_and_overwrites_oldest():
    buf = filled(capacity=5, n=7)
    assert len(buf) == 5
    # rows 0 and 1 were overwritten by transitions 5 and 6; cursor points at row 2 (oldest)
    np.testing.assert_array_equal(buf.field("obs")[:, 0], [5, 6, 2, 3, 4])
    np.testing.assert_array_equal(buf.field("reward"), [50, 60, 20, 30, 40])
    assert buf.state_dict()["cursor"] == 2


def test_partial_fill_and_vector_add_across_the_end():
    buf = UniformReplay(4, 1, 1, 0.99, np.random.default_rng(0))
    assert len(buf) == 0
    buf.add(np.array([[1.0], [2.0], [3.0]]), np.zeros((3, 1)), np.zeros(3), np.zeros((3, 1)), np.zeros(3), np.zeros(3))
    assert len(buf) == 3
    buf.add(np.array([[4.0], [5.0]]), np.zeros((2, 1)), np.zeros(2), np.zeros((2, 1)), np.zeros(2), np.zeros(2))
    assert len(buf) == 4
    np.testing.assert_array_equal(buf.field("obs")[:, 0], [5, 2, 3, 4])


def test_truncation_keeps_the_discount_termination_zeroes_it():
    buf = filled(capacity=10, n=7, gamma=0.9)
    batch = buf._batch(np.arange(7), np.ones(7, np.float32))  # every stored row, as sampled
    rows = dict(zip(batch.obs[:, 0].astype(int), batch.discount))
    assert rows[3] == 0.0  # terminated
    assert rows[4] == pytest.approx(0.9)  # truncated: still bootstraps
    assert rows[0] == pytest.approx(0.9)
    np.testing.assert_array_equal(buf.field("terminated"), [0, 0, 0, 1, 0, 0, 0])
    np.testing.assert_array_equal(buf.field("truncated"), [0, 0, 0, 0, 1, 0, 0])


def test_sample_shapes_types_and_rng_reproducibility():
    a, b = filled(capacity=50, n=40), filled(capacity=50, n=40)
    s1, s2 = a.sample(16), b.sample(16)
    for x, y in zip(s1, s2):
        np.testing.assert_array_equal(x, y)
    assert s1.obs.shape == (16, 2) and s1.action.shape == (16, 1) and s1.reward.shape == (16,)
    assert all(x.dtype == np.float32 and x.flags.c_contiguous for x in s1)
    # next_obs is the stored next observation of the same transition
    np.testing.assert_allclose(s1.next_obs, s1.obs + 0.5)


def test_discrete_actions_come_back_as_int32():
    buf = UniformReplay(10, 2, 1, 0.99, np.random.default_rng(0), discrete_actions=True)
    buf.add(np.zeros((2, 2)), np.array([3, 1]), np.zeros(2), np.zeros((2, 2)), np.zeros(2), np.zeros(2))
    batch = buf.sample(8)
    assert batch.action.dtype == np.int32 and batch.action.shape == (8,)
    assert set(batch.action.tolist()) <= {1, 3}


def test_state_dict_round_trip_restores_data_cursor_and_full_flag():
    buf = filled(capacity=5, n=7)
    state = buf.state_dict()
    fresh = UniformReplay(5, 2, 1, 0.9, np.random.default_rng(0))
    fresh.load_state_dict(state)
    assert len(fresh) == 5
    np.testing.assert_array_equal(fresh._data, buf._data)
    # the next add goes where the saved buffer's would
    for b in (buf, fresh):
        b.add(np.full((1, 2), 99), [[0]], [0], np.zeros((1, 2)), [0], [0])
    np.testing.assert_array_equal(fresh._data, buf._data)
    with pytest.raises(ValueError, match="capacity"):
        UniformReplay(6, 2, 1, 0.9, np.random.default_rng(0)).load_state_dict(state)


def test_vector_env_truncation_stores_the_final_observation_not_the_reset_one():
    """With same-step autoreset the step that ends an episode returns the next episode's first
    observation; the buffer must get the old episode's last one, flagged truncated, not terminated."""
    envs = make_vector_env("Pendulum-v1", num_envs=2, seed=0, max_episode_steps=5)
    buf = UniformReplay(100, 3, 1, 0.99, np.random.default_rng(0))
    obs, _ = envs.reset(seed=0)
    for t in range(5):
        action = envs.action_space.sample()
        next_obs, reward, term, trunc, infos = envs.step(action)
        real_next = transition_next_obs(next_obs, infos, term | trunc)
        buf.add(obs, action, reward, real_next, term, trunc)
        if t < 4:
            np.testing.assert_array_equal(real_next, next_obs)
        obs = next_obs
    assert trunc.all() and not term.any()
    last = slice(8, 10)
    np.testing.assert_array_equal(buf.field("truncated")[last], [1, 1])
    np.testing.assert_array_equal(buf.field("terminated")[last], [0, 0])
    np.testing.assert_allclose(buf.field("next_obs")[last], np.stack(infos["final_obs"]))
    assert not np.allclose(buf.field("next_obs")[last], next_obs)  # not the reset observation
    # consecutive transitions chain: next_obs of step t is obs of step t+1 within the episode
    np.testing.assert_allclose(buf.field("next_obs")[0:8], buf.field("obs")[2:10])
    envs.close()


_RESTORE_IN_A_FRESH_PROCESS = """
import sys
import numpy as np
from buffers.uniform import UniformReplay
from training.checkpoints import npz_arrays
capacity, obs_dim = int(sys.argv[2]), int(sys.argv[3])
buf = UniformReplay(capacity, obs_dim, 8, 0.99, np.random.default_rng(0))
def peak_mb():  # VmHWM: this process's peak resident memory (ru_maxrss keeps the parent's peak across exec)
    return int(next(l for l in open("/proc/self/status") if l.startswith("VmHWM")).split()[1]) / 1024
before = peak_mb()
state = npz_arrays(sys.argv[1])
buf.load_state_dict(state)
del state
print(peak_mb() - before, float(buf.field("obs").sum(dtype=np.float64)), len(buf))
"""


def test_restoring_a_saved_buffer_holds_it_once_in_memory(tmp_path):
    """A resume reads the checkpoint's buffer.npz into a buffer whose rows are preallocated. The
    peak resident memory of that read must grow by about the buffer's size, not twice it (np.load
    reads the whole array before it is copied into place; mapped file pages count too)."""
    capacity, obs_dim = 60_000, 200
    buf = UniformReplay(capacity, obs_dim, 8, 0.99, np.random.default_rng(0))
    rng = np.random.default_rng(1)
    for _ in range(capacity // 1000):
        buf.add(rng.random((1000, obs_dim)), rng.random((1000, 8)), rng.random(1000),
                rng.random((1000, obs_dim)), np.zeros(1000), np.zeros(1000))
    state = buf.state_dict()
    size_mb = state["data"].nbytes / 2**20
    np.savez(tmp_path / "buffer.npz", **state)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, "-c", _RESTORE_IN_A_FRESH_PROCESS, str(tmp_path / "buffer.npz"),
                          str(capacity), str(obs_dim)], cwd=root, capture_output=True, text=True, check=True)
    grown_mb, obs_sum, rows = out.stdout.split()
    assert int(rows) == capacity
    assert float(obs_sum) == pytest.approx(float(buf.field("obs").sum(dtype=np.float64)), rel=1e-12)
    assert 0.9 * size_mb < float(grown_mb) < 1.3 * size_mb, (grown_mb, size_mb)  # copied 16 MB at a time


@pytest.mark.parametrize("chunk_rows", [1, 3, 7, 100])
def test_copy_rows_from_a_mapped_checkpoint_fills_a_partly_full_buffer(tmp_path, chunk_rows):
    from buffers.types import copy_rows
    from training.checkpoints import npz_arrays

    saved = filled(capacity=10, n=7, obs_dim=3)
    np.savez(tmp_path / "buffer.npz", **saved.state_dict())
    state = npz_arrays(str(tmp_path / "buffer.npz"), map_from_bytes=0)
    assert isinstance(state["data"], np.memmap)  # large arrays come mapped, not read
    restored = UniformReplay(10, 3, 1, 0.9, np.random.default_rng(0))
    copy_rows(restored._data, state["data"], chunk_bytes=chunk_rows * state["data"][:1].nbytes)
    np.testing.assert_array_equal(restored._data[:7], saved._data[:7])
    assert not restored._data[7:].any()
    restored.load_state_dict(state)
    assert len(restored) == 7 and restored.state_dict()["cursor"] == saved.state_dict()["cursor"]
    np.testing.assert_array_equal(restored.field("next_obs"), saved.field("next_obs"))


@pytest.mark.parametrize("prioritized", [False, True])
def test_sequences_start_only_where_a_whole_run_is_stored(prioritized):
    from buffers.prioritized import PrioritizedReplay

    rng = np.random.default_rng(0)
    buf = PrioritizedReplay(64, 1, 1, 0.9, rng, alpha=0.4, min_priority=1.0) if prioritized else UniformReplay(64, 1, 1, 0.9, rng)
    two_env_stream(buf)
    # rows 2t + e. Env 0: runs of 3 from t=0..3 are whole (one that reaches t=3's termination needs
    # nothing after it); from t=4, 5 they would run past the newest row. Env 1: from t=0 the cut is
    # the last step (whole); from t=1, 2 the run crosses the cut; from t=3 whole.
    np.testing.assert_array_equal(buf.whole_runs(np.arange(12), 3), [1, 1, 1, 0, 1, 0, 1, 1, 0, 0, 0, 0])
    seq = buf.sample_sequences(400, 3)
    start = seq.obs[:, 0]
    assert set(start.tolist()) == {0.0, 1.0, 2.0, 3.0, 10.0, 13.0}
    steps = start[:, None] + np.arange(3)  # the stored transitions that follow, whatever their episode
    np.testing.assert_array_equal(seq.action[..., 0], -steps)
    np.testing.assert_array_equal(seq.reward, steps)
    np.testing.assert_array_equal(seq.next_obs[..., 0], steps + 0.5)
    np.testing.assert_array_equal(seq.terminated, steps == 3)
    assert seq.action.shape == (400, 3, 1) and seq.next_obs.shape == (400, 3, 1) and seq.obs.shape == (400, 1)


def test_sequences_follow_the_priorities_and_leave_them_as_they_are():
    from buffers.prioritized import PrioritizedReplay

    buf = PrioritizedReplay(64, 1, 1, 0.9, np.random.default_rng(0), alpha=1.0, min_priority=1.0)
    two_env_stream(buf)
    buf.sample(12)
    buf.update_priorities(np.array([1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 100.0]))  # the last sampled row: 100x
    heavy = buf.last_indices[-1]
    before = buf._tree.get(np.arange(12)).copy()
    seq = buf.sample_sequences(2000, 3)
    np.testing.assert_array_equal(buf._tree.get(np.arange(12)), before)
    starts = seq.obs[:, 0]
    if buf.whole_runs(np.array([heavy]), 3)[0]:  # a whole run: drawn about 100x as often as each other one
        value = buf.field("obs")[heavy, 0]
        assert np.mean(starts == value) > 0.9
    else:  # not whole: never drawn, however heavy
        assert set(starts.tolist()) == {0.0, 1.0, 2.0, 3.0, 10.0, 13.0}


def test_sequences_of_discrete_actions_and_a_buffer_with_no_whole_run():
    buf = UniformReplay(64, 1, 1, 0.9, np.random.default_rng(0), discrete_actions=True)
    two_env_stream(buf)
    seq = buf.sample_sequences(8, 2)
    assert seq.action.dtype == np.int32 and seq.action.shape == (8, 2)
    short = UniformReplay(64, 1, 1, 0.9, np.random.default_rng(0))
    for t in range(4):  # one episode of 4 steps so far: no run of 5 is stored
        short.add([[t]], [[0.0]], [1.0], [[t + 1]], [False], [False])
    with pytest.raises(ValueError, match="too few whole runs of 5 steps"):
        short.sample_sequences(8, 5)


def test_mean_absolute_reward_follows_the_rows_the_ring_holds():
    """MR.Q's reward scale: over the stored rows only, as the ring overwrites them, and kept whole
    through a save and restore."""
    buf = UniformReplay(4, 1, 1, 0.9, np.random.default_rng(0))
    for r, t in [(1, False), (-2, False), (3, True)]:
        buf.add([[0]], [[0]], [r], [[0]], [t], [False])
    assert (buf.mean_abs_reward(), buf.any_terminated()) == (2.0, True)
    for r in (-4, 5):  # the second overwrites the first row (1)
        buf.add([[0]], [[0]], [r], [[0]], [False], [False])
    assert buf.mean_abs_reward() == (2 + 3 + 4 + 5) / 4
    restored = UniformReplay(4, 1, 1, 0.9, np.random.default_rng(0))
    restored.load_state_dict(buf.state_dict())
    assert restored.mean_abs_reward() == 3.5 and restored.any_terminated()


def test_a_termination_added_after_the_statistics_are_kept_is_counted():
    """MR.Q learns to predict terminations from the first one the buffer holds: the flag, kept from
    the rows stored when it was first read, follows every add after."""
    buf = UniformReplay(8, 1, 1, 0.9, np.random.default_rng(0))
    buf.add([[0]], [[0]], [1.0], [[0]], [False], [True])  # a time limit is not a termination
    assert not buf.any_terminated()
    buf.add([[0]], [[0]], [1.0], [[0]], [False], [False])
    assert not buf.any_terminated()
    buf.add([[0]], [[0]], [1.0], [[0]], [True], [False])
    assert buf.any_terminated()
