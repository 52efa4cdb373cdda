"""Environment construction: gymnasium envs, seeded, with episode statistics.

Importing this package registers this project's own envs with gymnasium: `Gridworld-v0`, and
`MinAtar-v1` (a MinAtar game as uint8 images, `envs.minatar`).
"""
import gymnasium as gym

if "Gridworld-v0" not in gym.registry:
    gym.register(id="Gridworld-v0", entry_point="envs.gridworld:GridworldEnv", max_episode_steps=50)
if "MinAtar-v1" not in gym.registry:
    gym.register(id="MinAtar-v1", entry_point="envs.minatar:MinAtarEnv")
