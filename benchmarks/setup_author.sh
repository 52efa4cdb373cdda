#!/usr/bin/env bash
# An algorithm author's own PyTorch code, the reference of tfrl's agent for benchmarks/<agent>_reference.py:
# the author's files and LICENSE at a pinned commit, copied into benchmarks/.<agent>-ref (a local copy
# that git ignores, not part of the project). It runs in SB3's venv (benchmarks/.venv-sb3, from
# setup_sb3.sh): torch, numpy and gymnasium are all those files need for vector observations.
#   bash benchmarks/setup_author.sh td7|mrq|drq
#   SRC=/path/to/clone bash benchmarks/setup_author.sh mrq   # a clone or bare git dir holding the commit, instead of GitHub
set -euo pipefail
agent="${1:-}"
case "$agent" in
  td7) repo=sfujim/TD7; commit=c1c280de1513f474488061b4cf39642b75dd84bd  # "Fix buffer when not using prioritization", the last commit
       files="TD7.py buffer.py LICENSE"; module=TD7 ;;
  mrq) repo=facebookresearch/MRQ; commit=8a44a7d4b1cf117e5da4bf8214d35b02aa68d68b  # "Small fix on terminal reward sequences", the last commit
       # with its published per-seed results, which benchmarks/published.py reads; LICENSE: CC BY-NC 4.0
       files="MRQ/MRQ.py MRQ/buffer.py MRQ/models.py MRQ/utils.py results/dmc_results.txt results/gym_results.txt results/atari_results.txt LICENSE"; module=MRQ ;;
  drq) repo=dmksjfl/DR.Q; commit=cc307a5a656d69382d7a069e6d4d53753bfe1017  # "update", the last commit
       # MR.Q's code base with DR.Q's changes, and its published per-seed results (results/drq.csv)
       files="DRQ/DRQ.py DRQ/buffer.py DRQ/models.py DRQ/utils.py results/drq.csv LICENSE"; module=DRQ ;;
  *) echo "usage: bash benchmarks/setup_author.sh td7|mrq|drq" >&2; exit 2 ;;
esac
here="$(cd "$(dirname "$0")" && pwd)"
dest="$here/.$agent-ref"
src="${SRC:-}"
if [ -z "$src" ]; then
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  git clone --quiet "https://github.com/$repo" "$tmp/src"
  src="$tmp/src"
fi
if ! git_dir="$(git -C "$src" rev-parse --absolute-git-dir 2>/dev/null)"; then  # a checkout's .git, or the bare dir itself
  echo "error: SRC=$src is not a git checkout or git dir of $repo" >&2
  exit 1
fi
if ! git --git-dir="$git_dir" cat-file -e "$commit^{commit}" 2>/dev/null; then
  echo "error: $src does not hold commit $commit of $repo; fetch it there, or leave SRC unset to clone GitHub's" >&2
  exit 1
fi
rm -rf "$dest"
mkdir -p "$dest"
for f in $files; do
  git --git-dir="$git_dir" show "$commit:$f" > "$dest/$(basename "$f")"
done
if [ "$agent" = drq ]; then
  # DR.Q's buffer keeps its arrays on CUDA unconditionally (MR.Q's asks CUDA how much memory it has):
  # on a machine without CUDA they live on the CPU, where the agent is. The only edit of the copy.
  grep -q "self.storage_device = torch.device('cuda')" "$dest/buffer.py"
  sed -i "s/self.storage_device = torch.device('cuda')/self.storage_device = torch.device('cuda' if torch.cuda.is_available() else 'cpu')/" "$dest/buffer.py"
fi
echo "$commit" > "$dest/COMMIT"  # <agent>_reference.py records it in summary.json
echo "$repo @ $commit -> $dest"
venv="$here/.venv-sb3"
if [ ! -x "$venv/bin/python" ]; then
  echo "benchmarks/.venv-sb3 is missing: run 'bash benchmarks/setup_sb3.sh' before benchmarks/${agent}_reference.py" >&2
  exit 1
fi
"$venv/bin/python" -c "import sys; sys.path.insert(0, '$dest'); import $module, torch; print('$module.Agent imports with torch', torch.__version__)"
