"""Environment construction: gymnasium envs, seeded, with episode statistics.

Importing this package registers this project's own envs with gymnasium (`Gridworld-v0`).
"""
import gymnasium as gym

if "Gridworld-v0" not in gym.registry:
    gym.register(id="Gridworld-v0", entry_point="envs.gridworld:GridworldEnv", max_episode_steps=50)
