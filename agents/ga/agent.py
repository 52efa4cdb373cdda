"""A real-valued genetic algorithm over the weights of a policy network (neuroevolution).

The population's weights are stacked: one tf.Variable of shape (P, *shape) per weight of the policy
network. Acting is one batched forward pass of all P individuals (`population_act`, each on its
own env's observation), and a generation's genetic operators are tensor ops on the stacked
weights (`evolve`): the best `elites` carried over unchanged, parents chosen by tournament or
truncation selection, BLX-alpha crossover, Gaussian mutation, every draw from the agent's seeded
in-graph generator. The policy network itself holds the best individual of the last generation:
it is what evaluation, evaluate.py and the SavedModel export act with.
"""
from __future__ import annotations

from typing import Any, Callable, ClassVar

import keras
import numpy as np
import tensorflow as tf

from agents import checks
from agents.acting import Forward
from agents.base import ActionBox, tf_seed, vector_obs
from agents.ga.operators import blx_crossover, elite_indices, gaussian_mutation, tournament_selection, truncation_selection
from agents.needs import Needs
from networks.population import population_forward_fn

SELECTIONS = ("tournament", "truncation")
CROSSOVERS = ("blx", "none")


class GA:
    needs: ClassVar[Needs] = Needs(population=True)  # trained by generations, not from replay
    ACTION_KIND: ClassVar[str] = "any"

    def __init__(
        self,
        obs_shape: int | tuple[int, ...],
        network: Callable[..., keras.Model],
        rng: np.random.Generator,
        population: int = 50,
        elites: int = 2,
        selection: str = "tournament",
        tournament_size: int = 3,
        truncation: float = 0.2,
        crossover: str = "blx",
        blx_alpha: float = 0.5,
        mutation_std: float = 0.05,
        episodes: int = 1,
        action_low: np.ndarray | None = None,
        action_high: np.ndarray | None = None,
        num_actions: int | None = None,
    ):
        _check(population, elites, selection, tournament_size, truncation, crossover, blx_alpha, mutation_std, episodes)
        self.obs_dim = vector_obs(obs_shape, "GA")
        self.obs_shape = (self.obs_dim,)
        self.population, self.elites, self.episodes = int(population), int(elites), int(episodes)
        self.selection, self.tournament_size, self.crossover = selection, int(tournament_size), crossover
        self.keep = max(1, round(float(truncation) * self.population))
        self.blx_alpha, self.mutation_std = float(blx_alpha), float(mutation_std)
        self.discrete = num_actions is not None
        self.box = None if self.discrete else ActionBox(action_low, action_high)
        outputs = int(num_actions) if self.discrete else self.box.dim
        build = lambda: network(self.obs_dim, outputs, output_activation=None if self.discrete else "tanh", name="actor")  # noqa: E731
        self.policy_network = build()
        self.acting = Forward(self.policy_network)
        # each individual drawn from the network's own initializers, as a fresh network would be
        individuals = [self.policy_network.get_weights()] + [build().get_weights() for _ in range(self.population - 1)]
        self.weights = [tf.Variable(np.stack(w), name=f"population_{k}") for k, w in enumerate(zip(*individuals))]
        self.generator = tf.random.Generator.from_seed(tf_seed(rng))
        self._forward = population_forward_fn(self.policy_network)
        self.action_spec = tf.TensorSpec([self.population] + ([] if self.discrete else [outputs]),
                                         tf.int32 if self.discrete else tf.float32)

    # --- acting -----------------------------------------------------------------------------
    def _to_action(self, out: tf.Tensor) -> tf.Tensor:
        if self.discrete:
            return tf.argmax(out, axis=-1, output_type=tf.int32)
        return self.box.low + (out + 1.0) * self.box.half_range

    def population_act(self, obs: tf.Tensor) -> tf.Tensor:
        """Individual p's action for `obs[p]`, all P in one batched forward pass: (P, obs_dim) in."""
        return self._to_action(self._forward(self.weights, obs[:, None, :])[:, 0])

    def act(self, obs: np.ndarray, explore: bool = False) -> np.ndarray:
        """The best individual's actions for a batch of observations, in numpy."""
        out = self.acting(obs)
        return out.argmax(axis=-1) if self.discrete else self.box.from_unit(out)

    def policy(self, obs: tf.Tensor) -> tf.Tensor:
        return self._to_action(self.policy_network(obs, training=False))

    # --- one generation ---------------------------------------------------------------------
    def _parents(self, fitness: tf.Tensor, count: int) -> tf.Tensor:
        if self.selection == "tournament":
            return tournament_selection(fitness, count, self.tournament_size, self.generator)
        return truncation_selection(fitness, count, self.keep, self.generator)

    def evolve(self, fitness: tf.Tensor) -> None:
        """The next generation from this one's fitness (P,): the elites first, unchanged, then
        P - elites children of selected parents, crossed over and mutated. The policy network
        takes the fittest individual of this generation."""
        best = tf.argmax(fitness, output_type=tf.int32)
        for v, w in zip(self.policy_network.weights, self.weights):
            v.assign(w[best])
        elite = elite_indices(fitness, self.elites)
        children = self.population - self.elites
        mothers, fathers = self._parents(fitness, children), self._parents(fitness, children)
        for w in self.weights:
            child = tf.gather(w, mothers)
            if self.crossover == "blx":
                u = self.generator.uniform(tf.shape(child), dtype=w.dtype)
                child = blx_crossover(child, tf.gather(w, fathers), self.blx_alpha, u)
            child = gaussian_mutation(child, self.mutation_std, self.generator.normal(tf.shape(child), dtype=w.dtype))
            w.assign(tf.concat([tf.gather(w, elite), child], axis=0))

    def individual(self, p: int) -> list[np.ndarray]:
        """Individual p's weights, in the policy network's order."""
        return [w[p].numpy() for w in self.weights]

    def trackables(self) -> dict[str, Any]:
        return {"policy": self.policy_network, "generator": self.generator,
                **{f"population_{k}": w for k, w in enumerate(self.weights)}}


def _check(population, elites, selection, tournament_size, truncation, crossover, blx_alpha, mutation_std, episodes) -> None:
    checks.integer(population, "population", "an integer >= 2 (a GA needs individuals to select among; e.g. 50)",
                   lambda n: n >= 2)
    checks.integer(elites, "elites", f"an integer in [0, population) = [0, {population}) (the rest are children; e.g. 2)",
                   lambda n: 0 <= n < population)
    checks.choice(selection, "selection", SELECTIONS)
    checks.integer(tournament_size, "tournament_size", "a positive integer (e.g. 3)")
    checks.number(truncation, "truncation", "in (0, 1] (the fraction of the fittest that parents come from)",
                  lambda x: 0.0 < x <= 1.0)
    checks.choice(crossover, "crossover", CROSSOVERS)
    checks.number(blx_alpha, "blx_alpha", "a number >= 0 (0.5 is usual)", lambda x: x >= 0)
    checks.number(mutation_std, "mutation_std", "a number >= 0 (the std of the Gaussian noise added to every weight; "
                  "e.g. 0.05)", lambda x: x >= 0)
    checks.integer(episodes, "episodes", "a positive integer (episodes per individual per generation)")
