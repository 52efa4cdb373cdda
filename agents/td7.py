"""TD7 (Fujimoto, Chang, Smith, Gu, Precup & Meger, NeurIPS 2023, "For SALE: State-Action
Representation Learning for Deep Reinforcement Learning"), following the author's code
(sfujim/TD7: `Agent.train()` and `Agent.maybe_train_and_checkpoint()`).

TD3 with five additions, each a switch of its own so that its effect can be measured:
- SALE (`sale`): a state encoder zs = f(s) and a state-action encoder zsa = g(zs, a), trained so
  that g(f(s), a) predicts f(s') (cut from the gradient); the actor pi(s, zs) and the twin critic
  Q(s, a, zsa, zs) take the embeddings beside s and a (networks/sale.py).
- Fixed encoders (`fixed_encoders`): the critic and actor see the embeddings of the encoder as it
  was at the last target update, the value target those of the one before; without, the current
  encoder's everywhere.
- Value clipping (`value_clipping`): the target's next value is clipped to the range of the
  targets computed up to the last target update.
- LAP (`lap`): replay sampled by loss-adjusted priority (buffer=lap) and the critics trained on
  LAP's Huber loss; without, TD3's squared error on uniform replay (buffer=uniform: the paper's
  "TD7 without LAP"), or weighted by the importance weights of buffer=prioritized (PER).
- Policy checkpoints (`checkpoints`): updates come in phases at episode ends, as many as the env
  steps since the last phase. Before a phase, the policy that acted is kept as the checkpoint if
  the lowest return of its episodes (1, or `checkpoint_episodes` after `checkpoint_after` updates)
  was not below the checkpoint's; an episode below it ends the assessment early. Evaluation and
  export act with the checkpoint.
The target networks (actor, critic, encoders) are copies made every `target_update_every` updates,
not averages. The update works in actions scaled to [-1, 1], as the author's buffer stores them.
As in the author's loop, an agent that trains at episode ends acts at random until the first
episode end past `learning_starts`, and trains first at the end of the next episode.
"""
from __future__ import annotations

from typing import NamedTuple

import keras
import numpy as np
import tensorflow as tf

from agents import losses
from agents.acting import Forward
from agents.base import ActionBox, adam, copy_of, tf_seed
from agents.deterministic import box_action
from buffers.types import Batch
from networks import sale as sale_networks
from networks.sale import SALE


class Encoder(NamedTuple):
    """SALE's two encoders: zs = f(s) and zsa = g([zs, a])."""

    zs: keras.Model
    zsa: keras.Model

    def embed(self, zs: tf.Tensor, action: tf.Tensor) -> tf.Tensor:
        return self.zsa(tf.concat([zs, action], axis=-1))

    @property
    def weights(self) -> list:
        return self.zs.weights + self.zsa.weights


class CheckpointState(NamedTuple):
    """Where the policy-checkpoint schedule stands (the author's tracked values)."""

    episodes: float = 0.0  # episodes since the last training phase
    steps: float = 0.0  # env steps since the last training phase
    max_episodes: float = 1.0  # episodes that assess one policy
    min_return: float = 1e8  # lowest return of those episodes so far
    best_min_return: float = -1e8  # the checkpoint's lowest return
    updates: float = 0.0  # updates asked for so far


class CheckpointSettings(NamedTuple):
    max_episodes: int = 20  # episodes per assessment after `after` updates
    after: int = 750_000
    reset_weight: float = 0.9  # the checkpoint's lowest return is scaled by it at `after`


def checkpoint_schedule(state: CheckpointState, length: int, ret: float,
                        settings: CheckpointSettings) -> tuple[CheckpointState, int, bool]:
    """One episode end of TD7's checkpoint schedule: the new state, the updates to run now, and
    whether the policy that acted becomes the checkpoint first (`maybe_train_and_checkpoint`)."""
    state = state._replace(episodes=state.episodes + 1, steps=state.steps + length,
                           min_return=min(state.min_return, ret))
    if state.min_return < state.best_min_return:  # below the checkpoint: assessment over, train
        save = False
    elif state.episodes == state.max_episodes:
        state, save = state._replace(best_min_return=state.min_return), True
    else:
        return state, 0, False
    n = int(state.steps)
    if state.updates <= settings.after < state.updates + n:  # the author checks it before each update
        state = state._replace(best_min_return=state.best_min_return * settings.reset_weight,
                               max_episodes=float(settings.max_episodes))
    return state._replace(episodes=0.0, steps=0.0, min_return=1e8, updates=state.updates + n), n, save


def _flag(value, key: str) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"agent.{key} must be true or false, got {value!r}")
    return value


def _count(value, key: str, hint: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"agent.{key} must be an integer >= 1 ({hint}), got {value!r}")
    return value


class TD7:
    ACTION_KIND = "continuous"

    def __init__(
        self,
        obs_dim: int,
        action_low: np.ndarray,
        action_high: np.ndarray,
        network: SALE,
        rng: np.random.Generator,
        actor_lr: float = 3e-4,
        critic_lr: float = 3e-4,
        encoder_lr: float = 3e-4,
        policy_delay: int = 2,
        target_update_every: int = 250,
        target_noise: float = 0.2,
        noise_clip: float = 0.5,
        exploration_noise: float = 0.1,
        sale: bool = True,
        fixed_encoders: bool = True,
        value_clipping: bool = True,
        lap: bool = True,
        min_priority: float = 1.0,
        checkpoints: bool = True,
        checkpoint_episodes: int = 20,
        checkpoint_after: int = 750_000,
        checkpoint_reset_weight: float = 0.9,
    ):
        if not isinstance(network, SALE):
            raise ValueError("agent=td7 builds SALE's encoders, actor and critic from network=sale (its default); "
                             "leave the network group out of the command, or set network=sale.")
        self.policy_delay = _count(policy_delay, "policy_delay", "2 in TD7: the actor steps on every second update")
        self.target_update_every = _count(target_update_every, "target_update_every",
                                          "250 in TD7: updates between copies of the targets")
        self.sale, self.fixed_encoders = _flag(sale, "sale"), _flag(fixed_encoders, "fixed_encoders")
        self.value_clipping, self.lap = _flag(value_clipping, "value_clipping"), _flag(lap, "lap")
        self.checkpoints = _flag(checkpoints, "checkpoints")
        if isinstance(min_priority, bool) or not isinstance(min_priority, (int, float)) or min_priority <= 0:
            raise ValueError(f"agent.min_priority must be a positive number (1 in TD7), got {min_priority!r}")
        self.checkpoint_settings = CheckpointSettings(
            _count(checkpoint_episodes, "checkpoint_episodes", "20 in TD7"),
            _count(checkpoint_after, "checkpoint_after", "750000 in TD7"), float(checkpoint_reset_weight))
        self.min_priority = float(min_priority)
        self.target_noise, self.noise_clip = float(target_noise), float(noise_clip)
        self.exploration_noise = float(exploration_noise)

        self.obs_dim = int(obs_dim)
        self.box = ActionBox(action_low, action_high)
        self.action_dim, self.action_spec = self.box.dim, self.box.spec
        self._rng = rng
        self._tf_rng = tf.random.Generator.from_seed(tf_seed(rng))
        self.updates = tf.Variable(0, dtype=tf.int64, trainable=False, name="updates")

        o, a, emb = self.obs_dim, self.action_dim, self.sale
        self.encoder = self.fixed_encoder = self.fixed_target_encoder = None
        if emb:
            self.encoder = self._encoder(network, "encoder")
            self.fixed_encoder, self.fixed_target_encoder = self.encoder, self.encoder
            if self.fixed_encoders:
                self.fixed_encoder = self._encoder(network, "fixed_encoder", like=self.encoder)
                self.fixed_target_encoder = self._encoder(network, "fixed_target_encoder", like=self.encoder)
        self.actor = network.actor(o, a, "actor", embeddings=emb)
        self.actor_target = copy_of(self.actor, network.actor(o, a, "actor_target", embeddings=emb))
        self.critic = network.critic(o, a, "critic", embeddings=emb)
        self.critic_target = copy_of(self.critic, network.critic(o, a, "critic_target", embeddings=emb))
        self.encoder_optimizer = adam(encoder_lr) if emb else None
        self.actor_optimizer, self.critic_optimizer = adam(actor_lr), adam(critic_lr)
        if emb:
            self.encoder_optimizer.build(self._encoder_vars())
        self.actor_optimizer.build(self.actor.trainable_variables)
        self.critic_optimizer.build(self.critic.trainable_variables)

        # acting: the actor on the fixed encoder's zs; evaluation and export: the checkpoint
        fixed_zs = self.fixed_encoder.zs if emb else None
        self.acting = Forward(sale_networks.policy(self.actor, fixed_zs, "policy"))
        self.eval_acting = self.acting
        if self.checkpoints:
            self.checkpoint_actor = copy_of(self.actor, network.actor(o, a, "checkpoint_actor", embeddings=emb))
            self.checkpoint_zs = copy_of(fixed_zs, network.state_encoder(o, "checkpoint_zs")) if emb else None
            self.eval_acting = Forward(sale_networks.policy(self.checkpoint_actor, self.checkpoint_zs,
                                                            "checkpoint_policy"))
        self._schedule = tf.Variable(np.array(CheckpointState(), np.float64), trainable=False, name="checkpoint_schedule")

        # value clipping: the range of the targets seen, and the range in use since the last copy
        self.value_max = tf.Variable(-1e8, trainable=False, name="value_max")
        self.value_min = tf.Variable(1e8, trainable=False, name="value_min")
        self.target_max = tf.Variable(0.0, trainable=False, name="target_max")
        self.target_min = tf.Variable(0.0, trainable=False, name="target_min")
        self._actor_loss = tf.Variable(0.0, trainable=False, name="actor_loss")  # reported between delayed updates

    def _encoder(self, network: SALE, name: str, like: Encoder | None = None) -> Encoder:
        enc = Encoder(network.state_encoder(self.obs_dim, f"{name}_zs"),
                      network.state_action_encoder(self.action_dim, f"{name}_zsa"))
        if like is not None:
            copy_of(like.zs, enc.zs), copy_of(like.zsa, enc.zsa)
        return enc

    def _encoder_vars(self) -> list:
        return self.encoder.zs.trainable_variables + self.encoder.zsa.trainable_variables

    # --- the networks with or without embeddings ------------------------------------------------
    def pi(self, actor: keras.Model, obs: tf.Tensor, zs: tf.Tensor | None) -> tf.Tensor:
        return actor([obs, zs]) if self.sale else actor(obs)

    def q(self, critic: keras.Model, obs: tf.Tensor, action: tf.Tensor, encoder: Encoder | None,
          zs: tf.Tensor | None) -> tf.Tensor:
        """Both critics' values, (B, 2); with SALE, zsa from `encoder` on (zs, action)."""
        if not self.sale:
            return critic([obs, action])
        return critic([obs, action, encoder.embed(zs, action), zs])

    def unit_action(self, action: tf.Tensor) -> tf.Tensor:
        """Env actions onto [-1, 1]."""
        return (action - (self.box.high + self.box.low) / 2.0) / self.box.half_range

    # --- the update ---------------------------------------------------------------------------
    def update(self, batch: Batch) -> dict[str, tf.Tensor]:
        batch = Batch(*(tf.convert_to_tensor(x) for x in batch))  # Keras takes several inputs as tensors only
        self.updates.assign_add(1)
        action = self.unit_action(batch.action)
        encoder_loss = self.encoder_update(batch.obs, action, batch.next_obs) if self.sale else tf.constant(0.0)
        target = self.target(batch)
        fixed_zs = tf.stop_gradient(self.fixed_encoder.zs(batch.obs)) if self.sale else None
        with tf.GradientTape() as tape:
            q = self.q(self.critic, batch.obs, action, self.fixed_encoder, fixed_zs)
            td = tf.abs(q - target[:, None])
            critic_loss = losses.lap_huber(td, self.min_priority) if self.lap else losses.squared_td(td, batch.weight)
        critic_vars = self.critic.trainable_variables
        self.critic_optimizer.apply_gradients(zip(tape.gradient(critic_loss, critic_vars), critic_vars))

        tf.cond(self.updates % self.policy_delay == 0, lambda: self.actor_update(batch.obs, fixed_zs),
                lambda: tf.constant(False))
        tf.cond(self.updates % self.target_update_every == 0, self.copy_targets, lambda: tf.constant(False))
        return {
            "critic_loss": critic_loss,
            "actor_loss": tf.identity(self._actor_loss),
            "encoder_loss": encoder_loss,
            "q": tf.reduce_mean(q),
            "target_q": tf.reduce_mean(target),
            "td_error": tf.reduce_max(td, axis=1),  # LAP's priority before its floor and power
        }

    def encoder_update(self, obs: tf.Tensor, action: tf.Tensor, next_obs: tf.Tensor) -> tf.Tensor:
        """SALE's loss: g(f(s), a) regressed onto f(s') of the same encoder, cut from the gradient."""
        next_zs = tf.stop_gradient(self.encoder.zs(next_obs))
        variables = self._encoder_vars()
        with tf.GradientTape() as tape:
            loss = losses.mse(self.encoder.embed(self.encoder.zs(obs), action), next_zs)
        self.encoder_optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
        return loss

    def target(self, batch: Batch) -> tf.Tensor:
        """r + discount * min(Q1', Q2')(s', a'~), the next value clipped to the targets' range; a'~
        the target actor's smoothed action, all on the fixed target encoder's embeddings."""
        zs = self.fixed_target_encoder.zs(batch.next_obs) if self.sale else None
        noise = self._tf_rng.normal([tf.shape(batch.action)[0], self.action_dim]) * self.target_noise
        next_action = losses.smoothed_target_action(self.pi(self.actor_target, batch.next_obs, zs), noise,
                                                    self.noise_clip, 1.0, -1.0, 1.0)
        next_q = tf.reduce_min(self.q(self.critic_target, batch.next_obs, next_action, self.fixed_target_encoder, zs),
                               axis=1)
        if self.value_clipping:
            next_q = tf.clip_by_value(next_q, self.target_min, self.target_max)
        target = losses.td_target(batch.reward, batch.discount, next_q)
        self.value_max.assign(tf.maximum(self.value_max, tf.reduce_max(target)))
        self.value_min.assign(tf.minimum(self.value_min, tf.reduce_min(target)))
        return target

    def actor_update(self, obs: tf.Tensor, fixed_zs: tf.Tensor | None) -> tf.Tensor:
        """The actor ascends the mean of both critics, on the fixed encoder's embeddings."""
        actor_vars = self.actor.trainable_variables
        with tf.GradientTape() as tape:
            action = self.pi(self.actor, obs, fixed_zs)
            actor_loss = losses.deterministic_actor_loss(self.q(self.critic, obs, action, self.fixed_encoder, fixed_zs))
        self.actor_optimizer.apply_gradients(zip(tape.gradient(actor_loss, actor_vars), actor_vars))
        self._actor_loss.assign(actor_loss)
        return tf.constant(True)

    def copy_targets(self) -> tf.Tensor:
        """Every target_update_every updates: the targets become copies of the networks, the fixed
        target encoder the fixed encoder and that the current encoder (in this order), and the
        clipping range the range of the targets seen so far."""
        pairs = [(self.actor_target, self.actor), (self.critic_target, self.critic)]
        if self.sale and self.fixed_encoders:
            pairs += [(self.fixed_target_encoder, self.fixed_encoder), (self.fixed_encoder, self.encoder)]
        for target, online in pairs:
            for t, o in zip(target.weights, online.weights, strict=True):
                t.assign(o)
        self.target_max.assign(self.value_max)
        self.target_min.assign(self.value_min)
        return tf.constant(True)

    # --- policy checkpoints (the loop's episode ends) ----------------------------------------------
    @property
    def trains_at_episode_ends(self) -> bool:
        return self.checkpoints

    def episode_end(self, length: int, ret: float) -> int:
        """A training episode ended: the updates to run now (the loop runs them before the next
        step), with the policy that acted made the checkpoint first where the schedule says so."""
        state, n, save = checkpoint_schedule(CheckpointState(*self._schedule.numpy()), int(length), float(ret),
                                             self.checkpoint_settings)
        if save:
            for c, o in zip(self.eval_acting.network.weights, self.acting.network.weights, strict=True):
                c.assign(o)
            self.eval_acting.refresh()
        self._schedule.assign(np.array(state, np.float64))
        return n

    # --- acting -----------------------------------------------------------------------------------
    def act(self, obs: np.ndarray, explore: bool) -> np.ndarray:
        """With `explore`, the current actor plus Gaussian noise; else the checkpoint (evaluation)."""
        if explore:
            return box_action(self.box, self.acting(obs), self._rng, self.exploration_noise)
        return box_action(self.box, self.eval_acting(obs), self._rng, None)

    def policy(self, obs: tf.Tensor) -> tf.Tensor:
        return losses.scale_action(self.eval_acting.network(obs, training=False), self.box.low, self.box.high)

    def host_metrics(self) -> dict[str, float]:
        return {}

    def trackables(self) -> dict:
        nets = {"actor": self.actor, "actor_target": self.actor_target, "critic": self.critic,
                "critic_target": self.critic_target}
        if self.sale:
            for name in ("encoder", "fixed_encoder", "fixed_target_encoder"):
                enc = getattr(self, name)
                if name == "encoder" or self.fixed_encoders:
                    nets.update({f"{name}_zs": enc.zs, f"{name}_zsa": enc.zsa})
            nets["encoder_optimizer"] = self.encoder_optimizer
        if self.checkpoints:
            nets["checkpoint_policy"] = self.eval_acting.network
        return {
            **nets,
            "actor_optimizer": self.actor_optimizer,
            "critic_optimizer": self.critic_optimizer,
            "updates": self.updates,
            "checkpoint_schedule": self._schedule,
            "value_max": self.value_max,
            "value_min": self.value_min,
            "target_max": self.target_max,
            "target_min": self.target_min,
            "actor_loss": self._actor_loss,
            "tf_rng": self._tf_rng,
        }
