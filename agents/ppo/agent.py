"""PPO (Schulman et al. 2017) as CleanRL builds it (ppo_continuous_action.py, ppo.py): the clipped
surrogate, a value loss clipped around the rollout's values, an entropy bonus, one Adam (epsilon
1e-5) over actor, critic and log-std with the global gradient norm clipped, K epochs of shuffled
minibatches with advantages normalized per minibatch, the learning rate annealed linearly to 0,
an optional stop at an epoch's end once the approximate KL passes `target_kl`. Vector observations
or uint8 images (ppo_atari.py: a CNN trunk the policy and value share; agents/ppo/networks.py). The
whole update of one rollout (every epoch and minibatch) is one call; the rollout is acted in numpy
(agents/acting.py).

A2C (Mnih et al. 2016, as SB3 builds it) is this code with one epoch of one minibatch, where the
ratio is 1 and the clipped surrogate's gradient is A2C's -A grad log pi, RMSprop, and no value
clipping, advantage normalization or annealing (conf/agent/a2c.yaml)."""
from __future__ import annotations

import numpy as np
import tensorflow as tf

from agents import checks
from agents.acting import Forward
from agents.base import ActionBox, tf_seed, tracked
from agents.needs import Needs, Rollout
from agents.optimizers import Adam, RMSprop
from agents.ppo import losses
from agents.ppo.networks import PPONetworks


# PyTorch's formulas (agents/optimizers.py); RMSprop with torch's default decay 0.99, as SB3's A2C
OPTIMIZERS = {"adam": Adam, "rmsprop": lambda **kw: RMSprop(rho=0.99, **kw)}


def split(out):
    """The policy-value model's outputs (agents/ppo/networks.py) as (policy outputs, value)."""
    return out[0], out[1][:, 0]


class PPO:
    ACTION_KIND = "any"  # a Gaussian over a box, or a categorical over discrete actions
    # what the runner reads before building it (an on-policy agent); the instance's holds its settings
    needs = Needs(rollout=Rollout(steps=2048, gae_lambda=0.95, minibatches=32))

    def __init__(self, obs_shape: int | tuple[int, ...], network: PPONetworks, rng: np.random.Generator,
                 action_low: np.ndarray | None = None, action_high: np.ndarray | None = None,
                 num_actions: int | None = None, lr: float = 3e-4, anneal_lr: bool = True, n_steps: int = 2048,
                 gae_lambda: float = 0.95, update_epochs: int = 10, num_minibatches: int = 32, clip_coef: float = 0.2,
                 clip_vloss: bool = True, norm_adv: bool = True, ent_coef: float = 0.0, vf_coef: float = 0.5,
                 max_grad_norm: float = 0.5, target_kl: float | None = None, bootstrap_truncation: bool = False,
                 normalize_reward: bool = False, deterministic_eval: bool = True, optimizer: str = "adam",
                 optimizer_eps: float = 1e-5, log_std_init: float = 0.0):
        if not isinstance(network, PPONetworks):
            raise ValueError("agent=ppo builds its actor and critic from network=ppo (its default), "
                             f"not {type(network).__name__}; leave the network group out of the command")
        self.obs_shape = (obs_shape,) if isinstance(obs_shape, int) else tuple(obs_shape)
        if len(self.obs_shape) not in (1, 3):
            raise ValueError(f"agent=ppo takes vector observations or images (H, W, C), got shape {self.obs_shape}")
        self.discrete = num_actions is not None
        self.box = None if self.discrete else ActionBox(action_low, action_high)
        self.action_dim = int(num_actions) if self.discrete else int(np.asarray(action_low).shape[0])
        for key, value in (("anneal_lr", anneal_lr), ("clip_vloss", clip_vloss), ("norm_adv", norm_adv),
                           ("bootstrap_truncation", bootstrap_truncation), ("normalize_reward", normalize_reward),
                           ("deterministic_eval", deterministic_eval)):
            checks.flag(value, key)
        self.lr0 = checks.number(lr, "lr", "> 0 (3e-4 in CleanRL's MuJoCo PPO)", lambda x: x > 0)
        self.anneal_lr, self.norm_adv, self.deterministic_eval = anneal_lr, norm_adv, deterministic_eval
        self.epochs = checks.integer(update_epochs, "update_epochs", "an integer >= 1 (10 in CleanRL's MuJoCo PPO)")
        self.minibatches = checks.integer(num_minibatches, "num_minibatches", "an integer >= 1 (32 in CleanRL's MuJoCo PPO)")
        self.clip = checks.number(clip_coef, "clip_coef", "> 0 (0.2 in CleanRL's MuJoCo PPO)", lambda x: x > 0)
        self.value_clip = self.clip if clip_vloss else None
        self.ent_coef = checks.number(ent_coef, "ent_coef", ">= 0 (0 in CleanRL's MuJoCo PPO)", lambda x: x >= 0)
        self.vf_coef = checks.number(vf_coef, "vf_coef", ">= 0 (0.5 in CleanRL)", lambda x: x >= 0)
        self.max_grad_norm = checks.number(max_grad_norm, "max_grad_norm", "> 0 (0.5 in CleanRL)", lambda x: x > 0)
        self.target_kl = None if target_kl is None else checks.number(
            target_kl, "target_kl", "> 0, or null for none (CleanRL: null)", lambda x: x > 0)
        self.needs = Needs(rollout=Rollout(
            steps=checks.integer(n_steps, "n_steps", "an integer >= 1 (2048 in CleanRL's MuJoCo PPO)"),
            gae_lambda=checks.number(gae_lambda, "gae_lambda", "in [0, 1] (0.95 in CleanRL)", lambda x: 0 <= x <= 1),
            minibatches=self.minibatches, bootstrap_truncation=bootstrap_truncation, normalize_reward=normalize_reward))
        self._rng = rng
        self._tf_rng = tf.random.Generator.from_seed(tf_seed(rng))
        self.model = network.policy_value(self.obs_shape, self.action_dim)  # obs -> [policy outputs, value]
        self.obs_dtype = self.model.inputs[0].dtype  # float32 vectors, uint8 images
        log_std_init = checks.number(log_std_init, "log_std_init", "a number (0 in CleanRL and SB3; -2 in the RL Zoo's "
                                     "MuJoCo PPO)", lambda x: True)
        self.log_std = (None if self.discrete else
                        tf.Variable(tf.fill([self.action_dim], float(log_std_init)), name="log_std"))
        self._vars = self.model.trainable_variables + ([self.log_std] if self.log_std is not None else [])
        eps = checks.number(optimizer_eps, "optimizer_eps", "> 0 (1e-5 in CleanRL's PPO and SB3's A2C)", lambda x: x > 0)
        if optimizer not in OPTIMIZERS:
            raise ValueError(f"agent.optimizer must be one of {', '.join(OPTIMIZERS)} (adam: PPO's; rmsprop: SB3's A2C), "
                             f"got {optimizer!r}")
        self.optimizer = OPTIMIZERS[optimizer](learning_rate=self.lr0, epsilon=eps)
        self.optimizer.build(self._vars)
        self.acting = Forward(self.model)
        self.refresh()

    # --- acting, in numpy ---------------------------------------------------------------------

    def refresh(self) -> None:
        """Re-read the weights acting uses (after an update or a restore)."""
        self.acting.refresh()
        self._log_std = None if self.discrete else self.log_std.numpy().astype(np.float32)

    def step(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For a rollout: a sampled action per observation, its log-probability and V(obs). A
        continuous action is left unclipped (the loop clips what the env gets)."""
        out, value = split(self.acting(obs))
        if self.discrete:
            log_p = out - out.max(axis=1, keepdims=True)
            log_p -= np.log(np.exp(log_p).sum(axis=1, keepdims=True))
            u = self._rng.random((len(out), 1))
            action = np.minimum((np.cumsum(np.exp(log_p), axis=1) < u).sum(axis=1), self.action_dim - 1)
            log_prob = log_p[np.arange(len(out)), action]
        else:
            noise = self._rng.standard_normal(out.shape).astype(np.float32)
            action = out + np.exp(self._log_std) * noise
            log_prob = np.sum(-0.5 * np.square(noise) - self._log_std - 0.5 * losses.LOG_2PI, axis=1)
        return action, log_prob.astype(np.float32), value

    def values(self, obs: np.ndarray) -> np.ndarray:
        return split(self.acting(obs))[1]

    def act(self, obs: np.ndarray, explore: bool = False) -> np.ndarray:
        """Evaluation's action: the most likely one (the mean, clipped to the box), or with
        `deterministic_eval=false` one sampled from the policy (the RL Zoo's evaluation on Atari)."""
        if explore or not self.deterministic_eval:
            return self.env_action(self.step(obs)[0])
        out = split(self.acting(obs))[0]
        return out.argmax(axis=1) if self.discrete else np.clip(out, self.box.low_np, self.box.high_np)

    def env_action(self, action: np.ndarray) -> np.ndarray:
        return action if self.discrete else np.clip(action, self.box.low_np, self.box.high_np)

    def policy(self, obs: tf.Tensor) -> tf.Tensor:
        """What the export traces: the most likely action."""
        out = split(self.model(obs, training=False))[0]
        if self.discrete:
            return tf.argmax(out, axis=1, output_type=tf.int32)
        return tf.clip_by_value(out, self.box.low, self.box.high)

    # --- the update of one rollout -------------------------------------------------------------

    def distribution(self, out: tf.Tensor, action: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """log pi(action | obs) and the policy's entropy at obs, from the policy's outputs there."""
        if self.discrete:
            return losses.categorical_log_prob(out, action), losses.categorical_entropy(out)
        return losses.gaussian_log_prob(out, self.log_std, action), losses.gaussian_entropy(self.log_std, tf.shape(out)[0])

    def minibatch_step(self, obs, action, old_log_prob, advantages, returns, old_values) -> tuple[tf.Tensor, ...]:
        with tf.GradientTape() as tape:
            out, value = split(self.model(obs, training=True))
            log_prob, entropy = self.distribution(out, action)
            log_ratio = log_prob - old_log_prob
            adv = losses.normalized(advantages) if self.norm_adv else advantages
            pg_loss = losses.clipped_surrogate(log_ratio, adv, self.clip)
            v_loss = losses.value_loss(value, old_values, returns, self.value_clip)
            entropy = tf.reduce_mean(entropy)
            loss = pg_loss - self.ent_coef * entropy + self.vf_coef * v_loss
        grads, _ = tf.clip_by_global_norm(tape.gradient(loss, self._vars), self.max_grad_norm)
        self.optimizer.apply_gradients(zip(grads, self._vars))
        return pg_loss, v_loss, entropy, losses.approx_kl(log_ratio), losses.clip_fraction(log_ratio, self.clip)

    def update(self, obs, action, log_prob, advantages, returns, values, progress) -> dict[str, tf.Tensor]:
        """Every epoch and minibatch of one rollout's batch of B samples; `progress` in [0, 1) is
        the share of the run's rollouts before this one (the learning rate falls linearly with it)."""
        lr = self.lr0 * (1.0 - progress) if self.anneal_lr else tf.constant(self.lr0)
        self.optimizer.learning_rate.assign(lr)
        size = tf.shape(obs)[0] // self.minibatches
        zero = tf.constant(0.0)

        def epoch(e, stats, clip_sum, kl):
            order = tf.argsort(self._tf_rng.uniform(tf.shape(obs)[:1]))

            def minibatch(m, stats, clip_sum):
                idx = order[m * size:(m + 1) * size]
                out = self.minibatch_step(*(tf.gather(x, idx) for x in (obs, action, log_prob, advantages, returns, values)))
                return m + 1, out[:4], clip_sum + out[4]

            _, stats, clip_sum = tf.while_loop(lambda m, *_: m < self.minibatches, minibatch, (0, stats, clip_sum))
            return e + 1, stats, clip_sum, stats[3]

        def go_on(e, stats, clip_sum, kl):
            more = e < self.epochs
            return more if self.target_kl is None else tf.logical_and(more, kl <= self.target_kl)

        epochs, stats, clip_sum, _ = tf.while_loop(go_on, epoch, (0, (zero, zero, zero, zero), zero, zero))
        return {"policy_loss": stats[0], "value_loss": stats[1], "entropy": stats[2], "approx_kl": stats[3],
                "clip_fraction": clip_sum / tf.cast(epochs * self.minibatches, tf.float32), "epochs": epochs,
                "learning_rate": tf.identity(lr)}

    def host_metrics(self) -> dict[str, float]:
        return {}

    def trackables(self) -> dict:
        return tracked(self)
