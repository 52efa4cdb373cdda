"""MR.Q's settings (`agent.*` of agent=mrq), the author's values by default (MRQ.py's
`Hyperparameters`), each checked once with a message that names the key and what it must be."""
from __future__ import annotations

from dataclasses import dataclass

from agents import checks

MRQS = " (the first is MR.Q's)"
SCHEDULES = ("author", "fused")


@dataclass(frozen=True)
class Settings:
    target_update_every: int = 250  # updates between target copies, and the encoder's block
    exploration_noise: float = 0.2  # these three halved for discrete actions, which live in [0, 1]
    target_noise: float = 0.2
    noise_clip: float = 0.3
    dyn_weight: float = 1.0  # the encoder loss's terms: next zs, reward, termination
    reward_weight: float = 0.1
    done_weight: float = 0.1
    infonce_weight: float = 0.0  # DR.Q's contrastive term on the model's predictions (0.1 in DR.Q; 0: MR.Q)
    infonce_temperature: float = 0.1
    min_priority: float = 1.0  # LAP's floor (the buffer's copy: conf/buffer/mrq.yaml)
    enc_horizon: int = 5  # steps the model is unrolled
    q_horizon: int = 3  # steps of the value's multi-step return
    encoder_lr: float = 1e-4
    encoder_wd: float = 1e-4
    value_lr: float = 3e-4
    value_wd: float = 1e-4
    value_grad_clip: float = 20.0  # the value's global gradient norm; 0: not clipped (DR.Q)
    policy_lr: float = 3e-4
    policy_wd: float = 1e-4
    gumbel_tau: float = 10.0  # the Gumbel-softmax's temperature (discrete actions)
    pre_activ_weight: float = 1e-5  # the policy's penalty on its pre-activation
    num_bins: int = 65  # the reward's two-hot bins, evenly spaced in symlog space ...
    lower: float = -10.0  # ... from symexp(lower) to symexp(upper)
    upper: float = 10.0
    # the paper's design study (Sec. 5.2), each switch one of its variants
    reward_loss: str = "two_hot"  # or mse
    reward_scaling: bool = True
    target_value: str = "min"  # or mean ("No min")
    value_loss: str = "huber"  # or mse
    target_encoder: bool = True
    encoder_loss: str = "model"  # or value ("No MR")
    encoder_schedule: str = "author"  # or fused (the agent's docstring)

    def __post_init__(self):
        checks.integer(self.target_update_every, "target_update_every",
                       "an integer >= 1 (250 in MR.Q: updates between target copies)")
        for key in ("enc_horizon", "q_horizon"):
            checks.integer(getattr(self, key), key, "an integer >= 1 (MR.Q: 5 for the encoder, 3 for the value)")
        checks.integer(self.num_bins, "num_bins", "an integer >= 2 (65 in MR.Q)", lambda n: n >= 2)
        if not (isinstance(self.lower, (int, float)) and isinstance(self.upper, (int, float)) and self.lower < self.upper):
            raise ValueError(f"agent.lower and agent.upper must be numbers with lower < upper (the reward bins span "
                             f"symexp(lower) to symexp(upper); -10 and 10 in MR.Q), got {self.lower!r} and {self.upper!r}")
        for key, usual in (("dyn_weight", 1), ("reward_weight", 0.1), ("done_weight", 0.1), ("pre_activ_weight", 1e-5),
                           ("exploration_noise", 0.2), ("target_noise", 0.2), ("noise_clip", 0.3),
                           ("infonce_weight", "0; 0.1 in DR.Q"), ("value_grad_clip", "20; 0: not clipped, DR.Q")):
            checks.number(getattr(self, key), key, f"a number >= 0 ({usual} in MR.Q)", lambda x: x >= 0)
        for key, usual in (("gumbel_tau", 10), ("min_priority", 1), ("infonce_temperature", "DR.Q: 0.1")):
            checks.number(getattr(self, key), key, f"a number > 0 ({usual} in MR.Q)", lambda x: x > 0)
        for key, options in (("reward_loss", ("two_hot", "mse")), ("target_value", ("min", "mean")),
                             ("value_loss", ("huber", "mse")), ("encoder_loss", ("model", "value"))):
            checks.choice(getattr(self, key), key, options, MRQS)
        checks.flag(self.reward_scaling, "reward_scaling")
        checks.flag(self.target_encoder, "target_encoder")
        checks.choice(self.encoder_schedule, "encoder_schedule", SCHEDULES,
                      " (author: 250 encoder updates in a row at each target copy, as the author's code; "
                      "fused: one per update)")

    @property
    def by_model(self) -> bool:
        """The encoder trains by its model's losses (MR.Q), not by the value's ("No MR")."""
        return self.encoder_loss == "model"

    @property
    def blocks(self) -> bool:
        """The encoder trains in blocks, the author's schedule (without a model: never)."""
        return self.by_model and self.encoder_schedule == "author"

    def noises(self, discrete: bool) -> tuple[float, float, float]:
        """Exploration noise, target noise and its clip: halved for discrete actions, which live in
        [0, 1], not [-1, 1] (the author's)."""
        half = 0.5 if discrete else 1.0
        return half * self.exploration_noise, half * self.target_noise, half * self.noise_clip

    def check_model(self, linear_model: bool) -> None:
        """Refuse a change to the encoder's model that encoder_loss=value leaves untrained."""
        idle = [key for key, on in (("agent.target_encoder=false", not self.target_encoder),
                                    ("agent.reward_loss=mse", self.reward_loss == "mse"),
                                    ("network.linear_model=false", not linear_model)) if on]
        if not self.by_model and idle:
            raise ValueError(f"{', '.join(idle)} changes the encoder's model, which agent.encoder_loss=value (the "
                             f"design study's No MR) does not train; leave it out, or set agent.encoder_loss=model.")
