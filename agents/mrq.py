"""MR.Q (Fujimoto, D'Oro, Zhang, Tian & Rabbat, ICLR 2025, "Towards General-Purpose Model-Free
Reinforcement Learning"), following the author's code (facebookresearch/MRQ: `Agent.train()`,
`train_encoder`, `train_rl`). One set of hyper-parameters for vectors and pixels, continuous and
discrete actions.

- The encoder learns zs = f(s) and zsa = g(zs, a) through a linear model on zsa that predicts the
  reward (two-hot cross-entropy over bins spaced evenly in symlog space), the next state's zs (from
  the encoder in use: the author's target encoder, the copy made before its encoder updates) and the
  termination, unrolled `enc_horizon` steps along stored runs, each sample's terms masked after its
  first termination (`losses.model_rollout_loss`).
- Twin value networks on zsa, trained with a Huber loss on `q_horizon`-step returns (the buffer's
  n-step batches) in units of the buffer's mean absolute reward: the target network's values are in
  the scale of its time, the online ones in today's (`losses.scaled_value_target`).
- A deterministic policy on zs: tanh for continuous actions, the Gumbel-softmax for discrete ones,
  ascending the mean of both value heads, with a small penalty on its pre-activation.
- LAP replay (buffer=mrq: buffer=lap's code with the author's settings, its largest priority never
  reset, where TD7's buffer=lap resets it at each target copy), targets (encoder, value, policy) copied
  every `target_update_every` updates, AdamW with the author's rates and weight decay.

The encoder's schedule (`encoder_schedule`):
- author (the default): as the author's `train()`, at each target copy the encoder target becomes
  the encoder, which then trains `target_update_every` times in a row on runs drawn from the buffer
  as it is then (a `Block` the loop runs), and the value and policy use it until the next copy.
- fused: the encoder trains once per update, on a copy (`encoder_next`) that becomes the encoder the
  value and policy use at the next copy; so they use an encoder one block older than the author's,
  an untrained one in the first block, and each update costs the same.

Where this differs from the author's code (say so in results):
- The multi-step return stops at the first termination (the buffer's n-step batches); the author's
  `multi_step_reward` weighs each reward by its own step's not-done flag, which drops the terminal
  reward and adds the rewards its buffer holds after the terminal row.
- Runs cut by a time limit are sampled up to the cut (the author masks the last runs of such an
  episode out whole); two-hot values beyond the end bins go to the end bin (the author's divide by 0).
"""
from __future__ import annotations

from typing import ClassVar

import numpy as np
import tensorflow as tf

from agents import checks, losses
from agents.acting import Forward
from agents.base import ActionBox, AdamW, Needs, copy_of, tf_seed
from agents.replay import Block, Runs, RunsBatch, RunsDraw, ScaledBatch, ScaledTransitions, TransitionsAndRuns, check_horizon
from networks import mrq as mrq_networks
from networks.mrq import Encoder, MRQNetworks


def _copy(target, online) -> None:
    for t, o in zip(target.weights, online.weights, strict=True):
        t.assign(o)


def adamw(learning_rate: float, weight_decay: float) -> AdamW:
    """AdamW with PyTorch's epsilon, as the author's torch.optim.AdamW (see agents.base.adam)."""
    return AdamW(learning_rate=learning_rate, weight_decay=weight_decay, epsilon=1e-8)


class MRQ:
    ACTION_KIND: ClassVar[str] = "any"
    needs = Needs()  # its instances declare theirs

    def __init__(self, obs_shape: tuple[int, ...], network: MRQNetworks, rng: np.random.Generator,
                 action_low: np.ndarray | None = None, action_high: np.ndarray | None = None,
                 num_actions: int | None = None, target_update_every: int = 250,
                 exploration_noise: float = 0.2, target_noise: float = 0.2, noise_clip: float = 0.3,
                 dyn_weight: float = 1.0, reward_weight: float = 0.1, done_weight: float = 0.1,
                 min_priority: float = 1.0, enc_horizon: int = 5, q_horizon: int = 3,
                 encoder_lr: float = 1e-4, encoder_wd: float = 1e-4, value_lr: float = 3e-4, value_wd: float = 1e-4,
                 value_grad_clip: float = 20.0, policy_lr: float = 3e-4, policy_wd: float = 1e-4,
                 gumbel_tau: float = 10.0, pre_activ_weight: float = 1e-5, num_bins: int = 65,
                 lower: float = -10.0, upper: float = 10.0, reward_loss: str = "two_hot",
                 reward_scaling: bool = True, target_value: str = "min", value_loss: str = "huber",
                 target_encoder: bool = True, encoder_loss: str = "model", encoder_schedule: str = "author"):
        if not isinstance(network, MRQNetworks):
            raise ValueError("agent=mrq builds its encoders, policy and value networks from network=mrq (its default); "
                             "leave the network group out of the command, or set network=mrq.")
        self.discrete = num_actions is not None
        self.box = None if self.discrete else ActionBox(action_low, action_high)
        self.action_dim = int(num_actions) if self.discrete else self.box.dim
        self.action_spec = (tf.TensorSpec([None], tf.int32, name="action") if self.discrete else self.box.spec)
        self.obs_shape = tuple(int(d) for d in obs_shape)
        if len(self.obs_shape) not in (1, 3):
            raise ValueError(f"MR.Q takes vectors or images (H, W, C), not observations of shape {self.obs_shape}")
        self.target_update_every = checks.integer(target_update_every, "target_update_every",
                                                  "an integer >= 1 (250 in MR.Q: updates between target copies)")
        self.enc_horizon, self.q_horizon = check_horizon(enc_horizon, "enc_horizon"), check_horizon(q_horizon, "q_horizon")
        self.num_bins = checks.integer(num_bins, "num_bins", "an integer >= 2 (65 in MR.Q)", lambda n: n >= 2)
        if not (isinstance(lower, (int, float)) and isinstance(upper, (int, float)) and lower < upper):
            raise ValueError(f"agent.lower and agent.upper must be numbers with lower < upper (the reward bins span "
                             f"symexp(lower) to symexp(upper); -10 and 10 in MR.Q), got {lower!r} and {upper!r}")
        positive = lambda key, value, usual: checks.number(value, key, f"a number >= 0 ({usual} in MR.Q)",  # noqa: E731
                                                           lambda x: x >= 0)
        self.dyn_weight = positive("dyn_weight", dyn_weight, 1)
        self.reward_weight, self.done_weight = positive("reward_weight", reward_weight, 0.1), positive("done_weight", done_weight, 0.1)
        self.pre_activ_weight = positive("pre_activ_weight", pre_activ_weight, 1e-5)
        self.value_grad_clip = checks.number(value_grad_clip, "value_grad_clip", "a number > 0 (20 in MR.Q)", lambda x: x > 0)
        self.gumbel_tau = checks.number(gumbel_tau, "gumbel_tau", "a number > 0 (10 in MR.Q)", lambda x: x > 0)
        self.min_priority = checks.number(min_priority, "min_priority", "a number > 0 (1 in MR.Q)", lambda x: x > 0)
        # the author scales the noises by half for discrete actions, which live in [0, 1], not [-1, 1]
        scale = 0.5 if self.discrete else 1.0
        self.exploration_noise = scale * positive("exploration_noise", exploration_noise, 0.2)
        self.target_noise = scale * positive("target_noise", target_noise, 0.2)
        self.noise_clip = scale * positive("noise_clip", noise_clip, 0.3)
        self.bins = tf.constant(losses.two_hot_bins(lower, upper, self.num_bins))
        # the paper's design study (Sec. 5.2), each switch one of its variants; the defaults are MR.Q
        mrqs = " (the first is MR.Q's)"
        self.reward_loss = {"two_hot": losses.two_hot_cross_entropy, "mse": losses.reward_squared_error}[
            checks.choice(reward_loss, "reward_loss", ("two_hot", "mse"), mrqs)]
        self.target_reduce = {"min": tf.reduce_min, "mean": tf.reduce_mean}[
            checks.choice(target_value, "target_value", ("min", "mean"), mrqs)]
        self.value_loss = {"huber": losses.huber, "mse": losses.mse}[
            checks.choice(value_loss, "value_loss", ("huber", "mse"), mrqs)]
        self.reward_scaling = checks.flag(reward_scaling, "reward_scaling")
        self.use_target_encoder = checks.flag(target_encoder, "target_encoder")
        self.by_model = checks.choice(encoder_loss, "encoder_loss", ("model", "value"), mrqs) == "model"
        idle = [key for key, on in (("agent.target_encoder=false", not self.use_target_encoder),
                                    ("agent.reward_loss=mse", reward_loss == "mse"),
                                    ("network.linear_model=false", not network.linear_model)) if on]
        if not self.by_model and idle:
            raise ValueError(f"{', '.join(idle)} changes the encoder's model, which agent.encoder_loss=value (the "
                             f"design study's No MR) does not train; leave it out, or set agent.encoder_loss=model.")
        schedule = checks.choice(encoder_schedule, "encoder_schedule", ("author", "fused"),
                                 " (author: 250 encoder updates in a row at each target copy, as the author's code; "
                                 "fused: one per update)")
        self.blocks = self.by_model and schedule == "author"  # the encoder trains in blocks (without a model: never)

        self._rng = rng
        self._tf_rng = tf.random.Generator.from_seed(tf_seed(rng))
        self.updates = tf.Variable(0, dtype=tf.int64, trainable=False, name="updates")
        self.reward_scale = tf.Variable(1.0, trainable=False, name="reward_scale")
        self.target_reward_scale = tf.Variable(0.0 if self.reward_scaling else 1.0, trainable=False,
                                               name="target_reward_scale")

        o, a = self.obs_shape, self.action_dim
        bins = self.num_bins if self.reward_loss is losses.two_hot_cross_entropy else 1  # the reward head's outputs
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
        self.encoder_optimizer = adamw(encoder_lr, encoder_wd)
        self.value_optimizer, self.policy_optimizer = adamw(value_lr, value_wd), adamw(policy_lr, policy_wd)
        self.encoder_optimizer.build(self.encoder_variables())
        self.value_optimizer.build(self.value.trainable_variables)
        self.policy_optimizer.build(self.policy_net.trainable_variables)

        self.acting = Forward(mrq_networks.acting_policy(self.encoder.zs, self.policy_net, "acting_policy"))
        # LAP's replay is conf/agent/mrq.yaml's buffer; buffer=uniform is the author's prioritized=False
        if self.blocks:
            every = self.target_update_every
            self.needs = Needs(replay=ScaledTransitions(self.enc_horizon, self.q_horizon),
                               block=Block(every, every, Runs(self.enc_horizon)))
        else:
            self.needs = Needs(replay=TransitionsAndRuns(self.enc_horizon, self.q_horizon))

    def encoder_variables(self) -> list:
        """What the encoder's optimizer trains: by the model's losses, the encoder (author) or its copy
        (fused); or with encoder_loss=value ("No MR") the encoder in use's zs and zsa, by the value's loss."""
        if self.by_model:
            return self.encoder_trained.trainable_variables
        return self.encoder.zs.trainable_variables + self.encoder.zsa.trainable_variables

    # --- the update ---------------------------------------------------------------------------
    def update(self, inputs: RunsBatch | ScaledBatch) -> dict[str, tf.Tensor]:
        """One update of the value and policy; in the fused schedule, of the encoder's copy too. The
        author's schedule trains the encoder in the block before it (`block_update`)."""
        batch = inputs.batch
        self.updates.assign_add(1)
        tf.cond((self.updates - 1) % self.target_update_every == 0, lambda: self.copy_targets(inputs.reward_scale),
                lambda: tf.constant(False))
        metrics = {}
        if self.by_model and not self.blocks:
            metrics = self.encoder_update(inputs.runs, inputs.terminates)
        value_loss, q, target = self.value_update(batch)
        policy_loss = self.policy_update(batch.obs)
        return {
            **metrics,
            "value_loss": value_loss,
            "policy_loss": policy_loss,
            "q": tf.reduce_mean(q),
            "target_q": tf.reduce_mean(target),
            "reward_scale": tf.identity(self.reward_scale),
            "td_error": tf.reduce_max(tf.abs(q - target[:, None]), axis=1),  # LAP's priority before its floor and power
        }

    def copy_targets(self, reward_scale: tf.Tensor) -> tf.Tensor:
        """Every target_update_every updates (the first included): the targets become copies of the
        networks, and the reward scale the buffer's mean |reward|, the target's the one it replaces.
        The encoder's target too, and in the fused schedule the encoder becomes its trained copy; in
        the author's the block before this update has already copied it (`start_block`)."""
        pairs = [(self.policy_target, self.policy_net), (self.value_target, self.value)]
        if not self.blocks:  # in this order: the target takes the encoder before the copy replaces it
            pairs += [(self.encoder_target, self.encoder)] + ([(self.encoder, self.encoder_next)] if self.by_model else [])
        for target, online in pairs:
            _copy(target, online)
        if self.reward_scaling:
            self.target_reward_scale.assign(self.reward_scale)
            self.reward_scale.assign(reward_scale)
        return tf.constant(True)

    def action_input(self, action: tf.Tensor) -> tf.Tensor:
        """A stored action as the encoder takes it: one-hot for discrete actions, in [-1, 1] for continuous ones."""
        if self.discrete:
            return tf.one_hot(action, self.action_dim)
        return self.box.to_unit(action)

    def start_block(self) -> tf.Tensor:
        """Before the first encoder update of a block (author's schedule): the encoder target
        becomes the encoder, as the author's copy precedes its 250 encoder updates."""
        _copy(self.encoder_target, self.encoder)
        return tf.constant(True)

    def block_update(self, draw: RunsDraw) -> dict[str, tf.Tensor]:
        """One encoder update of a block (author's schedule)."""
        return self.encoder_update(draw.runs, draw.terminates)

    def encoder_update(self, runs, terminates: tf.Tensor) -> dict[str, tf.Tensor]:
        """The model loss unrolled along the runs, the next states embedded by the trained encoder's
        target (author: the encoder target, copied before the block; fused: the encoder in use,
        which the trained copy replaces at the next copy); with target_encoder=false, by the trained
        encoder itself, its gradients through them included."""
        b, h = tf.shape(runs.reward)[0], self.enc_horizon
        flat_next = tf.reshape(runs.next_obs, tf.concat([[-1], tf.shape(runs.next_obs)[2:]], 0))
        next_embedding = lambda encoder: tf.reshape(encoder.zs(flat_next), [b, h, -1])  # noqa: E731
        trained = self.encoder_trained
        if self.use_target_encoder:
            next_zs = tf.stop_gradient(next_embedding(self.encoder_target if self.blocks else self.encoder))
        actions = self.action_input(runs.action)
        variables = trained.trainable_variables
        with tf.GradientTape() as tape:
            if not self.use_target_encoder:
                next_zs = next_embedding(trained)
            loss, parts = losses.model_rollout_loss(
                trained.predict, trained.zs(runs.obs), actions, next_zs, runs.reward, runs.terminated, self.bins,
                self.dyn_weight, self.reward_weight, self.done_weight * terminates, self.reward_loss)
        self.encoder_optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
        return {"encoder_loss": loss, "dynamics_loss": parts["dynamics"], "reward_loss": parts["reward"],
                "done_loss": parts["done"]}

    def act_pre(self, pre_activation: tf.Tensor) -> tf.Tensor:
        """The policy's action from its pre-activation: tanh, or a Gumbel-softmax sample."""
        if self.discrete:
            uniform = self._tf_rng.uniform(tf.shape(pre_activation), minval=1e-20, maxval=1.0)
            return losses.gumbel_softmax(pre_activation, uniform, self.gumbel_tau)
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
        clipped, _ = tf.clip_by_global_norm(grads[:len(variables)], self.value_grad_clip)
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
            loss = -tf.reduce_mean(q) + self.pre_activ_weight * tf.reduce_mean(tf.square(pre))
        self.policy_optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
        return loss

    # --- acting -----------------------------------------------------------------------------------
    def act(self, obs: np.ndarray, explore: bool) -> np.ndarray:
        """Continuous: tanh of the policy, plus Gaussian noise when exploring, clipped, in the env's
        units. Discrete: the largest entry of the Gumbel-softmax (a sample of softmax(pre-activation),
        in evaluation too, as the author's `select_action`), plus noise when exploring."""
        pre = self.acting(obs)
        if self.discrete:
            gumbel = -np.log(-np.log(self._rng.uniform(1e-20, 1.0, pre.shape)))
            action = (pre + gumbel) / self.gumbel_tau
            action = np.exp(action - action.max(axis=-1, keepdims=True))
            action /= action.sum(axis=-1, keepdims=True)
            if explore:
                action = action + self._rng.normal(0.0, self.exploration_noise, action.shape)
            return action.argmax(axis=-1).astype(np.int64)
        action = np.tanh(pre)
        if explore:
            action = np.clip(action + self._rng.normal(0.0, self.exploration_noise, action.shape), -1.0, 1.0)
        return self.box.from_unit(action).astype(np.float32)

    def policy(self, obs: tf.Tensor) -> tf.Tensor:
        """For export, deterministic: tanh of the policy in the env's units, or its most likely action."""
        pre = self.acting.network(obs, training=False)
        if self.discrete:
            return tf.argmax(pre, axis=-1, output_type=tf.int32)
        return losses.scale_action(tf.tanh(pre), self.box.low, self.box.high)

    def host_metrics(self) -> dict[str, float]:
        return {}
