"""TD7 (Fujimoto, Chang, Smith, Gu, Precup & Meger, NeurIPS 2023, "For SALE: State-Action Representation
Learning for Deep Reinforcement Learning"), as the author's code (sfujim/TD7: `Agent.train()`, `maybe_train_and_checkpoint()`).

TD3 with five additions, each a switch of its own so that its effect can be measured:
- SALE (`sale`): a state encoder zs = f(s) and a state-action encoder zsa = g(zs, a), trained so
  that g(f(s), a) predicts f(s'); the actor pi(s, zs) and the twin critic Q(s, a, zsa, zs) take
  the embeddings beside s and a (networks/sale.py).
- Fixed encoders (`fixed_encoders`): actor and critic see the embeddings of the encoder as it was at
  the last target update, the value target those of the one before; without, the current one's.
- Value clipping (`value_clipping`): the target's next value clipped to the range of the targets
  computed up to the last target update.
- LAP (`lap`): LAP's Huber loss on replay sampled by loss-adjusted priority (buffer=lap); without,
  TD3's squared error, on uniform replay (the paper's "TD7 without LAP") or weighted (PER).
- Policy checkpoints (`checkpoints`): declared (`Needs.policy_checkpoints`); the runner trains at
  episode ends and keeps the policy evaluation and export act with (training/assessment.py).
Targets (actor, critic, encoders) are copies every `target_update_every` updates; actions in [-1, 1], as the author's.
"""
from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from agents import checks, losses
from agents.acting import Forward
from agents.base import ActionBox, copy_of, tf_seed, vector_obs
from agents.needs import LapReplay, Needs, PolicyCheckpoints
from agents.optimizers import adam
from agents.deterministic import box_action, deterministic_actor_loss
from agents.td3 import smoothed_target_action
from buffers.types import Batch
from networks.sale import SALE, Encoder, policy as sale_policy


class TD7:
    ACTION_KIND = "continuous"
    needs = Needs()  # its instances declare what their switches need

    def __init__(self, obs_shape: int | tuple[int, ...], action_low: np.ndarray, action_high: np.ndarray, network: SALE,
                 rng: np.random.Generator, actor_lr: float = 3e-4, critic_lr: float = 3e-4, encoder_lr: float = 3e-4,
                 policy_delay: int = 2, target_update_every: int = 250, target_noise: float = 0.2,
                 noise_clip: float = 0.5, exploration_noise: float = 0.1, sale: bool = True,
                 fixed_encoders: bool = True, value_clipping: bool = True, lap: bool = True, min_priority: float = 1.0,
                 checkpoints: bool = True, checkpoint_episodes: int = 20, checkpoint_after: int = 750_000,
                 checkpoint_reset_weight: float = 0.9):
        if not isinstance(network, SALE):
            raise ValueError("agent=td7 builds SALE's encoders, actor and critic from network=sale (its default); "
                             "leave the network group out of the command, or set network=sale.")
        self.policy_delay = checks.integer(policy_delay, "policy_delay", "an integer >= 1 (2 in TD7)")
        self.target_update_every = checks.integer(target_update_every, "target_update_every",
                                                  "an integer >= 1 (250 in TD7: updates between target copies)")
        self.sale, self.fixed_encoders = checks.flag(sale, "sale"), checks.flag(fixed_encoders, "fixed_encoders")
        self.value_clipping, self.lap = checks.flag(value_clipping, "value_clipping"), checks.flag(lap, "lap")
        self.checkpoints = checks.flag(checkpoints, "checkpoints")
        self.min_priority = checks.number(min_priority, "min_priority", "a positive number (1 in TD7)", lambda x: x > 0)
        schedule = PolicyCheckpoints(checkpoint_episodes, checkpoint_after, checkpoint_reset_weight)
        self.target_noise, self.noise_clip = float(target_noise), float(noise_clip)
        self.exploration_noise = float(exploration_noise)

        self.obs_dim = vector_obs(obs_shape, "TD7")
        self.obs_shape, self.box = (self.obs_dim,), ActionBox(action_low, action_high)
        self.action_dim, self.action_spec = self.box.dim, self.box.spec
        self._rng = rng
        self._tf_rng = tf.random.Generator.from_seed(tf_seed(rng))
        self.updates = tf.Variable(0, dtype=tf.int64, trainable=False, name="updates")

        o, a, emb = self.obs_dim, self.action_dim, self.sale
        self.encoder = self.fixed_encoder = self.fixed_target_encoder = network.encoder(o, a, "encoder") if emb else None
        if emb and self.fixed_encoders:
            self.fixed_encoder = network.encoder(o, a, "fixed_encoder", like=self.encoder)
            self.fixed_target_encoder = network.encoder(o, a, "fixed_target_encoder", like=self.encoder)
        self.actor = network.actor(o, a, "actor", embeddings=emb)
        self.actor_target = copy_of(self.actor, network.actor(o, a, "actor_target", embeddings=emb))
        self.critic = network.critic(o, a, "critic", embeddings=emb)
        self.critic_target = copy_of(self.critic, network.critic(o, a, "critic_target", embeddings=emb))
        self.encoder_optimizer = adam(encoder_lr) if emb else None
        self.actor_optimizer, self.critic_optimizer = adam(actor_lr), adam(critic_lr)
        if emb:
            self.encoder_optimizer.build(self.encoder.trainable_variables)
        self.actor_optimizer.build(self.actor.trainable_variables)
        self.critic_optimizer.build(self.critic.trainable_variables)

        # acting: the actor on the fixed encoder's zs; evaluation and export: the checkpoint
        fixed_zs = self.fixed_encoder.zs if emb else None
        self.acting = Forward(sale_policy(self.actor, fixed_zs, "policy"))
        self.checkpoint_policy = None  # the policy evaluation acts with, kept by the runner's assessments
        if self.checkpoints:
            checkpoint_zs = copy_of(fixed_zs, network.state_encoder(o, "checkpoint_zs")) if emb else None
            self.checkpoint_policy = sale_policy(
                copy_of(self.actor, network.actor(o, a, "checkpoint_actor", embeddings=emb)), checkpoint_zs,
                "checkpoint_policy")
        self.eval_acting = Forward(self.checkpoint_policy) if self.checkpoints else self.acting
        self.needs = Needs(evaluation=self.eval_acting if self.checkpoints else None,
                           policy_checkpoints=schedule if self.checkpoints else None,
                           lap=LapReplay(self.min_priority, self.target_update_every) if self.lap else False)

        # value clipping: the range of the targets seen, and the range in use since the last copy
        self.value_max = tf.Variable(-1e8, trainable=False, name="value_max")
        self.value_min = tf.Variable(1e8, trainable=False, name="value_min")
        self.target_max = tf.Variable(0.0, trainable=False, name="target_max")
        self.target_min = tf.Variable(0.0, trainable=False, name="target_min")
        self._actor_loss = tf.Variable(0.0, trainable=False, name="actor_loss")  # reported between delayed updates

    def pi(self, actor: keras.Model, obs: tf.Tensor, zs: tf.Tensor | None) -> tf.Tensor:
        return actor([obs, zs]) if self.sale else actor(obs)

    def q(self, critic: keras.Model, obs: tf.Tensor, action: tf.Tensor, encoder: Encoder | None,
          zs: tf.Tensor | None) -> tf.Tensor:
        """Both critics' values, (B, 2); with SALE, zsa from `encoder` on (zs, action)."""
        if not self.sale:
            return critic([obs, action])
        return critic([obs, action, encoder.embed(zs, action), zs])

    # --- the update ---------------------------------------------------------------------------
    def update(self, batch: Batch) -> dict[str, tf.Tensor]:
        batch = Batch(*(tf.convert_to_tensor(x) for x in batch))  # Keras takes several inputs as tensors only
        self.updates.assign_add(1)
        action = self.box.to_unit(batch.action)
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
        variables = self.encoder.trainable_variables
        with tf.GradientTape() as tape:
            loss = losses.mse(self.encoder.embed(self.encoder.zs(obs), action), next_zs)
        self.encoder_optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
        return loss

    def target(self, batch: Batch) -> tf.Tensor:
        """r + discount * min(Q1', Q2')(s', a'~), the next value clipped to the targets' range; a'~
        the target actor's smoothed action, all on the fixed target encoder's embeddings."""
        zs = self.fixed_target_encoder.zs(batch.next_obs) if self.sale else None
        noise = self._tf_rng.normal([tf.shape(batch.action)[0], self.action_dim]) * self.target_noise
        next_action = smoothed_target_action(self.pi(self.actor_target, batch.next_obs, zs), noise,
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
            actor_loss = deterministic_actor_loss(self.q(self.critic, obs, action, self.fixed_encoder, fixed_zs))
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

    # --- acting -----------------------------------------------------------------------------------
    def act(self, obs: np.ndarray, explore: bool) -> np.ndarray:
        """With `explore`, the current actor plus Gaussian noise; else the checkpoint (evaluation)."""
        forward, noise = (self.acting, self.exploration_noise) if explore else (self.eval_acting, None)
        return box_action(self.box, forward(obs), self._rng, noise)

    def policy(self, obs: tf.Tensor) -> tf.Tensor:
        return losses.scale_action(self.eval_acting.network(obs, training=False), self.box.low, self.box.high)

    def host_metrics(self) -> dict[str, float]:
        return {}
