"""MR.Q's agent: its networks and optimizers, the schedule of its updates (`update`, the encoder's `Block`) and the
three updates, as the author's `train()`, `train_encoder` and `train_rl` (see the package's docstring)."""
from __future__ import annotations

import numpy as np
import tensorflow as tf

from agents import losses as shared
from agents.acting import Forward
from agents.base import ActionBox, copy_of, tf_seed
from agents.mrq import acting, losses
from agents.mrq.networks import MRQNetworks, acting_policy, copy_weights
from agents.mrq.replay import RunsBatch, RunsDraw, ScaledBatch, needs
from agents.mrq.settings import Settings
from agents.needs import Needs
from agents.optimizers import adamw


class MRQ:
    ACTION_KIND = "any"
    SETTINGS = Settings  # what `**settings` takes (the config check reads it)
    needs = Needs()  # its instances declare theirs

    def __init__(self, obs_shape: tuple[int, ...], network: MRQNetworks, rng: np.random.Generator,
                 action_low: np.ndarray | None = None, action_high: np.ndarray | None = None,
                 num_actions: int | None = None, **settings):
        """`settings`: agent.* (settings.py; the author's by default)."""
        if not isinstance(network, MRQNetworks):
            raise ValueError("agent=mrq builds its encoders, policy and value networks from network=mrq (its default); "
                             "leave the network group out of the command, or set network=mrq.")
        self.settings = s = Settings(**settings)
        s.check_model(network.linear_model)
        self.discrete = num_actions is not None
        self.box = None if self.discrete else ActionBox(action_low, action_high)
        self.action_dim = int(num_actions) if self.discrete else self.box.dim
        self.action_spec = (tf.TensorSpec([None], tf.int32, name="action") if self.discrete else self.box.spec)
        self.obs_shape = tuple(int(d) for d in obs_shape)
        if len(self.obs_shape) not in (1, 3):
            raise ValueError(f"MR.Q takes vectors or images (H, W, C), not observations of shape {self.obs_shape}")
        self.exploration_noise, self.target_noise, self.noise_clip = s.noises(self.discrete)
        self.bins = tf.constant(losses.two_hot_bins(s.lower, s.upper, s.num_bins))
        self.reward_loss = {"two_hot": losses.two_hot_cross_entropy, "mse": losses.reward_squared_error}[s.reward_loss]
        self.target_reduce = {"min": tf.reduce_min, "mean": tf.reduce_mean}[s.target_value]
        self.value_loss = {"huber": shared.huber, "mse": shared.mse}[s.value_loss]
        self.by_model, self.blocks = s.by_model, s.blocks
        self._rng, self._tf_rng = rng, tf.random.Generator.from_seed(tf_seed(rng))
        self.updates = tf.Variable(0, dtype=tf.int64, trainable=False, name="updates")
        self.reward_scale = tf.Variable(1.0, trainable=False, name="reward_scale")
        self.target_reward_scale = tf.Variable(0.0 if s.reward_scaling else 1.0, trainable=False, name="target_reward_scale")
        o, a = self.obs_shape, self.action_dim
        bins = s.num_bins if s.reward_loss == "two_hot" else 1  # the reward head's outputs
        if self.blocks:  # the encoder value and policy use is the one trained
            self.encoder = network.encoder(o, a, bins, "encoder")
            self.encoder_trained = self.encoder
        else:  # fused: a copy trained every update becomes the encoder in use at each target copy
            self.encoder_next = self.encoder_trained = network.encoder(o, a, bins, "encoder_next")
            self.encoder = network.encoder(o, a, bins, "encoder", like=self.encoder_next)
        self.encoder_target = network.encoder(o, a, bins, "encoder_target", like=self.encoder)
        self.policy_net = network.policy(a, "policy")
        self.policy_target = copy_of(self.policy_net, network.policy(a, "policy_target"))
        self.value = network.value("value")
        self.value_target = copy_of(self.value, network.value("value_target"))
        self.encoder_optimizer = adamw(s.encoder_lr, s.encoder_wd, self.encoder_variables())
        self.value_optimizer = adamw(s.value_lr, s.value_wd, self.value.trainable_variables)
        self.policy_optimizer = adamw(s.policy_lr, s.policy_wd, self.policy_net.trainable_variables)
        self.acting = Forward(acting_policy(self.encoder.zs, self.policy_net, "acting_policy"))
        self.needs = needs(s)  # LAP's replay: conf/agent/mrq.yaml's buffer
    def encoder_variables(self) -> list:
        """What the encoder's optimizer trains: by the model's losses, the encoder (author) or its copy
        (fused); or with encoder_loss=value ("No MR") the encoder in use's zs and zsa, by the value's loss."""
        if self.by_model:
            return self.encoder_trained.trainable_variables
        return self.encoder.zs.trainable_variables + self.encoder.zsa.trainable_variables

    def update(self, inputs: RunsBatch | ScaledBatch) -> dict[str, tf.Tensor]:
        """One update of the value and policy; in the fused schedule, of the encoder's copy too. The
        author's schedule trains the encoder in the block before it (`block_update`)."""
        batch = inputs.batch
        self.updates.assign_add(1)
        due = (self.updates - 1) % self.settings.target_update_every == 0
        tf.cond(due, lambda: self.copy_targets(inputs.reward_scale), lambda: tf.constant(False))
        metrics = {}
        if self.by_model and not self.blocks:
            metrics = self.encoder_update(inputs.runs, inputs.terminates)
        value_loss, q, target = self.value_update(batch)
        policy_loss = self.policy_update(batch.obs)
        return {**metrics, "value_loss": value_loss, "policy_loss": policy_loss, "q": tf.reduce_mean(q),
                "target_q": tf.reduce_mean(target), "reward_scale": tf.identity(self.reward_scale),
                "td_error": tf.reduce_max(tf.abs(q - target[:, None]), axis=1)}  # LAP's priority, before floor and power

    def copy_targets(self, reward_scale: tf.Tensor) -> tf.Tensor:
        """Every target_update_every updates (the first included): the targets become copies of the
        networks, and the reward scale the buffer's mean |reward|, the target's the one it replaces.
        The encoder's target too, and in the fused schedule the encoder becomes its trained copy; in
        the author's the block before this update has already copied it (`start_block`)."""
        pairs = [(self.policy_target, self.policy_net), (self.value_target, self.value)]
        if not self.blocks:  # in this order: the target takes the encoder before the copy replaces it
            pairs += [(self.encoder_target, self.encoder)] + ([(self.encoder, self.encoder_next)] if self.by_model else [])
        for target, online in pairs:
            copy_weights(target, online)
        if self.settings.reward_scaling:
            self.target_reward_scale.assign(self.reward_scale)
            self.reward_scale.assign(reward_scale)
        return tf.constant(True)

    def action_input(self, action: tf.Tensor) -> tf.Tensor:
        """A stored action as the encoder takes it: one-hot for discrete actions, in [-1, 1] for continuous ones."""
        if self.discrete:
            return tf.one_hot(action, self.action_dim)
        return self.box.to_unit(action)

    def start_block(self) -> tf.Tensor:
        """The encoder target becomes the encoder before a block (author's schedule: the copy precedes its 250 updates)."""
        copy_weights(self.encoder_target, self.encoder)
        return tf.constant(True)

    def block_update(self, draw: RunsDraw) -> dict[str, tf.Tensor]:
        """One encoder update of a block (author's schedule)."""
        return self.encoder_update(draw.runs, draw.terminates)

    def encoder_update(self, runs, terminates: tf.Tensor) -> dict[str, tf.Tensor]:
        """The model loss unrolled along the runs, the next states embedded by the trained encoder's
        target (author: the encoder target, copied before the block; fused: the encoder in use,
        which the trained copy replaces at the next copy); with target_encoder=false, by the trained
        encoder itself, its gradients through them included."""
        s, b = self.settings, tf.shape(runs.reward)[0]
        flat_next = tf.reshape(runs.next_obs, tf.concat([[-1], tf.shape(runs.next_obs)[2:]], 0))
        next_embedding = lambda encoder: tf.reshape(encoder.zs(flat_next), [b, s.enc_horizon, -1])  # noqa: E731
        trained = self.encoder_trained
        if s.target_encoder:
            next_zs = tf.stop_gradient(next_embedding(self.encoder_target if self.blocks else self.encoder))
        actions = self.action_input(runs.action)
        variables = trained.trainable_variables
        with tf.GradientTape() as tape:
            if not s.target_encoder:
                next_zs = next_embedding(trained)
            loss, parts = losses.model_rollout_loss(
                trained.predict, trained.zs(runs.obs), actions, next_zs, runs.reward, runs.terminated, self.bins,
                s.dyn_weight, s.reward_weight, s.done_weight * terminates, self.reward_loss, s.infonce_weight,
                s.infonce_temperature)
        self.encoder_optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
        return {"encoder_loss": loss} | {f"{term}_loss": part for term, part in parts.items()}

    def act_pre(self, pre_activation: tf.Tensor) -> tf.Tensor:
        """The policy's action from its pre-activation: tanh, or a Gumbel-softmax sample."""
        if self.discrete:
            uniform = self._tf_rng.uniform(tf.shape(pre_activation), minval=1e-20, maxval=1.0)
            return losses.gumbel_softmax(pre_activation, uniform, self.settings.gumbel_tau)
        return tf.tanh(pre_activation)

    def value_target_of(self, batch) -> tf.Tensor:
        next_zs = self.encoder_target.zs(batch.next_obs)
        shape = [tf.shape(batch.reward)[0], self.action_dim]
        noise = tf.clip_by_value(self._tf_rng.normal(shape) * self.target_noise, -self.noise_clip, self.noise_clip)
        next_action = losses.realigned_action(self.act_pre(self.policy_target(next_zs)) + noise, self.discrete)
        next_q = self.target_reduce(self.value_target(self.encoder_target.embed(next_zs, next_action)), axis=1)
        # batch.discount = gamma^m (1 - terminated) for the m <= q_horizon steps the return spans
        return losses.scaled_value_target(batch.reward, batch.discount, next_q, self.reward_scale,
                                          self.target_reward_scale)

    def value_update(self, batch) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        """The value's loss on the encoder in use's zsa; with encoder_loss=value ("No MR") the
        encoder trains through it too, with its own optimizer (the value's gradients alone clipped)."""
        target = self.value_target_of(batch)
        variables, encoder_variables = self.value.trainable_variables, [] if self.by_model else self.encoder_variables()
        with tf.GradientTape() as tape:
            zsa = self.encoder.embed(self.encoder.zs(batch.obs), self.action_input(batch.action))
            q = self.value(zsa if encoder_variables else tf.stop_gradient(zsa))
            loss = self.value_loss(q, target[:, None], batch.weight[:, None])  # weights: ones but for buffer=prioritized
        grads = tape.gradient(loss, variables + encoder_variables)
        clipped = grads[:len(variables)]
        if self.settings.value_grad_clip:
            clipped, _ = tf.clip_by_global_norm(clipped, self.settings.value_grad_clip)
        self.value_optimizer.apply_gradients(zip(clipped, variables))
        if encoder_variables:
            self.encoder_optimizer.apply_gradients(zip(grads[len(variables):], encoder_variables))
        return loss, q, target

    def policy_update(self, obs: tf.Tensor) -> tf.Tensor:
        """The policy ascends the mean of both value heads (just updated) on the encoder in use."""
        zs = tf.stop_gradient(self.encoder.zs(obs))
        variables = self.policy_net.trainable_variables
        with tf.GradientTape() as tape:
            pre = self.policy_net(zs)
            q = self.value(self.encoder.embed(zs, self.act_pre(pre)))
            loss = -tf.reduce_mean(q) + self.settings.pre_activ_weight * tf.reduce_mean(tf.square(pre))
        self.policy_optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
        return loss

    def act(self, obs: np.ndarray, explore: bool) -> np.ndarray:
        noise = self.exploration_noise if explore else None
        if self.discrete:
            return acting.gumbel_argmax(self.acting(obs), self.settings.gumbel_tau, self._rng, noise)
        return acting.tanh_action(self.acting(obs), self.box, self._rng, noise)

    def policy(self, obs: tf.Tensor) -> tf.Tensor:
        return acting.deterministic(self.acting.network(obs, training=False), self.box)

    def host_metrics(self) -> dict[str, float]:
        return {}
