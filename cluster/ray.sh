#!/usr/bin/env bash
# A Ray cluster on this one host: a head node that only schedules (no CPUs of its own) and worker
# nodes, each its own raylet as on separate machines. For a developer by hand and for the tests
# (tests/test_ray.py):
#
#   uv sync --extra ray                # Ray and Hydra's Ray launcher (a large install, so opt-in)
#   bash cluster/ray.sh up [WORKERS]   # head + WORKERS worker nodes (default 1), the host's cores split among them
#   export RAY_ADDRESS=127.0.0.1:6390  # what `up` prints: hydra/launcher=ray_cluster and `ray status` read it
#   bash cluster/ray.sh status         # ray status: nodes, CPUs in use, pending jobs
#   bash cluster/ray.sh down           # stop the head and its worker nodes
#
# Idempotent: `up` on a running cluster starts only the nodes that are not running (a worker node
# that died, as a pre-empted machine does, is started again). The state dir is $TFRL_RAY_DIR
# (default /tmp/tfrl-ray): Ray's session and logs, and the worker nodes' pid files. The head listens
# on $TFRL_RAY_PORT (default 6390). `ray` is the project's: run this with the venv's bin on PATH
# (`uv run bash cluster/ray.sh up`), or it looks in ./.venv/bin.
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${TFRL_RAY_DIR:-/tmp/tfrl-ray}"
port="${TFRL_RAY_PORT:-6390}"
address="127.0.0.1:$port"
export RAY_USAGE_STATS_ENABLED=0
# A one-host cluster for development: no token authentication, whether or not a ~/.ray/auth_token
# exists (Ray 2.5x enables it for a head that finds one, and its worker nodes then cannot join).
export RAY_AUTH_MODE="${RAY_AUTH_MODE:-disabled}"

die() { echo "error: $*" >&2; exit 1; }

find_ray() {
  ray="$(command -v ray || true)"
  [ -n "$ray" ] || { [ -x .venv/bin/ray ] && ray="$PWD/.venv/bin/ray"; }
  if [ -z "$ray" ]; then
    echo "error: Ray is not installed in this environment. Install it with \`uv sync --extra ray\` (Ray and Hydra's Ray launcher), then run this again." >&2
    exit 3  # the tests skip, with this message
  fi
}

alive() { [ -f "$1" ] && [ "$(awk '{print $3}' "/proc/$(cat "$1")/stat" 2>/dev/null)" ] \
  && [ "$(awk '{print $3}' "/proc/$(cat "$1")/stat")" != Z ]; }
head_answers() { timeout 20 "$ray" status --address "$address" >/dev/null 2>&1; }
raylets() { { pgrep -f "ray/core/src/ray/raylet/raylet" || true; } | sort; }
cpus_up() { timeout 20 "$ray" status --address "$address" 2>/dev/null | awk '/ CPU$/ {split($1, a, "/"); print int(a[2])}'; }

up() {
  local workers="${1:-1}" cpus before after deadline
  [[ "$workers" =~ ^[1-9][0-9]*$ ]] || die "usage: bash cluster/ray.sh up [WORKERS], WORKERS a positive number, got '$workers'"
  find_ray
  mkdir -p "$dir"
  exec 9>"$dir/up.lock"
  flock 9  # two callers at once (the tests' workers): one brings the cluster up, the other finds it up
  cpus=$(( $(getconf _NPROCESSORS_ONLN) / workers )); [ "$cpus" -ge 1 ] || cpus=1
  if ! alive "$dir/head.pid" || ! head_answers; then
    "$ray" stop --force >/dev/null 2>&1 || true  # a head that died leaves its workers without a cluster
    rm -f "$dir"/*.pid
    before="$(raylets)"
    "$ray" start --head --port="$port" --num-cpus=0 --temp-dir="$dir/session" --disable-usage-stats \
      --dashboard-host=127.0.0.1 9>&- >"$dir/head.log" 2>&1 || die "the Ray head did not start: see $dir/head.log"
    comm -13 <(echo "$before") <(raylets) | head -1 > "$dir/head.pid"
  fi
  for i in $(seq "$workers"); do
    alive "$dir/worker-$i.pid" && continue
    before="$(raylets)"
    "$ray" start --address="$address" --num-cpus="$cpus" 9>&- >"$dir/worker-$i.log" 2>&1 \
      || die "worker node $i did not start: see $dir/worker-$i.log"
    comm -13 <(echo "$before") <(raylets) | head -1 > "$dir/worker-$i.pid"
  done
  deadline=$((SECONDS + 60))
  until [ "$(cpus_up)" = $((cpus * workers)) ]; do
    [ $SECONDS -lt $deadline ] || die "the Ray nodes started but the cluster did not show $((cpus * workers)) CPUs within 60 s: see $dir/session/session_latest/logs"
    sleep 1
  done
  echo "Ray is up: a head and $workers worker node(s) of $cpus CPU(s) at $address (dashboard: http://127.0.0.1:8265)"
  echo "export RAY_ADDRESS=$address"
}

down() {
  find_ray
  "$ray" stop --force >/dev/null 2>&1 || true
  rm -f "$dir"/*.pid
  echo "Ray is down (logs in $dir/session)"
}

case "${1:-}" in
  up) shift; up "$@" ;;
  down) down ;;
  status) find_ray; "$ray" status --address "$address" ;;
  *) die "usage: bash cluster/ray.sh up [WORKERS] | down | status" ;;
esac
