"""Environment construction: gymnasium envs, seeded, with episode statistics.

Importing this package registers this project's own envs with gymnasium: `Gridworld-v0`,
`MinAtar-v1` (a MinAtar game as uint8 images, `envs.minatar`), `Atari-v5` (an ALE game with the
DQN processing, `envs.atari`) and `DMC-v1` (a DeepMind Control task, `envs.dmc`).
"""
import gymnasium as gym

if "Gridworld-v0" not in gym.registry:
    gym.register(id="Gridworld-v0", entry_point="envs.gridworld:GridworldEnv", max_episode_steps=50)
if "MinAtar-v1" not in gym.registry:
    gym.register(id="MinAtar-v1", entry_point="envs.minatar:MinAtarEnv")

if "Atari-v5" not in gym.registry:
    gym.register(id="Atari-v5", entry_point="envs.atari:make_atari")

if "DMC-v1" not in gym.registry:
    gym.register(id="DMC-v1", entry_point="envs.dmc:DMCEnv")
