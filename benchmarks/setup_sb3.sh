#!/usr/bin/env bash
# The Stable-Baselines3 side of benchmarks/compare_sb3.py and benchmarks/sb3_learning.py, in its own venv
# (benchmarks/.venv-sb3), so SB3 and PyTorch never enter the project's environment.
#   bash benchmarks/setup_sb3.sh
# Installs a CPU build of PyTorch where pip finds one (a local wheel, or PyTorch's CPU index), else
# PyPI's default build. Pass another interpreter with PYTHON=python3.12.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
venv="$here/.venv-sb3"
"${PYTHON:-python3}" -m venv "$venv"
"$venv/bin/pip" install --quiet --upgrade pip
# torch first, so SB3's "torch>=..." is satisfied by it rather than pulling a CUDA build
"$venv/bin/pip" install --quiet "torch==${TORCH_VERSION:-2.13.0}" \
  || "$venv/bin/pip" install --quiet torch --index-url https://download.pytorch.org/whl/cpu
# hydra-core: benchmarks/sb3_learning.py composes its runs from conf/ as train.py does
# sb3-contrib: CrossQ, the reference of agent=crossq
"$venv/bin/pip" install --quiet "stable-baselines3>=2.4" "sb3-contrib>=2.4" "gymnasium[mujoco]>=1.1,<2" "hydra-core>=1.3,<1.4" \
  "ale-py>=0.12,<0.13" "opencv-python-headless>=4.9"  # Atari: the ALE and SB3's AtariWrapper
"$venv/bin/pip" install --quiet "dm-control>=1.0.50,<2" "minatar>=1.0.15,<1.1"  # env=dmc, env=minatar
"$venv/bin/python" -c "import torch, stable_baselines3 as sb3; print('SB3', sb3.__version__, 'torch', torch.__version__, 'threads', torch.get_num_threads())"
