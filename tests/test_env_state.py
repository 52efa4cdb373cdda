"""The training envs in a checkpoint: restored mid-episode, they go on exactly as if never saved."""
import numpy as np
import pytest

from envs.factory import make_vector_env
from envs.state import dump_envs, load_envs


def rollout(envs, actions):
    out = []
    for a in actions:
        obs, reward, terminated, truncated, _ = envs.step(a)
        out.append((obs.copy(), reward.copy(), terminated.copy(), truncated.copy()))
    return out


@pytest.mark.parametrize("env_id", ["Ant-v5", "Hopper-v5", "Pendulum-v1"])
def test_restored_envs_continue_exactly(env_id):
    envs = make_vector_env(env_id, 2, seed=3)
    envs.reset(seed=3)
    rng = np.random.default_rng(0)
    rollout(envs, [envs.action_space.sample() for _ in range(7)])  # mid-episode
    blob = dump_envs(envs)
    actions = [rng.uniform(envs.action_space.low, envs.action_space.high).astype(np.float32) for _ in range(40)]
    after = rollout(envs, actions)
    first_reset = envs.reset()[0]  # unseeded: from each env's own RNG
    restored = load_envs(blob)
    again = rollout(restored, actions)
    for (o1, r1, te1, tr1), (o2, r2, te2, tr2) in zip(after, again):
        np.testing.assert_array_equal(o1, o2)
        np.testing.assert_array_equal(r1, r2)
        np.testing.assert_array_equal(te1, te2)
        np.testing.assert_array_equal(tr1, tr2)
    np.testing.assert_array_equal(first_reset, restored.reset()[0])
    envs.close()
    restored.close()


def test_async_envs_are_not_saved():
    envs = make_vector_env("Pendulum-v1", 2, seed=0, vectorization="async")
    try:
        assert dump_envs(envs) is None
    finally:
        envs.close()


def test_vector_episode_statistics_count_every_episode_in_full():
    """With same-step autoreset every episode after the first starts on a real step; gymnasium
    before 1.4 dropped that step from the episode statistics (Pendulum's episodes read 199 steps)."""
    envs = make_vector_env("Pendulum-v1", 2, seed=0)
    envs.reset(seed=0)
    lengths, returns = [], []
    for _ in range(600):
        _, reward, _, _, infos = envs.step(envs.action_space.sample())
        if "episode" in infos:
            lengths += [int(x) for x in infos["episode"]["l"][infos["_episode"]]]
            returns += [float(x) for x in infos["episode"]["r"][infos["_episode"]]]
    envs.close()
    assert lengths == [200] * 6
    assert all(r < 0 for r in returns)
