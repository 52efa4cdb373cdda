"""Agents: TD3, DDPG, SAC, CrossQ, TD7, MR.Q (a folder: mrq/), DQN and the GA. An agent never logs, writes files or steps an env."""
