"""The genetic algorithm (agent=ga): the agent (`GA`, what conf/agent/ga.yaml names), its operators,
and the learner training/evolution.py drives."""
from agents.ga.agent import GA
from agents.ga.learner import CompiledPopulation

__all__ = ["GA", "CompiledPopulation"]
