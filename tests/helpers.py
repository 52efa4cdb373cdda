"""Small helpers the agent tests share."""
import numpy as np

from buffers.types import Batch


def compiled(agent, compile="graph", **speed):
    """`agent` with its update compiled, as the loop drives it (speed settings as keywords)."""
    from agents.compiled import CompiledAgent

    return CompiledAgent(agent, compile=compile, **speed)


def stack(batches) -> Batch:
    """Batches stacked on a leading axis, as the learner takes them."""
    return Batch(*(np.stack(xs) for xs in zip(*batches)))


def one(batch) -> Batch:
    """One batch as the learner takes it: K = 1 stacked batches."""
    return stack([batch])


def run_loop(cfg):
    """Train the composed `cfg` in this process without loggers; (summary, run), its envs closed."""
    from omegaconf import OmegaConf

    from training.builder import build_run, loop_settings
    from training.loggers import MultiLogger
    from training.loop import train

    OmegaConf.resolve(cfg)
    run = build_run(cfg)
    try:
        summary = train(run.learner, run.buffer, run.envs, run.eval_env, loop_settings(cfg, run.speed),
                        MultiLogger([]), driver=run.driver)
    finally:
        run.close()
    return summary, run
