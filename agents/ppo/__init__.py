"""PPO (Schulman, Wolski, Dhariwal, Radford & Klimov 2017, "Proximal Policy Optimization
Algorithms"), following CleanRL's single-file implementations (vwxyzjn/cleanrl ppo.py and
ppo_continuous_action.py, the "37 implementation details" of Huang et al. 2022). A reader follows
it in agent.py (the update and acting), losses.py (its maths in TensorFlow), returns.py (GAE, in
numpy) and networks.py (the orthogonally initialized actor and critic); training/rollout.py is the
loop that collects its rollouts."""
from agents.ppo.agent import PPO
from agents.ppo.networks import PPONetworks

__all__ = ["PPO", "PPONetworks"]
