"""The training envs' state for a checkpoint, mid-episode, as plain data.

A resumed run rebuilds its envs from the config, then `set_env_state` writes the saved state into
them. The state is read off the vector env's tree of wrappers and envs generically, so a wrapper
added later is saved without code here: every attribute that holds plain data (numbers, strings,
arrays, and lists, tuples, deques and dicts of them: step counters, autoreset flags, episode
statistics, a classic-control env's `state`), every numpy Generator (as its bit generator's
state), the RNG of every space, and a MuJoCo env's simulator data (each of MjData's arrays and its
time: the state, the warm start, the controls and the derived quantities an env may read before
its next step, as Ant's reward reads the torso's position). An env whose state lives in objects
of its own kinds (a MinAtar game, the Arcade Learning Environment) declares it: it implements
`OwnState`, and its `saved_state()` is kept as it is. Objects of other kinds (models, renderers,
specs) are what the config rebuilds. Nothing here unpickles: a checkpoint's envs
cannot run code when loaded. Async envs live in subprocesses and are not saved (resume resets
them). (Checkpoints before this format pickled the envs; they are never loaded.)
"""
from __future__ import annotations

import copy
from collections import deque
from typing import Any, Protocol, runtime_checkable

import gymnasium as gym
import numpy as np

FORMAT = "tfrl-envs-2"
# plain attributes that are construction arguments or descriptions, not state
_NOT_STATE = frozenset({"_saved_kwargs", "_ezpickle_args", "_ezpickle_kwargs", "metadata", "_metadata",
                        "fullpath", "env_fns"})
BIT_GENERATORS = {name: getattr(np.random, name) for name in ("PCG64", "PCG64DXSM", "MT19937", "Philox", "SFC64")}


class EnvStateError(ValueError):
    """Saved env state that does not fit the envs this run built."""


@runtime_checkable
class OwnState(Protocol):
    """An env that saves state the generic walk cannot see (it lives in objects of the env's own)."""

    def saved_state(self) -> dict[str, Any]:
        """That state as plain data."""

    def restore_state(self, state: dict[str, Any]) -> None:
        """Write `saved_state`'s record back."""


def is_plain(value: Any) -> bool:
    if value is None or isinstance(value, (bool, int, float, str, np.generic)):
        return not (isinstance(value, np.generic) and value.dtype.hasobject)
    if isinstance(value, np.ndarray):
        return not value.dtype.hasobject
    if isinstance(value, (list, tuple, deque)):
        return all(is_plain(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, (str, int)) and is_plain(v) for k, v in value.items())
    return False


def _generator(state: dict | None, current: Any) -> np.random.Generator | None:
    """A Generator in `state` (the one there already when its bit generator is of the same kind)."""
    if state is None:
        return None
    name = state.get("bit_generator") if isinstance(state, dict) else None
    if name not in BIT_GENERATORS:
        raise EnvStateError(f"the saved envs hold a generator of unknown kind {name!r}")
    if not (isinstance(current, np.random.Generator) and type(current.bit_generator).__name__ == name):
        current = np.random.Generator(BIT_GENERATORS[name]())
    current.bit_generator.state = state
    return current


def _space_state(space: gym.Space) -> dict:
    rng = space._np_random
    sub = getattr(space, "spaces", None)
    items = sub.items() if isinstance(sub, dict) else enumerate(sub or ())
    return {"rng": None if rng is None else rng.bit_generator.state,
            "sub": {str(k): _space_state(s) for k, s in items if isinstance(s, gym.Space)}}


def _set_space_state(space: gym.Space, state: dict) -> None:
    space._np_random = _generator(state["rng"], space._np_random)
    sub = getattr(space, "spaces", None)
    items = sub.items() if isinstance(sub, dict) else enumerate(sub or ())
    for key, s in items:
        if str(key) in state["sub"]:
            _set_space_state(s, state["sub"][str(key)])


def mjdata_state(data) -> dict:
    arrays = {k: getattr(data, k).copy() for k in dir(data)
              if not k.startswith("_") and isinstance(getattr(data, k), np.ndarray)}
    return {"time": float(data.time), "arrays": arrays}


def set_mjdata_state(data, state: dict) -> None:
    """Each saved array into MjData's own, where its size is this data's: those sized by the
    contacts of a step (the constraint rows) are rebuilt from the state by the next step."""
    data.time = state["time"]
    for name, value in state["arrays"].items():
        target = getattr(data, name, None)
        if isinstance(target, np.ndarray) and target.shape == np.shape(value):
            target[...] = value


def _is_env(value: Any) -> bool:
    return isinstance(value, (gym.Env, gym.vector.VectorEnv))


def _node_state(obj: Any) -> dict:
    node = {"type": type(obj).__name__, "attrs": {}, "generators": {}, "spaces": {}, "mujoco": {}, "envs": {}}
    if isinstance(obj, OwnState):
        node["own"] = obj.saved_state()
    for name, value in vars(obj).items():
        if name in _NOT_STATE:
            continue
        if _is_env(value):
            node["envs"][name] = [_node_state(value)]
        elif isinstance(value, list) and value and all(_is_env(v) for v in value):
            node["envs"][name] = [_node_state(v) for v in value]
        elif isinstance(value, np.random.Generator):
            node["generators"][name] = value.bit_generator.state
        elif isinstance(value, gym.Space):
            node["spaces"][name] = _space_state(value)
        elif type(value).__name__ == "MjData":
            node["mujoco"][name] = mjdata_state(value)
        elif is_plain(value):
            node["attrs"][name] = copy.deepcopy(value)
    return node


def _set_node_state(obj: Any, node: dict, where: str) -> None:
    if node.get("type") != type(obj).__name__:
        raise EnvStateError(f"{where} was a {node.get('type')} when saved, but this run built a {type(obj).__name__}")
    for name, saved in node["envs"].items():
        value = getattr(obj, name, None)
        children = value if isinstance(value, list) else [value]
        if len(children) != len(saved) or not all(_is_env(c) for c in children):
            raise EnvStateError(f"{where}.{name} holds {len(saved)} env(s) in the checkpoint but not in this run")
        for i, (child, state) in enumerate(zip(children, saved)):
            _set_node_state(child, state, f"{where}.{name}[{i}]" if isinstance(value, list) else f"{where}.{name}")
    for name, value in node["attrs"].items():
        if name.startswith("__"):
            raise EnvStateError(f"{where} holds a saved attribute {name!r}, which no env state has")
        setattr(obj, name, copy.deepcopy(value))
    for name, state in node["generators"].items():
        setattr(obj, name, _generator(state, getattr(obj, name, None)))
    for name, state in node["spaces"].items():
        space = getattr(obj, name, None)
        if not isinstance(space, gym.Space):
            raise EnvStateError(f"{where}.{name} was a space when saved, but is not one in this run")
        _set_space_state(space, state)
    for name, state in node["mujoco"].items():
        data = getattr(obj, name, None)
        if type(data).__name__ != "MjData":
            raise EnvStateError(f"{where}.{name} held MuJoCo data when saved, but does not in this run")
        set_mjdata_state(data, state)
    if "own" in node:
        if not isinstance(obj, OwnState):
            raise EnvStateError(f"{where} saved state of its own when saved, but this run's cannot take it")
        obj.restore_state(node["own"])


def _async(envs) -> bool:
    while envs is not None:
        if isinstance(envs, gym.vector.AsyncVectorEnv):
            return True
        envs = getattr(envs, "env", None)
    return False


def env_state(envs) -> dict | None:
    """The vector env's state as plain data, or None when it cannot be saved (async: its envs are
    subprocesses)."""
    if _async(envs):
        return None
    return {"format": FORMAT, "envs": _node_state(envs)}


def set_env_state(envs, state: dict) -> None:
    """Write `env_state`'s record into `envs`, built from the same config: every sub-env goes on
    from where it was."""
    if not (isinstance(state, dict) and state.get("format") == FORMAT):
        raise EnvStateError("the checkpoint's env state is not of this format")
    _set_node_state(envs, state["envs"], "envs")

