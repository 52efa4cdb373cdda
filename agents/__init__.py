"""Agents: TD3, DDPG (DQN to come). An agent never logs, writes files or steps an env."""
