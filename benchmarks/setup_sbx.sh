#!/usr/bin/env bash
# The SBX side (Stable-Baselines Jax, https://github.com/araffin/sbx) of benchmarks/compare_sb3.py
# `--with sbx`, in its own venv (benchmarks/.venv-sbx), so JAX never enters the project's environment.
#   bash benchmarks/setup_sbx.sh
# SBX needs Stable-Baselines3 and so PyTorch: a CPU build where pip finds one, as setup_sb3.sh.
# Pass another interpreter with PYTHON=python3.12.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
venv="$here/.venv-sbx"
"${PYTHON:-python3}" -m venv "$venv"
"$venv/bin/pip" install --quiet --upgrade pip
"$venv/bin/pip" install --quiet "torch==${TORCH_VERSION:-2.13.0}" \
  || "$venv/bin/pip" install --quiet torch --index-url https://download.pytorch.org/whl/cpu
"$venv/bin/pip" install --quiet "sbx-rl>=0.20" "jax[cpu]" "gymnasium[mujoco]>=1.1,<2" "hydra-core>=1.3,<1.4" \
  "ale-py>=0.12,<0.13" "opencv-python-headless>=4.9"  # Atari: the ALE and SB3's AtariWrapper
"$venv/bin/pip" install --quiet "dm-control>=1.0.50,<2" "minatar>=1.0.15,<1.1"  # env=dmc, env=minatar
"$venv/bin/python" -c "import jax, sbx, stable_baselines3 as sb3; print('SBX', sbx.__version__, 'SB3', sb3.__version__, 'jax', jax.__version__, jax.devices())"
