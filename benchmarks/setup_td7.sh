#!/usr/bin/env bash
# The TD7 author's own PyTorch code (https://github.com/sfujim/TD7), the reference of agent=td7 for
# benchmarks/td7_reference.py: TD7.py, buffer.py and its LICENSE at a pinned commit, copied into
# benchmarks/.td7-ref (a local copy that git ignores, not part of the project). It runs in SB3's venv
# (benchmarks/.venv-sb3, from setup_sb3.sh): torch and numpy are all TD7.py needs.
#   bash benchmarks/setup_td7.sh
#   TD7_SRC=/path/to/TD7 bash benchmarks/setup_td7.sh   # a clone or bare git dir holding the commit, instead of GitHub
set -euo pipefail
commit=c1c280de1513f474488061b4cf39642b75dd84bd  # "Fix buffer when not using prioritization", the repo's last commit
here="$(cd "$(dirname "$0")" && pwd)"
dest="$here/.td7-ref"
src="${TD7_SRC:-}"
if [ -z "$src" ]; then
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  git clone --quiet https://github.com/sfujim/TD7 "$tmp/TD7"
  src="$tmp/TD7"
fi
if ! git_dir="$(git -C "$src" rev-parse --absolute-git-dir 2>/dev/null)"; then  # a checkout's .git, or the bare dir itself
  echo "error: TD7_SRC=$src is not a git checkout or git dir of sfujim/TD7" >&2
  exit 1
fi
if ! git --git-dir="$git_dir" cat-file -e "$commit^{commit}" 2>/dev/null; then
  echo "error: $src does not hold commit $commit of sfujim/TD7; fetch it there, or leave TD7_SRC unset to clone GitHub's" >&2
  exit 1
fi
rm -rf "$dest"
mkdir -p "$dest"
for f in TD7.py buffer.py LICENSE; do
  git --git-dir="$git_dir" show "$commit:$f" > "$dest/$f"
done
echo "$commit" > "$dest/COMMIT"  # td7_reference.py records it in summary.json
echo "sfujim/TD7 @ $commit -> $dest"
venv="$here/.venv-sb3"
if [ ! -x "$venv/bin/python" ]; then
  echo "benchmarks/.venv-sb3 is missing: run 'bash benchmarks/setup_sb3.sh' before benchmarks/td7_reference.py" >&2
  exit 1
fi
"$venv/bin/python" -c "import sys; sys.path.insert(0, '$dest'); import TD7, torch; print('TD7.Agent imports with torch', torch.__version__)"
