"""The README's first command on every Python it promises: uv.lock must hold a wheel of every
compiled package for each Python version pyproject.toml admits (a package built from source at
install, as labmaze on 3.13 needs Bazel, fails a new user's `uv run` before anything runs), and the
README and docs must promise those versions, no more."""
from __future__ import annotations

import os
import re

from helpers import ROOT

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: pytest's own dependency
    import tomli as tomllib


def _load(name: str) -> dict:
    with open(os.path.join(ROOT, name), "rb") as f:
        return tomllib.load(f)


def admitted_minors() -> list[int]:
    """The 3.x minors pyproject.toml's requires-python admits (of the form >=3.a,<3.b)."""
    spec = _load("pyproject.toml")["project"]["requires-python"]
    low, high = re.fullmatch(r">=3\.(\d+),\s*<3\.(\d+)", spec.replace(" ", "")).groups()
    return list(range(int(low), int(high)))


def serves(wheel: str, minor: int) -> bool:
    """Whether a wheel file installs on CPython 3.<minor> (its python and ABI tags)."""
    python, abi = wheel[:-len(".whl")].split("-")[-3:-1]
    for tag in python.split("."):
        if tag in ("py3", "py2", f"py3{minor}") and abi == "none":
            return True
        if tag == f"cp3{minor}":
            return True
        if abi == "abi3" and tag.startswith("cp3") and int(tag[3:]) <= minor:
            return True
    return False


def installed_on(lock: dict, minor: int, groups=("dev",), extras=("ray",)) -> list[dict]:
    """The locked packages `uv sync --extra ray` installs on CPython 3.<minor> on Linux x86_64 (as CI
    does): the project's dependencies, its dev group and the extras, followed through the lock's
    dependency edges whose markers hold there, each at the version whose fork admits that Python."""
    from packaging.markers import Marker

    env = {"python_version": f"3.{minor}", "python_full_version": f"3.{minor}.0", "sys_platform": "linux",
           "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
           "implementation_name": "cpython", "platform_python_implementation": "CPython", "extra": ""}
    holds = lambda marker: marker is None or Marker(marker).evaluate(env)  # noqa: E731
    versions: dict[str, list[dict]] = {}
    for package in lock["package"]:
        versions.setdefault(package["name"], []).append(package)

    def pick(edge: dict) -> dict:
        found = [p for p in versions[edge["name"]] if edge.get("version") in (None, p["version"])
                 and any(holds(m) for m in p.get("resolution-markers", [None]))]
        assert len(found) == 1, (edge, minor)
        return found[0]

    (root,) = [p for p in lock["package"] if p["source"].get("virtual") == "."]
    edges = list(root.get("dependencies", []))
    edges += [e for g in groups for e in root.get("dev-dependencies", {}).get(g, [])]
    edges += [e for x in extras for e in root.get("optional-dependencies", {}).get(x, [])]
    seen: dict[tuple, dict] = {}
    while edges:
        edge = edges.pop()
        if not holds(edge.get("marker")):
            continue
        package = pick(edge)
        key = (package["name"], package["version"], tuple(edge.get("extra", ())))
        if key in seen:
            continue
        seen[key] = package
        edges += package.get("dependencies", [])
        edges += [e for x in edge.get("extra", ()) for e in package.get("optional-dependencies", {}).get(x, [])]
    return list({(p["name"], p["version"]): p for p in seen.values()}.values())


def test_the_lock_holds_a_wheel_of_every_compiled_package_for_every_admitted_python():
    lock, minors = _load("uv.lock"), admitted_minors()
    assert minors[0] == 10 and len(minors) >= 3, minors
    missing = []
    for minor in minors:
        for package in installed_on(lock, minor):
            files = [w["url"].rsplit("/", 1)[-1] for w in package.get("wheels", [])]
            # a package with no wheel at all is pure Python, built from its sdist anywhere (antlr4, rliable)
            if files and not any(serves(w, minor) for w in files):
                missing.append(f"{package['name']} {package['version']} on 3.{minor}")
    assert not missing, f"uv.lock has no wheel of {', '.join(missing)}: narrow requires-python or change the dependency"


def test_the_walk_of_the_lock_finds_what_a_python_installs():
    """labmaze (dm-control's) has no wheel for 3.13: the check would catch a lock that admits it."""
    lock = _load("uv.lock")
    names = {p["name"]: p["version"] for p in installed_on(lock, 11)}
    assert {"labmaze", "dm-control", "tensorflow", "mujoco", "pytest", "ray"} <= set(names)
    assert names["numpy"] != {p["name"]: p["version"] for p in installed_on(lock, 10)}["numpy"]  # a fork
    labmaze = [p for p in installed_on(lock, 12) if p["name"] == "labmaze"][0]
    assert not any(serves(w["url"].rsplit("/", 1)[-1], 13) for w in labmaze["wheels"])


def test_the_readme_promises_the_pythons_the_lock_serves():
    minors = admitted_minors()
    promised = f"3.{minors[0]}–3.{minors[-1]}"
    with open(os.path.join(ROOT, "README.md")) as f:
        readme = f.read()
    assert f"Python ({promised})" in readme, f"README.md should promise Python {promised}"
    with open(os.path.join(ROOT, "docs", "training.md")) as f:
        assert f"Python {promised.replace('–', '-')}" in f.read()


def test_the_wheel_tags_are_read_as_pip_reads_them():
    assert serves("numpy-2.4.6-cp312-cp312-manylinux_2_27_x86_64.whl", 12)
    assert not serves("numpy-2.4.6-cp312-cp312-manylinux_2_27_x86_64.whl", 11)
    assert serves("cryptography-46.0.0-cp311-abi3-manylinux_2_34_x86_64.whl", 12)
    assert not serves("cryptography-46.0.0-cp311-abi3-manylinux_2_34_x86_64.whl", 10)
    assert serves("absl_py-2.5.1-py3-none-any.whl", 13) and serves("six-1.17.0-py2.py3-none-any.whl", 10)
    assert not serves("labmaze-1.0.6-cp312-cp312-manylinux_2_17_x86_64.whl", 13)
