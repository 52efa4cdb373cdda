"""The checks of an agent's settings, written once: each refuses a bad value with a ValueError that
names the key, what it must be and what it got (training.builder turns it into a ConfigError)."""
from __future__ import annotations

import math
from typing import Callable, Iterable


def flag(value, key: str) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"agent.{key} must be true or false, got {value!r}")
    return value


def integer(value, key: str, rule: str = "an integer >= 1", holds: Callable[[int], bool] = lambda n: n >= 1) -> int:
    """An int (not a bool) for which `holds` is true; `rule` says so in words, with a usual value."""
    if isinstance(value, bool) or not isinstance(value, int) or not holds(value):
        raise ValueError(f"agent.{key} must be {rule}, got {value!r}")
    return value


def number(value, key: str, rule: str, holds: Callable[[float], bool]) -> float:
    """A finite real number (not a bool) for which `holds` is true, as a float."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or not holds(value):
        raise ValueError(f"agent.{key} must be {rule}, got {value!r}")
    return float(value)


def choice(value, key: str, options: Iterable[str], hint: str = "") -> str:
    options = list(options)
    if value not in options:
        raise ValueError(f"agent.{key} must be one of {', '.join(map(str, options))}{hint}, got {value!r}")
    return value
