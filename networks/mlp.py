"""Multi-layer perceptrons for actors, critics and Q-networks."""
from __future__ import annotations

from collections.abc import Sequence

import keras


def mlp(
    input_dim: int,
    output_dim: int,
    hidden: Sequence[int] = (256, 256),
    activation: str = "relu",
    output_activation: str | None = None,
    l2: float = 0.0,
    name: str = "mlp",
) -> keras.Model:
    """A dense network `input_dim -> hidden... -> output_dim`, built (its weights exist on return).

    `l2` adds a per-layer L2 weight penalty through Keras regularizers (the original DDPG's
    critic weight decay); the penalty appears in `model.losses`.
    """
    if any(int(h) < 1 for h in hidden):
        raise ValueError(f"network.hidden sizes must be positive integers, got {list(hidden)}")
    regularizer = keras.regularizers.L2(l2) if l2 > 0 else None
    inputs = keras.Input(shape=(int(input_dim),), name=f"{name}_in")
    x = inputs
    for i, units in enumerate(hidden):
        x = keras.layers.Dense(
            int(units), activation=activation, kernel_regularizer=regularizer, name=f"{name}_h{i}"
        )(x)
    outputs = keras.layers.Dense(
        int(output_dim),
        activation=output_activation,
        kernel_regularizer=regularizer,
        name=f"{name}_out",
    )(x)
    return keras.Model(inputs, outputs, name=name)
