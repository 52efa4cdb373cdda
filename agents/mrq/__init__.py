"""MR.Q (Fujimoto, D'Oro, Zhang, Tian & Rabbat, ICLR 2025, "Towards General-Purpose Model-Free
Reinforcement Learning"), following the author's code (facebookresearch/MRQ: `Agent.train()`,
`train_encoder`, `train_rl`); and DR.Q (Lyu et al. 2026), this agent with the settings of
conf/agent/drq.yaml (an InfoNCE term in `losses.model_rollout_loss`, faded replay in
buffers/prioritized.py; docs/algorithms.md lists them). One set of hyper-parameters for vectors and pixels, continuous and
discrete actions. A reader follows it in three files: agent.py (the updates and their schedule),
losses.py (the maths) and networks.py; settings.py holds its settings, replay.py what it draws.

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
- Two-hot values beyond the end bins go to the end bin (the author's code divides by 0 there).
"""
from agents.mrq.agent import MRQ
from agents.mrq.networks import MRQNetworks

__all__ = ["MRQ", "MRQNetworks"]
