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
