"""Mutation testing of the algorithms' parts: each declared mutation breaks one part on purpose (an
exact source edit), and the fast tests named with it should then fail. A mutation the tests miss
is a part no test holds.

    uv run python benchmarks/mutations.py [--only F1 Q9 ...] [--output labs/records/mutations.json]

The mutations are applied one at a time to a throwaway worktree of this checkout's HEAD (commit a
change first), never to the checkout itself. Each test set runs unmutated once first: a set that
fails there would catch every mutation, so the run stops. A mutation whose `old` text is not in
its file exactly once is stale (the code moved on): update its declaration. Writes the JSON after
each mutation, prints a table at the end; exits 1 if a mutation survives (but those marked
expected="survives", each with its reason), is stale, or its tests could not run (pytest exit > 1).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTEST = ["-m", "pytest", "-p", "no:cacheprovider", "-n", "0", "-q", "-x", "-m", "not slow"]


@dataclass(frozen=True)
class Mutation:
    name: str
    breaks: str  # what the edit breaks, in one line
    file: str
    old: str  # must occur exactly once in `file`
    new: str
    tests: tuple[str, ...]  # pytest arguments: files, node ids, -k
    expected: str = "caught"  # or "survives", with `why`
    why: str = ""


# few test sets, so that running each unmutated first stays cheap; -k leaves out the tests that
# train whole runs in subprocesses
BUFFERS = ("tests/test_frames.py", "tests/test_buffer.py", "tests/test_prioritized.py", "tests/test_nstep.py",
           "tests/test_mrq_replay.py", "-k", "not dqn_on_pixels")
ATARI = ("tests/test_atari.py", "tests/test_env_state.py", "-k", "atari")
PIXELS = ("tests/test_augment.py", "tests/test_atari.py", "tests/test_mrq_replay.py", "-k", "shift or frame_stack or mrqs_inputs")
DMC = ("tests/test_dmc.py", "-k", "not continuous_agents and not renumbered")
MRQ = ("tests/test_mrq.py", "-k", "not resume")
MRQ_REPLAY = ("tests/test_mrq_replay.py", "tests/test_mrq.py", "-k", "not resume")
DQN = ("tests/test_dqn.py",)
CONFIG = ("tests/test_config.py::test_mrq_replays_as_its_authors_lap_and_td7_resets_the_largest_priority",)
ADAM = ("tests/test_agents.py", "-k", "adam")
STATS = ("tests/test_aggregate.py", "-k", "not end_to_end and not bad_input")
TD3 = ("tests/test_td3.py", "tests/test_losses.py")
SAC = ("tests/test_sac.py", "tests/test_losses.py")
CROSSQ = ("tests/test_crossq.py", "-k", "not resume and not export")
TD7 = ("tests/test_td7.py", "-k", "not resumes_bit_exact")
DDPG = ("tests/test_losses.py",)
GA = ("tests/test_ga.py", "-k", "not resume and not export and not wandb")
PRIORITIES = ("tests/test_fast_paths.py", "-k", "source_error or driven_from_inside")
PPO = ("tests/test_ppo.py", "-k", "not learns")
A2C = ("tests/test_ppo.py", "-k", "rmsprop or a2c_is")
DRQ = ("tests/test_drq.py", "tests/test_golden.py::test_golden_run[drq]", "-k", "not learns")

F, U, P, RP = "buffers/frames.py", "buffers/uniform.py", "buffers/prioritized.py", "agents/replay.py"
ATR, DM, PX, AUG, MQ, DQ = "envs/atari.py", "envs/dmc.py", "envs/pixels.py", "agents/augment.py", "agents/mrq/agent.py", "agents/dqn.py"
ST, OPT = "analysis/stats.py", "agents/optimizers.py"
MRP, MST = "agents/mrq/replay.py", "agents/mrq/settings.py"
PR, PL, PA, NRM, RO = "agents/ppo/returns.py", "agents/ppo/losses.py", "agents/ppo/agent.py", "networks/normalization.py", \
    "training/rollout.py"
LS, T3, SA, XQ, T7 = "agents/losses.py", "agents/td3.py", "agents/sac.py", "agents/crossq.py", "agents/td7.py"
MUTATIONS = (
    Mutation("F1", "first-observation slots never given back", F, "self._free(rows[self.step[rows] == 0])", "pass", BUFFERS),
    Mutation("F2", "every row keeps a whole stack (each add starts episodes)", U,
             "starts = self._ended if len(self._ended) == n else np.ones(n, bool)", "starts = np.ones(n, bool)", BUFFERS),
    Mutation("F3", "a truncation does not start a new episode's frames", U, " | np.asarray(truncated, bool).reshape(n)", "",
             BUFFERS),
    Mutation("F4", "unsampled window (stack - 1) * stride", F, "return self.stack * max(", "return (self.stack - 1) * max(",
             BUFFERS),
    Mutation("F5", "padding frames from the newest frame of the first observation", F,
             "k - 1 + position[first[:, j], j]]", "k - 1]", BUFFERS),
    Mutation("F6", "next_obs position capped at stack", F, "self.step[rows] + 1, stride",
             "np.minimum(self.step[rows] + 1, self.stack), stride", BUFFERS),
    Mutation("F7", "prioritized add leaves the unsampled rows their priority", P,
             "self._stored += n\n        self._exclude_unsampled()", "self._stored += n", BUFFERS),
    Mutation("F8", "round-off guard of _rows_at off", P, "if skip:  # round-off", "if False:  # round-off", BUFFERS,
             "survives", "only a draw that float round-off lands on a priority-0 leaf takes it; no fast test forces one"),
    Mutation("N1", "n-step: a truncation counted as a termination", U,
             'terminated |= use & (d[row, c["terminated"]] > 0)', "terminated |= use & ended", BUFFERS),
    Mutation("N2", "n-step ignores the transitions available", U, "use = alive & (k <= available)", "use = alive", BUFFERS),
    Mutation("N5", "n-step: gamma applied for unused steps too", U, "scale = np.where(use, scale * self.gamma, scale)",
             "scale = scale * self.gamma", BUFFERS),
    Mutation("Q5", "a truncation at a run's last step cuts the run", U, " & (k < horizon - 1)", "", BUFFERS),
    Mutation("Q13", "mean |reward| over the capacity, not the rows held", U, "self._abs_reward_sum / max(len(self), 1)",
             "self._abs_reward_sum / self.capacity", BUFFERS),
    Mutation("Q23", "terminations added after keep_reward_stats not tracked", U,
             "self._terminated = self._terminated or bool(np.any(terminated))", "pass", BUFFERS),
    Mutation("Q36", "MR.Q's draws carry reward scale 1, not the buffer's", MRP,
             "return RunsBatch(batch, _draw_runs(buffer, batch_size, k, self.horizon),\n                         "
             "np.full(k, buffer.mean_abs_reward(),", "return RunsBatch(batch, _draw_runs(buffer, batch_size, k, "
             "self.horizon),\n                         np.full(k, 1.0,", BUFFERS),
    Mutation("Q44", "the author's schedule's draws carry reward scale 1", MRP,
             "ScaledBatch(buffer.sample_batches(batch_size, k), np.full(k, buffer.mean_abs_reward(),",
             "ScaledBatch(buffer.sample_batches(batch_size, k), np.full(k, 1.0,", BUFFERS),
    Mutation("Q45", "the mask opens the row H - 1 steps back", "buffers/mask.py", "opened = [idx[steps > h] - h * n]",
             "opened = [idx[steps >= h] - (h - 1) * n]", MRQ_REPLAY),
    Mutation("Q46", "the mask opens a truncated episode's tail", "buffers/mask.py", "np.flatnonzero(terminated)]",
             "np.flatnonzero(terminated | truncated)]", MRQ_REPLAY),
    Mutation("Q47", "a shut row opens with the largest priority at its opening", P,
             "self._priority[idx] = self._max_priority**self.alpha\n",
             "self._priority[:] = self._max_priority**self.alpha\n", MRQ_REPLAY),
    Mutation("Q48", "batches stratified whatever buffer.stratified says", P, "        if self.stratified:\n",
             "        if True:\n", MRQ_REPLAY),
    Mutation("A1", "Atari rewards not clipped", ATR, "return float(np.sign(reward))", "return float(reward)", ATARI),
    Mutation("A2", "Atari: no no-op starts", ATR, "noop_max=int(noop_max)", "noop_max=0", ATARI),
    Mutation("A3", "Atari: sticky actions never reach the ALE", ATR, "repeat_action_probability=float(sticky_action_prob)",
             "repeat_action_probability=0.0", ATARI),
    Mutation("A4", "Atari: one emulator frame a step", ATR, "frame_skip=frame_skip,", "frame_skip=1,", ATARI),
    Mutation("A6", "Atari: a lost life does not end the episode", ATR, "if 0 < lives < self.lives:", "if False:", ATARI),
    Mutation("A5", "the eval env ignores env.eval_kwargs", "training/builder.py",
             'kwargs = {**cfg.env.kwargs, **cfg.env.get("eval_kwargs", {})}', "kwargs = dict(cfg.env.kwargs)", ATARI),
    Mutation("D1", "DMC: an action repeat goes on past the episode's end", DM, "if time_step.last():\n                break",
             "if time_step.last():\n                pass", DMC),
    Mutation("D2", "DMC: never terminated", DM, "terminated = bool(ended and time_step.discount == 0.0)", "terminated = False",
             DMC),
    Mutation("D3", "DMC: the quadruped seen from camera 0, not 2", DM, '{"quadruped": 2}', '{"quadruped": 0}', DMC,
             "survives", "only a render shows the camera; no fast test compares renders"),
    Mutation("D4", "DMC: no mj_step1 after a restore", DM, "mujoco.mj_step1(model, data)", "pass", DMC),
    Mutation("D6", "DMC: reset's seed ignored", DM, "self.env.task.random.seed(seed % 2**32)", "pass", DMC),
    Mutation("P1", "a reset pads the frame stack with zeros", PX, "deque([frame] * self.k,",
             "deque([np.zeros_like(frame)] * (self.k - 1) + [frame],", PIXELS),
    Mutation("P2", "frame stack newest first", PX, "list(self.frames), axis=-1", "list(self.frames)[::-1], axis=-1", PIXELS),
    Mutation("G1", "shift offsets from [0, 2 pad), not [0, 2 pad]", AUG, "2 * self.pad + 1,", "2 * self.pad,", PIXELS),
    Mutation("G2", "acting shifts the observations", "agents/compiled.py", "explore: bool) -> np.ndarray:\n",
             "explore: bool) -> np.ndarray:\n        if self.random_shift is not None:\n"
             "            obs = self.random_shift(tf.constant(obs)).numpy()\n", PIXELS),
    Mutation("G3", "MR.Q's runs.next_obs not mapped (unshifted)", MRP, "next_obs=_over_steps(fn, runs.next_obs)",
             "next_obs=runs.next_obs", PIXELS),
    Mutation("G4", "MR.Q's runs.obs not mapped (unshifted)", MRP, "obs=fn(runs.obs),", "obs=runs.obs,", PIXELS),
    Mutation("G5", "shift pads with zeros, not the edge", AUG, "tf.repeat(first, pad, axis=axis), images, tf.repeat(last,",
             "tf.repeat(first * 0, pad, axis=axis), images, tf.repeat(last * 0,", PIXELS),
    Mutation("G6", "obs and next_obs share their shift offsets", RP,
             "return batch._replace(obs=fn(batch.obs), next_obs=fn(batch.next_obs))",
             "both, c = fn(tf.concat([batch.obs, batch.next_obs], -1)), batch.obs.shape[-1]\n"
             "        return batch._replace(obs=both[..., :c], next_obs=both[..., c:])", PIXELS),
    Mutation("Q7", "MR.Q's done term weighed before any termination", MQ, "s.done_weight * terminates,",
             "s.done_weight,", MRQ),
    Mutation("Q9", "fused: dynamics targets from the target encoder", MQ,
             "self.encoder_target if self.blocks else self.encoder))", "self.encoder_target))", MRQ),
    Mutation("Q9b", "fused: dynamics targets from the trained copy, gradients stopped", MQ,
             "self.encoder_target if self.blocks else self.encoder))", "self.encoder_target if self.blocks else "
             "self.encoder_next))", MRQ),
    Mutation("Q9c", "author's schedule: dynamics targets from the trained encoder, gradients stopped", MQ,
             "self.encoder_target if self.blocks else self.encoder))", "self.encoder))", MRQ),
    Mutation("Q40", "author's schedule: a block does not copy the encoder target first", MQ,
             "        copy_weights(self.encoder_target, self.encoder)\n        return tf.constant(True)",
             "        return tf.constant(True)", MRQ),
    Mutation("Q41", "author's schedule: the update copies the encoder target again", MQ,
             "pairs = [(self.policy_target, self.policy_net), (self.value_target, self.value)]\n",
             "pairs = [(self.policy_target, self.policy_net), (self.value_target, self.value)] + (\n"
             "            [(self.encoder_target, self.encoder)] if self.blocks else [])\n", MRQ),
    Mutation("Q42", "author's schedule: blocks one update late", "training/loop.py",
             "st.blocks <= (st.updates - st.pending) // self.block.every",
             "st.blocks < (st.updates - st.pending) // self.block.every",
             MRQ),
    Mutation("Q43", "author's schedule: a driven call runs on past a block due", "training/loop.py",
             "        if self.block_due():  # the call ends", "        if False:  # the call ends", MRQ),
    # the priorities' way back to the buffer, which the loop no longer sees (stop 66)
    Mutation("W1", "learn() hands no priorities back", "agents/compiled.py",
             'buffer.update_priorities(metrics.pop("td_error", None))', 'metrics.pop("td_error", None)', PRIORITIES),
    Mutation("W2", "the graph driver hands no priorities back between calls of its source", "training/driven.py",
             "self._buffer.update_priorities(np.array(td_error))", "pass", PRIORITIES),
    Mutation("Q11", "target copies one update late", MQ, "(self.updates - 1) % self.settings.target_update_every",
             "self.updates % self.settings.target_update_every", MRQ),
    Mutation("Q12", "LAP's td_error the mean of the heads' errors", MQ, '"td_error": tf.reduce_max(',
             '"td_error": tf.reduce_mean(', MRQ),
    Mutation("Q19", "the policy ascends value head 1 only", MQ, "-tf.reduce_mean(q) +", "-tf.reduce_mean(q[:, 0]) +", MRQ),
    Mutation("Q20", "no pre-activation penalty", MQ, " + self.settings.pre_activ_weight * tf.reduce_mean(tf.square(pre))", "", MRQ),
    Mutation("Q21", "value gradient not clipped", MQ, "clipped, _ = tf.clip_by_global_norm(grads[:len(variables)], "
             "self.settings.value_grad_clip)", "clipped = grads[:len(variables)]", MRQ),
    Mutation("Q22", "reward and done weights swapped", MQ, "s.reward_weight, s.done_weight * terminates,",
             "s.done_weight, s.reward_weight * terminates,", MRQ),
    Mutation("Q24", "discrete actions' noises not halved", MST, "half = 0.5 if discrete else 1.0", "half = 1.0", MRQ),
    Mutation("Q27", "target policy's noise not clipped", MQ, "tf.clip_by_value(self._tf_rng.normal(shape) * self.target_noise, "
             "-self.noise_clip, self.noise_clip)", "self._tf_rng.normal(shape) * self.target_noise", MRQ),
    Mutation("Q33", "Gumbel-softmax at tau 1", MQ, "uniform, self.settings.gumbel_tau)", "uniform, 1.0)", MRQ),
    Mutation("Q28", "MR.Q's replay resets its largest priority every 250", "conf/buffer/mrq.yaml", "max_reset_every: 0",
             "max_reset_every: 250", CONFIG),
    Mutation("N3", "dueling head without the mean subtracted", "networks/mlp.py",
             "v + a - keras.ops.mean(a, axis=-1, keepdims=True)", "v + a", DQN),
    Mutation("N4", "DQN's hard copies one update late", DQ, "self.updates % self.target_update_every == 0",
             "self.updates % self.target_update_every == 1", DQN),
    Mutation("N9", "DQN's gradient-norm clip off", DQ, "grads, _ = tf.clip_by_global_norm(grads, self.max_grad_norm)", "pass",
             DQN),
    Mutation("S1", "IQM cuts a quarter of the runs rounded up", ST, "cut = n // 4", "cut = (n + 3) // 4", STATS),
    Mutation("S2", "the score distribution counts scores equal to tau", ST, "reshape(-1, 1) > taus", "reshape(-1, 1) >= taus",
             STATS),
    Mutation("S3", "P(X > Y) counts a tie as a loss", ST, "+ 0.5 * np.sum(x[:, None] == y)", "", STATS),
    Mutation("O1", "Adam's one kernel with beta_1 and beta_2 swapped", OPT, "beta1=beta_1, beta2=beta_2",
             "beta1=beta_2, beta2=beta_1", ADAM),
    Mutation("O2", "every variable in ops (the one kernel never taken)", OPT,
             "if variable.shape.num_elements() >= self.ONE_KERNEL_FROM:", "if False:", ADAM),
    Mutation("O3", "Adam's epsilon before the bias correction (Keras' placement, not PyTorch's)", OPT,
             "epsilon = tf.cast(self.epsilon, dtype) * correction_2", "epsilon = tf.cast(self.epsilon, dtype)", ADAM),
    # the continuous-control agents, DQN's own parts, prioritized replay and the GA (stop 61)
    Mutation("T1", "TD3's target on the larger of the target critics", T3, "return tf.minimum(q1, q2)",
             "return tf.maximum(q1, q2)", TD3),
    Mutation("T2", "TD3's smoothing noise not clipped", T3,
             "clipped = tf.clip_by_value(noise, -noise_clip * half_range, noise_clip * half_range)", "clipped = noise", TD3),
    Mutation("T3", "TD3's smoothed target action not clipped to the box", T3,
             "return tf.clip_by_value(target_action + clipped, low, high)", "return target_action + clipped", TD3),
    Mutation("T4", "TD3's actor and targets step on every update", T3,
             "tf.cond(self.updates % self.policy_delay == 0,", "tf.cond(self.updates % 1 == 0,", TD3),
    Mutation("T5", "Polyak averaging with tau and 1 - tau swapped", LS, "t.assign(tau * o + (1.0 - tau) * t)",
             "t.assign((1.0 - tau) * o + tau * t)", TD3),
    Mutation("T6", "TD3's actor ascends Q2", T3, "deterministic_actor_loss(self.q(self.critic1, obs,",
             "deterministic_actor_loss(self.q(self.critic2, obs,", TD3),
    Mutation("T7", "TD3's smoothing noise not scaled by the action half-range", T3,
             "* self.target_noise * self.half_range", "* self.target_noise", TD3),
    Mutation("T8", "exploration noise not scaled by the action half-range", "agents/deterministic.py",
             "rng.normal(0.0, noise, size=action.shape) * box.half_np", "rng.normal(0.0, noise, size=action.shape)", TD3),
    Mutation("T9", "TD3's second critic never trained", LS, "return mse(q1, target, weight) + mse(q2, target, weight)",
             "return 2.0 * mse(q1, target, weight)", TD3),
    Mutation("T10", "the squared error ignores importance weights", LS,
             "return tf.reduce_mean(sq if weight is None else weight * sq)", "return tf.reduce_mean(sq)", TD3),
    Mutation("T11", "a termination does not stop the bootstrap", U,
             'discount = (self.gamma * (1.0 - rows[:, c["terminated"]])).astype(np.float32)',
             'discount = np.full(len(rows), self.gamma, np.float32)', BUFFERS),
    Mutation("T12", "TD3's target from the online first critic", T3,
             "self.q(self.critic1_target, batch.next_obs, next_action, training=False),",
             "self.q(self.critic1, batch.next_obs, next_action, training=False),", TD3),
    Mutation("T13", "TD3's target action from the online actor", T3, "self.target_policy(batch.next_obs), noise",
             "self.policy(batch.next_obs), noise", TD3),
    Mutation("H1", "SAC's temperature loss with its sign flipped", LS,
             "return -tf.reduce_mean(log_alpha * tf.stop_gradient(log_prob + target_entropy))",
             "return tf.reduce_mean(log_alpha * tf.stop_gradient(log_prob + target_entropy))", SAC),
    Mutation("H2", "SAC's target takes the temperature after its step", SA, "target = self.target(batch, alpha)",
             "target = self.target(batch, tf.exp(self.log_alpha))", SAC),
    Mutation("H3", "SAC's soft value without the entropy term", LS, "return next_q - alpha * next_log_prob",
             "return next_q", SAC),
    Mutation("H4", "SAC's actor on the larger critic", SA, "q_pi = tf.minimum(DeterministicActor.q(self.critic1, batch.obs",
             "q_pi = tf.maximum(DeterministicActor.q(self.critic1, batch.obs", SAC),
    Mutation("H5", "SAC's critic loss the whole sum, not half of it (SB3's)", SA,
             "critic_loss = 0.5 * losses.td3_critic_loss(", "critic_loss = losses.td3_critic_loss(", SAC),
    Mutation("H6", "target_entropy=auto is -|A| / 2", SA, "return -float(action_dim)",
             "return -0.5 * float(action_dim)", SAC),
    Mutation("H7", "the Gaussian's log density without its log std", LS,
             "gaussian = -0.5 * tf.square(noise) - log_std - 0.5 * tf.math.log(2.0 * np.pi)",
             "gaussian = -0.5 * tf.square(noise) - 0.5 * tf.math.log(2.0 * np.pi)", SAC),
    Mutation("H8", "the tanh correction added to log pi, not subtracted", LS,
             "tf.reduce_sum(gaussian - log_det, axis=-1)", "tf.reduce_sum(gaussian + log_det, axis=-1)", SAC),
    Mutation("H9", "tanh_epsilon ignored (always the exact correction)", LS, "    if epsilon:\n",
             "    if False:\n", SAC),
    Mutation("H10", "SAC's target critics never move", SA, "losses.soft_update(self._targets, self._online, self.tau)",
             "pass", SAC),
    Mutation("H11", "SAC's target action drawn at s, not s'", SA,
             "next_action, next_log_prob = self.sample(batch.next_obs)", "next_action, next_log_prob = self.sample(batch.obs)",
             SAC),
    Mutation("H12", "SAC's target from the online first critic", SA,
             "DeterministicActor.q(self.critic1_target, batch.next_obs, next_action, training=False)",
             "DeterministicActor.q(self.critic1, batch.next_obs, next_action, training=False)", SAC),
    Mutation("X1", "CrossQ's critics see s and s' in two passes, not one joint one", XQ,
             "    q = DeterministicActor.q(critic, tf.concat([batch.obs, batch.next_obs], axis=0),\n"
             "                             tf.concat([batch.action, next_action], axis=0), training=True)\n"
             "    return tf.split(q, 2, axis=0)",
             "    return (DeterministicActor.q(critic, batch.obs, batch.action, training=True),\n"
             "            DeterministicActor.q(critic, batch.next_obs, next_action, training=True))", CROSSQ),
    Mutation("X2", "CrossQ's next action drawn with the actor in training mode", XQ,
             "self.sample(batch.next_obs, training=False)", "self.sample(batch.next_obs, training=True)", CROSSQ),
    Mutation("X3", "CrossQ's actor loss on a critic in training mode", XQ,
             "q_pi = tf.minimum(DeterministicActor.q(self.critic1, obs, action, training=False),",
             "q_pi = tf.minimum(DeterministicActor.q(self.critic1, obs, action, training=True),", CROSSQ),
    Mutation("X4", "CrossQ's actor and temperature step on every update", XQ,
             "tf.cond(self.updates % self.policy_delay == 0,", "tf.cond(self.updates % 1 == 0,", CROSSQ),
    Mutation("X5", "CrossQ's critics on Adam's beta_1 of 0.9", XQ, "adam(critic_lr, beta_1)", "adam(critic_lr)", CROSSQ),
    Mutation("X6", "CrossQ's actor loss takes the temperature after its step", XQ,
             "actor_loss = losses.sac_actor_loss(alpha, log_prob, q_pi)",
             "actor_loss = losses.sac_actor_loss(tf.exp(self.log_alpha), log_prob, q_pi)", CROSSQ),
    Mutation("L11", "TD7's target from the online critic", T7,
             "self.q(self.critic_target, batch.next_obs, next_action, self.fixed_target_encoder, zs)",
             "self.q(self.critic, batch.next_obs, next_action, self.fixed_target_encoder, zs)", TD7),
    Mutation("L12", "TD7's target action from the online actor", T7, "self.pi(self.actor_target, batch.next_obs, zs)",
             "self.pi(self.actor, batch.next_obs, zs)", TD7),
    Mutation("L1", "TD7 without value clipping", T7, "next_q = tf.clip_by_value(next_q, self.target_min, self.target_max)",
             "next_q = next_q", TD7),
    Mutation("L2", "TD7 clips to the range seen so far, not the range at the last copy", T7,
             "next_q = tf.clip_by_value(next_q, self.target_min, self.target_max)",
             "next_q = tf.clip_by_value(next_q, self.value_min, self.value_max)", TD7),
    Mutation("L3", "TD7's fixed encoders copied in the wrong order", T7,
             "pairs += [(self.fixed_target_encoder, self.fixed_encoder), (self.fixed_encoder, self.encoder)]",
             "pairs += [(self.fixed_encoder, self.encoder), (self.fixed_target_encoder, self.fixed_encoder)]", TD7),
    Mutation("L4", "TD7's critic on the current encoder, not the fixed one", T7,
             "q = self.q(self.critic, batch.obs, action, self.fixed_encoder, fixed_zs)",
             "q = self.q(self.critic, batch.obs, action, self.encoder, fixed_zs)", TD7),
    Mutation("L5", "TD7's actor ascends the first critic only", T7,
             "deterministic_actor_loss(self.q(self.critic, obs, action, self.fixed_encoder, fixed_zs))",
             "deterministic_actor_loss(self.q(self.critic, obs, action, self.fixed_encoder, fixed_zs)[:, 0])", TD7),
    Mutation("L6", "LAP's loss a true Huber's, min_priority * (x - min_priority / 2) above it", LS,
             "0.5 * tf.square(td_abs), min_priority * td_abs)",
             "0.5 * tf.square(td_abs), min_priority * (td_abs - 0.5 * min_priority))", TD7),
    Mutation("L7", "TD7's targets copied one update late", T7, "tf.cond(self.updates % self.target_update_every == 0,",
             "tf.cond((self.updates - 1) % self.target_update_every == 0,", TD7),
    Mutation("L8", "TD7's priority the mean of the critics' errors", T7, '"td_error": tf.reduce_max(td, axis=1)',
             '"td_error": tf.reduce_mean(td, axis=1)', TD7),
    Mutation("L9", "policy checkpoints: an episode below the kept policy does not end the assessment",
             "training/assessment.py", "if state.min_return < state.best_min_return:", "if False:", TD7),
    Mutation("L10", "policy checkpoints: the kept return not scaled at the switch", "training/assessment.py",
             "best_min_return=state.best_min_return * settings.reset_weight", "best_min_return=state.best_min_return",
             TD7),
    Mutation("DG1", "DDPG's targets never move", "agents/ddpg.py",
             "losses.soft_update(self._targets, self._online, self.tau)", "pass", DDPG),
    Mutation("DG2", "DDPG's target from the online critic", "agents/ddpg.py",
             "next_q = self.q(self.critic_target, batch.next_obs,", "next_q = self.q(self.critic, batch.next_obs,", DDPG),
    Mutation("DG4", "DDPG's target action from the online actor", "agents/ddpg.py",
             "self.target_policy(batch.next_obs), training=False)", "self.policy(batch.next_obs), training=False)", DDPG),
    Mutation("DG3", "DDPG's critic weight decay not applied", "agents/ddpg.py", "total = critic_loss + penalty",
             "total = critic_loss", DDPG),
    Mutation("N10", "Double DQN off", DQ, "next_q_online = self.q(batch.next_obs, training=False) if self.double else None",
             "next_q_online = None", DQN),
    Mutation("N11", "Double DQN values the online network's argmax with the online network", LS,
             "return q_of_actions(next_q_target, tf.argmax(next_q_online,",
             "return q_of_actions(next_q_online, tf.argmax(next_q_online,", DQN),
    Mutation("N12", "epsilon's schedule never advances", DQ, "self.explore_steps.value += n",
             "self.explore_steps.value += 0", DQN),
    Mutation("N13", "Huber's loss without its linear part", LS, "per_sample = 0.5 * tf.square(quad) + delta * (err - quad)",
             "per_sample = 0.5 * tf.square(quad)", DQN),
    Mutation("R1", "importance weights not divided by the batch's largest", P,
             "weights = (weights / weights.max(axis=1, keepdims=True)).astype(np.float32)",
             "weights = weights.astype(np.float32)", BUFFERS),
    Mutation("R2", "prioritized replay's beta never anneals", P,
             "return self.beta0 + min(self._stored / self.beta_steps, 1.0) * (1.0 - self.beta0)", "return self.beta0",
             BUFFERS),
    Mutation("R3", "new transitions at priority 1, not the largest", P,
             "self._tree.set(idx, np.full(n, self._max_priority**self.alpha))", "self._tree.set(idx, np.full(n, 1.0))",
             BUFFERS),
    Mutation("R4", "updated priorities without the power alpha", P, "self._tree.set(self.last_indices, p**self.alpha)",
             "self._tree.set(self.last_indices, p)", BUFFERS),
    Mutation("E1", "the tournament's least fit contender wins", "agents/ga/operators.py",
             "winner = tf.argmax(tf.gather(fitness, contenders)", "winner = tf.argmin(tf.gather(fitness, contenders)", GA),
    Mutation("E2", "BLX crossover without its widening by alpha", "agents/ga/operators.py",
             "return lo - alpha * d + u * (1.0 + 2.0 * alpha) * d", "return lo + u * d", GA),
    Mutation("E3", "truncation selection from the least fit", "agents/ga/operators.py",
             "top = tf.math.top_k(fitness, k=keep).indices", "top = tf.math.top_k(-fitness, k=keep).indices", GA),
    Mutation("E4", "the policy network takes the least fit individual", "agents/ga/agent.py",
             "best = tf.argmax(fitness, output_type=tf.int32)", "best = tf.argmin(fitness, output_type=tf.int32)", GA),
    Mutation("PP1", "GAE's sum crosses into the next episode", PR, "gamma * lam * carry[t] * last", "gamma * lam * last", PPO),
    Mutation("PP2", "GAE bootstraps from a terminal state", PR, "rewards + gamma * keep * next_values", "rewards + gamma * next_values",
             PPO),
    Mutation("PP3", "the surrogate's ratio never clipped", PL, "-advantages * tf.clip_by_value(ratio, 1.0 - clip, 1.0 + clip)",
             "-advantages * ratio", PPO),
    Mutation("PP4", "the surrogate takes the optimistic side", PL, "tf.reduce_mean(tf.maximum(-advantages * ratio",
             "tf.reduce_mean(tf.minimum(-advantages * ratio", PPO),
    Mutation("PP5", "the clipped value loss takes the smaller error", PL, "tf.maximum(unclipped, tf.square(kept - returns))",
             "tf.minimum(unclipped, tf.square(kept - returns))", PPO),
    Mutation("PP6", "advantages normalized with the biased std", PL, "/ (n - 1.0))", "/ n)", PPO),
    Mutation("PP7", "agent.norm_adv ignored (never normalized)", PA,
             "adv = losses.normalized(advantages) if self.norm_adv else advantages", "adv = advantages", PPO),
    Mutation("PP8", "the learning rate never annealed", PA, "self.lr0 * (1.0 - progress) if self.anneal_lr",
             "self.lr0 * 1.0 if self.anneal_lr", PPO),
    Mutation("PP9", "the Gaussian's log density without its log std", PL, "- log_std - 0.5 * LOG_2PI", "- 0.5 * LOG_2PI", PPO),
    Mutation("PP10", "acting's log-probability without the log std", PA, "- self._log_std - 0.5 * losses.LOG_2PI",
             "- 0.5 * losses.LOG_2PI", PPO),
    Mutation("PP11", "reward scaling's return carried across terminations", NRM,
             "self.returns * self.gamma * (1.0 - np.asarray(terminated, np.float64)) + reward", "self.returns * self.gamma + reward",
             PPO),
    Mutation("PP12", "normalized observations not clipped", NRM, "out if clip is None else np.clip(out, -clip, clip)", "out",
             PPO),
    Mutation("PP13", "a time limit bootstraps from the next episode's first value", RO,
             'rollout["next_value"] = np.where(rollout["ended"], rollout["next_value"], following)',
             'rollout["next_value"] = following', PPO),
    Mutation("PP14", "the target KL never stops the epochs", PA, "tf.logical_and(more, kl <= self.target_kl)", "more", PPO),
    Mutation("PP15", "RMSprop's epsilon inside the square root (Keras')", OPT,
             "keras.ops.add(keras.ops.sqrt(v), self.epsilon)", "keras.ops.sqrt(keras.ops.add(v, self.epsilon))", A2C),
    Mutation("DQ1", "InfoNCE masked per sample, not as DR.Q's code", "agents/mrq/losses.py",
             "tf.reduce_mean(info_nce(zs, next_zs[:, i], infonce_temperature)) * tf.reduce_mean(alive)",
             "tf.reduce_mean(info_nce(zs, next_zs[:, i], infonce_temperature) * alive)", DRQ),
    Mutation("DQ2", "InfoNCE's logits without the temperature", "agents/mrq/losses.py",
             "logits = tf.matmul(predicted, target, transpose_b=True) / temperature",
             "logits = tf.matmul(predicted, target, transpose_b=True)", DRQ),
    Mutation("DQ3", "InfoNCE's targets not normalized", "agents/mrq/losses.py",
             "    target = tf.math.l2_normalize(target, axis=1, epsilon=1e-24)\n", "", DRQ),
    Mutation("DQ4", "the fade's floor counted twice for young rows", P,
             "np.maximum(self.fade ** np.arange(young) - self.fade_floor, 0.0)", "self.fade ** np.arange(young)", DRQ),
    Mutation("DQ5", "the young rows' ages off by one", P, "rows = (self._cursor - 1 - np.arange(m)) % self.capacity",
             "rows = (self._cursor - np.arange(m)) % self.capacity", DRQ),
    Mutation("DQ6", "the encoder's runs drawn without the fade", P,
             "        mass = self._mass()\n        return self._rows_at(self._rng.random(n) * mass[0], mass)",
             "        mass = (self._tree.total, None, None)\n        return self._rows_at(self._rng.random(n) * mass[0], mass)",
             DRQ),
    Mutation("DQ7", "value_grad_clip=0 clips every gradient to 0", MQ, "        if self.settings.value_grad_clip:\n",
             "        if True:\n", DRQ),
)


HANG_SECONDS = 600  # no test set takes a tenth of this unmutated


def pytest(tree: str, tests: tuple[str, ...]) -> tuple[int, float, str]:
    """Exit code, seconds and the first failing test of one pytest run in `tree`."""
    start = time.time()
    # no .pyc files: a mutant and the original of the same size written within a second would share one
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    try:
        proc = subprocess.run([sys.executable, *PYTEST, *tests], cwd=tree, env=env, capture_output=True, text=True,
                              timeout=HANG_SECONDS)
    except subprocess.TimeoutExpired:  # a mutant that makes a test hang is one the suite would not pass
        return 1, time.time() - start, f"timed out after {HANG_SECONDS} s: a test hangs"
    failed = re.search(r"^(?:FAILED|ERROR) (\S+)", proc.stdout, re.M)
    return proc.returncode, time.time() - start, failed.group(1) if failed else proc.stdout.strip()[-300:]


def run(m: Mutation, tree: str) -> dict:
    path = os.path.join(tree, m.file)
    with open(path) as f:
        source = f.read()
    found = source.count(m.old)
    if found != 1:
        return {"result": "stale", "seconds": 0.0,
                "detail": "stale: old text not found" if not found else f"stale: old text found {found} times"}
    with open(path, "w") as f:
        f.write(source.replace(m.old, m.new))
    try:
        code, seconds, detail = pytest(tree, m.tests)
    finally:
        with open(path, "w") as f:
            f.write(source)
    # 1: tests failed; any other code (a collection error, no test selected) says nothing of the mutant
    result = {0: "survived", 1: "caught"}.get(code, f"error (pytest exit {code})")
    return {"result": result, "seconds": round(seconds, 1), "detail": detail}


def ok(m: Mutation, r: dict) -> bool:
    return r["result"] == "caught" or (r["result"] == "survived" and m.expected == "survives")


def table(chosen: list[Mutation], results: dict) -> None:
    print("| name | breaks | result | s | caught by (or why not) |\n|---|---|---|---|---|")
    for m in chosen:
        r = results[m.name]
        marked = {"survived": "survived, as expected", "caught": "caught (marked to survive: drop the mark)"}
        shown = marked.get(r["result"], r["result"]) if m.expected == "survives" else r["result"]
        why = m.why if r["result"] == "survived" else r["detail"].splitlines()[-1] if r["detail"] else ""
        print(f"| {m.name} | {m.breaks} | {shown if ok(m, r) else '**' + shown + '**'} | {r['seconds']:.0f} | {why} |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", nargs="*", default=None, help="mutation names (default: all)")
    p.add_argument("--output", default=os.path.join(ROOT, "labs", "records", "mutations.json"))
    a = p.parse_args()
    names = [m.name for m in MUTATIONS]
    if len(set(names)) != len(names) or (a.only and set(a.only) - set(names)):
        sys.exit(f"error: duplicate or unknown mutation names; the declared ones: {' '.join(names)}")
    chosen = [m for m in MUTATIONS if not a.only or m.name in a.only]
    os.makedirs(os.path.dirname(os.path.abspath(a.output)), exist_ok=True)
    start, results, baseline = time.time(), {}, {}
    with tempfile.TemporaryDirectory(prefix="mutations-") as tmp:
        tree = os.path.join(tmp, "tree")
        subprocess.run(["git", "-C", ROOT, "worktree", "add", "--detach", "--quiet", tree, "HEAD"], check=True)
        try:
            head = subprocess.run(["git", "-C", tree, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
            for tests in dict.fromkeys(m.tests for m in chosen):
                code, seconds, detail = pytest(tree, tests)
                baseline[" ".join(tests)] = round(seconds, 1)
                print(f"unmutated: {' '.join(tests)}: exit {code}, {seconds:.0f} s", flush=True)
                if code != 0:
                    sys.exit(f"error: these tests do not pass unmutated at {head[:7]}, so they would catch any "
                             f"mutation; fix them first:\n  {' '.join(tests)}\n  {detail}")
            for m in chosen:
                results[m.name] = r = run(m, tree)
                print(f"{m.name}: {r['result']} ({r['seconds']:.0f} s) {r['detail'] if r['result'] != 'survived' else ''}",
                      flush=True)
                with open(a.output, "w") as f:  # after each mutation: a run stopped early keeps what it found
                    json.dump({"commit": head, "wall_seconds": round(time.time() - start, 1), "pytest": PYTEST,
                               "baseline_seconds": baseline, "complete": len(results) == len(chosen),
                               "mutations": [{**asdict(m), **results[m.name]} for m in chosen if m.name in results]},
                              f, indent=1)
        finally:
            subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force", tree])
    print(f"\n{len(chosen)} mutations of {head[:7]} in {(time.time() - start) / 60:.1f} min")
    table(chosen, results)
    bad = [m.name for m in chosen if not ok(m, results[m.name])]
    print(f"survived, stale or not run: {' '.join(bad)}" if bad else "every mutation caught (or expected to survive)")
    print(f"written: {a.output}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
