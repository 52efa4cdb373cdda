"""A tree of plain data as two files that load without executing code.

The tree holds None, bools, ints, floats, strings, numpy arrays and scalars, and lists, tuples,
deques and dicts of them. Its arrays go to an .npz read with `allow_pickle=False`, the rest to a
JSON document that names each array by key; tuples, deques, numpy scalars and dicts whose keys
are not plain strings are tagged objects, so the tree comes back with its types (a float32 scalar
stays one: the arithmetic of a resumed run is the arithmetic of the saved one). Anything else is
refused when written, naming where in the tree it sits, so that a new kind of state fails when a
checkpoint is first written, not when a resume finds it missing.
"""
from __future__ import annotations

import json
from collections import deque
from typing import Any

import numpy as np

TAG = "__plain__"


class PlainDataError(ValueError):
    """A value that is not plain data, or a file that does not hold a tree this module wrote."""


def encode(tree: Any) -> tuple[Any, dict[str, np.ndarray]]:
    """(a JSON-able document, the arrays it names) for `tree`."""
    arrays: dict[str, np.ndarray] = {}

    def array_ref(value: np.ndarray, where: str) -> str:
        if value.dtype.hasobject:
            raise PlainDataError(f"{where} is an array of Python objects, which only pickle could save")
        key = f"a{len(arrays)}"
        arrays[key] = value
        return key

    def enc(value: Any, where: str) -> Any:
        if value is None or isinstance(value, (bool, str)):
            return value
        if isinstance(value, np.generic):  # before int/float: np.float64 is a float
            return {TAG: "scalar", "ref": array_ref(np.asarray(value), where)}
        if isinstance(value, (int, float)):
            return value
        if isinstance(value, np.ndarray):
            return {TAG: "array", "ref": array_ref(value, where)}
        if isinstance(value, list):
            return [enc(v, f"{where}[{i}]") for i, v in enumerate(value)]
        if isinstance(value, tuple):
            return {TAG: "tuple", "items": [enc(v, f"{where}[{i}]") for i, v in enumerate(value)]}
        if isinstance(value, deque):
            return {TAG: "deque", "maxlen": value.maxlen, "items": [enc(v, f"{where}[{i}]") for i, v in enumerate(value)]}
        if isinstance(value, dict):
            if all(isinstance(k, str) and k != TAG for k in value):
                return {k: enc(v, f"{where}.{k}") for k, v in value.items()}
            return {TAG: "dict", "items": [[enc(k, f"{where} key"), enc(v, f"{where}[{k!r}]")] for k, v in value.items()]}
        raise PlainDataError(f"{where} is a {type(value).__module__}.{type(value).__qualname__}, not plain data")

    return enc(tree, "state"), arrays


def decode(doc: Any, arrays: dict[str, np.ndarray]) -> Any:
    """The tree `encode` turned into (doc, arrays)."""

    def array(node: dict) -> np.ndarray:
        ref = node.get("ref")
        if not isinstance(ref, str) or ref not in arrays:
            raise PlainDataError(f"the state names an array {ref!r} that its .npz does not hold")
        return arrays[ref]

    def dec(node: Any) -> Any:
        if isinstance(node, list):
            return [dec(v) for v in node]
        if not isinstance(node, dict):
            return node
        if TAG not in node:
            return {k: dec(v) for k, v in node.items()}
        kind = node[TAG]
        if kind == "array":
            return np.array(array(node))  # a copy: writable, and not a view of the file
        if kind == "scalar":
            return array(node)[()]
        if kind == "tuple":
            return tuple(dec(v) for v in node["items"])
        if kind == "deque":
            return deque((dec(v) for v in node["items"]), maxlen=node["maxlen"])
        if kind == "dict":
            return {_hashable(dec(k)): dec(v) for k, v in node["items"]}
        raise PlainDataError(f"the state holds an object of unknown kind {kind!r}")

    return dec(doc)


def _hashable(key: Any) -> Any:
    if isinstance(key, (list, dict, np.ndarray)):
        raise PlainDataError(f"the state holds a dict key that is not hashable: {key!r}")
    return key


def write(tree: Any, json_path: str, npz_path: str) -> None:
    doc, arrays = encode(tree)
    with open(json_path, "w") as f:
        json.dump(doc, f)
    np.savez(npz_path, **arrays)


def read(json_path: str, npz_path: str) -> Any:
    with open(json_path) as f:
        doc = json.load(f)
    with np.load(npz_path, allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files}
    return decode(doc, arrays)
