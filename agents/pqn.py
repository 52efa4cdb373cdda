"""PQN (Gallici, Fellows, Ellis, Pacelli, Goldie, Foerster et al., ICLR 2025, "Simplifying Deep Temporal
Difference Learning"), as CleanRL's pqn.py builds it: Q-learning on the on-policy loop's vectorized
rollouts (training/rollout.py), with no replay buffer and no target network; LayerNorm in the
Q-network is what keeps it stable (network=mlp with `layer_norm`, conf/agent/pqn.yaml).

Each rollout is acted epsilon-greedily, epsilon falling linearly over a fraction of the run. Its
targets are Q(lambda) returns, R_t = r_t + gamma (1 - d_t) [(1 - lambda) max_a Q(s_{t+1}, a) +
lambda R_{t+1}], with the Q-values of acting time and R = r + gamma (1 - d) max_a Q(s_T, a) at the
rollout's end: these are GAE's returns with the value V(s) = max_a Q(s, a), which the loop computes
(agents/ppo/returns.py), a time limit ending the return as CleanRL's does. K epochs of shuffled
minibatches then regress Q(s_t, a_t) on them by squared error, one RAdam step each with the global
gradient norm clipped, the learning rate annealed linearly to 0 over the run. The whole update of a
rollout is one compiled call (agents/ppo/learner.py's CompiledRollout, which drives PPO too)."""
from __future__ import annotations

import numpy as np
import tensorflow as tf

from agents import checks
from agents.acting import Forward
from agents.base import Counter, tf_seed, tracked
from agents.losses import linear_schedule
from agents.needs import Needs, Rollout
from agents.optimizers import Adam, RAdam

OPTIMIZERS = {"radam": RAdam, "adam": Adam}  # PyTorch's formulas; RAdam: CleanRL's PQN


class PQN:
    ACTION_KIND = "discrete"
    discrete = True  # what the rollout learner compiles the update's actions as
    # what the runner reads before building it (an on-policy agent); the instance's holds its settings
    needs = Needs(rollout=Rollout(steps=128, gae_lambda=0.65, minibatches=4))

    def __init__(self, obs_shape: int | tuple[int, ...], network, rng: np.random.Generator, num_actions: int,
                 total_steps: int, lr: float = 2.5e-4, anneal_lr: bool = True, n_steps: int = 128,
                 q_lambda: float = 0.65, update_epochs: int = 4, num_minibatches: int = 4, max_grad_norm: float = 10.0,
                 eps_start: float = 1.0, eps_end: float = 0.05, exploration_fraction: float = 0.5,
                 optimizer: str = "radam"):
        self.obs_shape = (obs_shape,) if isinstance(obs_shape, int) else tuple(obs_shape)
        self.num_actions = self.action_dim = int(num_actions)
        self.lr0 = checks.number(lr, "lr", "> 0 (2.5e-4 in CleanRL's PQN)", lambda x: x > 0)
        self.anneal_lr = checks.flag(anneal_lr, "anneal_lr")
        self.epochs = checks.integer(update_epochs, "update_epochs", "an integer >= 1 (4 in CleanRL's PQN)")
        self.minibatches = checks.integer(num_minibatches, "num_minibatches", "an integer >= 1 (4 in CleanRL's PQN)")
        self.max_grad_norm = checks.number(max_grad_norm, "max_grad_norm", "> 0 (10 in CleanRL's PQN)", lambda x: x > 0)
        probability = lambda x: 0 <= x <= 1  # noqa: E731
        self.eps_start = checks.number(eps_start, "eps_start", "in [0, 1] (1 in CleanRL's PQN)", probability)
        self.eps_end = checks.number(eps_end, "eps_end", "in [0, 1] (0.05 in CleanRL's PQN)", probability)
        fraction = checks.number(exploration_fraction, "exploration_fraction", "in (0, 1] (0.5 in CleanRL's PQN)",
                                 lambda x: 0 < x <= 1)
        self.eps_steps = fraction * checks.integer(total_steps, "total_steps", "the run's total_steps (an integer >= 1)")
        self.needs = Needs(rollout=Rollout(
            steps=checks.integer(n_steps, "n_steps", "an integer >= 1 (128 in CleanRL's PQN)"),
            gae_lambda=checks.number(q_lambda, "q_lambda", "in [0, 1] (0.65 in CleanRL's PQN)", probability),
            minibatches=self.minibatches))
        self._rng = rng
        self._tf_rng = tf.random.Generator.from_seed(tf_seed(rng))
        self.q = network(self.obs_shape, self.num_actions, name="q")  # vectors or images, as the network takes
        self.obs_dtype = self.q.inputs[0].dtype
        optimizer = checks.choice(optimizer, "optimizer", OPTIMIZERS, " (radam: CleanRL's PQN)")
        self.optimizer = OPTIMIZERS[optimizer](learning_rate=self.lr0, epsilon=1e-8)  # PyTorch's epsilon
        self.optimizer.build(self.q.trainable_variables)
        self.acted = Counter()  # env steps acted: epsilon's clock, checkpointed
        self.acting = Forward(self.q)

    # --- acting, in numpy ---------------------------------------------------------------------

    def refresh(self) -> None:
        """Re-read the weights acting uses (after an update or a restore)."""
        self.acting.refresh()

    def epsilon(self) -> float:
        """CleanRL's `linear_schedule` over the env steps acted."""
        return linear_schedule(self.eps_start, self.eps_end, self.eps_steps, self.acted.value)

    def explore(self, greedy: np.ndarray) -> np.ndarray:
        """Each env's greedy action, or with probability epsilon a uniformly random one."""
        n = len(greedy)
        random = self._rng.integers(0, self.num_actions, n)
        return np.where(self._rng.random(n) < self.epsilon(), random, greedy)

    def step(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For a rollout: the epsilon-greedy actions (epsilon as of these steps, as CleanRL counts
        them), no log-probabilities (zeros), and V(obs) = max_a Q(obs, a)."""
        q = self.acting(obs)
        self.acted.value += len(obs)
        return self.explore(q.argmax(axis=1)), np.zeros(len(obs), np.float32), q.max(axis=1)

    def values(self, obs: np.ndarray) -> np.ndarray:
        return self.acting(obs).max(axis=1)

    def act(self, obs: np.ndarray, explore: bool = False) -> np.ndarray:
        greedy = self.acting(obs).argmax(axis=1)
        return self.explore(greedy) if explore else greedy

    def env_action(self, action: np.ndarray) -> np.ndarray:
        return action

    def policy(self, obs: tf.Tensor) -> tf.Tensor:
        """What the export traces: the greedy action."""
        return tf.argmax(self.q(obs, training=False), axis=1, output_type=tf.int32)

    # --- the update of one rollout -------------------------------------------------------------

    def minibatch_step(self, obs, action, returns) -> tuple[tf.Tensor, tf.Tensor]:
        variables = self.q.trainable_variables
        with tf.GradientTape() as tape:
            q = tf.gather(self.q(obs, training=True), action, batch_dims=1)
            loss = tf.reduce_mean(tf.square(returns - q))  # F.mse_loss
        grads, _ = tf.clip_by_global_norm(tape.gradient(loss, variables), self.max_grad_norm)
        self.optimizer.apply_gradients(zip(grads, variables))
        return loss, tf.reduce_mean(q)

    def update(self, obs, action, log_prob, advantages, returns, values, progress) -> dict[str, tf.Tensor]:
        """Every epoch and minibatch of one rollout's batch, regressing Q(obs, action) on the Q(lambda)
        `returns`; `progress` in [0, 1) is the share of the run's rollouts before this one. It takes
        the loop's rollout as PPO does: `log_prob`, `advantages` and `values` go unused."""
        lr = self.lr0 * (1.0 - progress) if self.anneal_lr else tf.constant(self.lr0)
        self.optimizer.learning_rate.assign(lr)
        size = tf.shape(obs)[0] // self.minibatches
        zero = tf.constant(0.0)

        def epoch(e, loss, q):
            order = tf.argsort(self._tf_rng.uniform(tf.shape(obs)[:1]))

            def minibatch(m, loss, q):
                idx = order[m * size:(m + 1) * size]
                return (m + 1, *self.minibatch_step(*(tf.gather(x, idx) for x in (obs, action, returns))))

            return (e + 1, *tf.while_loop(lambda m, *_: m < self.minibatches, minibatch, (0, loss, q))[1:])

        _, loss, q = tf.while_loop(lambda e, *_: e < self.epochs, epoch, (0, zero, zero))
        # the last minibatch's loss and mean Q, as CleanRL logs them
        return {"td_loss": loss, "q_values": q, "learning_rate": tf.identity(lr)}

    def host_metrics(self) -> dict[str, float]:
        return {"epsilon": self.epsilon()}

    def trackables(self) -> dict:
        return tracked(self)
