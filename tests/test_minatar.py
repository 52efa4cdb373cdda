"""MinAtar's env: observations are the game's channels, as bytes."""
import numpy as np

from envs.factory import make_env


def test_minatar_observations_are_the_game_channels_as_bytes():
    env = make_env("MinAtar-v1", seed=0, kwargs={"game": "seaquest"})
    obs, _ = env.reset(seed=0)
    game = env.unwrapped.game.state()
    assert obs.shape == (10, 10, 10) and obs.dtype == np.uint8
    np.testing.assert_array_equal(obs, game.astype(np.uint8) * 255)
    assert env.observation_space.contains(obs)
