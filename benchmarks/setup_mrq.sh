#!/usr/bin/env bash
# The MR.Q author's own PyTorch code (https://github.com/facebookresearch/MRQ), the reference of
# agent=mrq for benchmarks/mrq_reference.py: MRQ.py, buffer.py, models.py, utils.py and the LICENSE
# (CC BY-NC 4.0) at a pinned commit, copied into benchmarks/.mrq-ref (a local copy that git ignores,
# not part of the project). It runs in SB3's venv (benchmarks/.venv-sb3, from setup_sb3.sh): torch,
# numpy and gymnasium are all those files need for vector observations.
#   bash benchmarks/setup_mrq.sh
#   MRQ_SRC=/path/to/MRQ bash benchmarks/setup_mrq.sh   # a clone or bare git dir holding the commit, instead of GitHub
set -euo pipefail
commit=8a44a7d4b1cf117e5da4bf8214d35b02aa68d68b  # "Small fix on terminal reward sequences", the repo's last commit
here="$(cd "$(dirname "$0")" && pwd)"
dest="$here/.mrq-ref"
src="${MRQ_SRC:-}"
if [ -z "$src" ]; then
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  git clone --quiet https://github.com/facebookresearch/MRQ "$tmp/MRQ"
  src="$tmp/MRQ"
fi
if ! git_dir="$(git -C "$src" rev-parse --absolute-git-dir 2>/dev/null)"; then  # a checkout's .git, or the bare dir itself
  echo "error: MRQ_SRC=$src is not a git checkout or git dir of facebookresearch/MRQ" >&2
  exit 1
fi
if ! git --git-dir="$git_dir" cat-file -e "$commit^{commit}" 2>/dev/null; then
  echo "error: $src does not hold commit $commit of facebookresearch/MRQ; fetch it there, or leave MRQ_SRC unset to clone GitHub's" >&2
  exit 1
fi
rm -rf "$dest"
mkdir -p "$dest"
for f in MRQ.py buffer.py models.py utils.py; do
  git --git-dir="$git_dir" show "$commit:MRQ/$f" > "$dest/$f"
done
git --git-dir="$git_dir" show "$commit:LICENSE" > "$dest/LICENSE"
echo "$commit" > "$dest/COMMIT"  # mrq_reference.py records it in summary.json
echo "facebookresearch/MRQ @ $commit -> $dest"
venv="$here/.venv-sb3"
if [ ! -x "$venv/bin/python" ]; then
  echo "benchmarks/.venv-sb3 is missing: run 'bash benchmarks/setup_sb3.sh' before benchmarks/mrq_reference.py" >&2
  exit 1
fi
"$venv/bin/python" -c "import sys; sys.path.insert(0, '$dest'); import MRQ, torch; print('MRQ.Agent imports with torch', torch.__version__)"
