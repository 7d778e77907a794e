#!/usr/bin/env bash
# Stops what scripts/infra/up.sh started, and the three-node cluster of scripts/infra/cluster.sh
# when one runs: SIGTERM, up to 20 s for a clean shutdown, then SIGKILL.
# Tolerant of processes that already stopped (or never started). Only signals pids whose
# command line carries our marker, so a reused pid is never hit.
# Usage: scripts/infra/down.sh [--quiet] [--cluster-only]
#   --cluster-only: stop only the cluster (what `cluster.sh down` runs); logs are kept.
set -euo pipefail
# shellcheck source=scripts/infra/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

QUIET=0 CLUSTER_ONLY=0
for arg in "$@"; do
  case "$arg" in
  --quiet) QUIET=1 ;;
  --cluster-only) CLUSTER_ONLY=1 ;;
  *) fail usage "unknown argument '$arg' (usage: down.sh [--quiet] [--cluster-only])" ;;
  esac
done
say() { [[ "$QUIET" == 1 ]] || info "$@"; }

GRACE_SECONDS="${KUBEFACTS_INFRA_STOP_GRACE:-20}"

declare -a names=() pids=() markers=()
# signal_stop NAME PIDFILE MARKER: SIGTERM to the pid in PIDFILE if it is ours, then forget
# the pid file.
signal_stop() {
  local name="$1" pidfile="$2" marker="$3" pid
  [[ -f "$pidfile" ]] || return 0
  pid="$(cat "$pidfile" 2>/dev/null || true)"
  if pid_is_ours "$pid" "$marker"; then
    kill -TERM "$pid" 2>/dev/null || true
    names+=("$name")
    pids+=("$pid")
    markers+=("$marker")
  fi
  rm -f "$pidfile"
}
if [[ "$CLUSTER_ONLY" == 0 ]]; then
  for entry in "kafka:$KAFKA_MARKER" "registry:$REGISTRY_MARKER" "alertmanager:$ALERTMANAGER_MARKER"; do
    signal_stop "${entry%%:*}" "$RUN_DIR/${entry%%:*}.pid" "${entry#*:}"
  done
fi
for n in "${CLUSTER_NODES[@]}"; do
  signal_stop "cluster-node-$n" "$CLUSTER_DIR/node-$n/kafka.pid" "$CLUSTER_MARKER-$n"
done
# Without its env file, nothing treats the cluster as up (cluster.sh start-node refuses).
rm -f "$CLUSTER_DIR/env"

if [[ "${#pids[@]}" == 0 ]]; then
  say "nothing running"
  exit 0
fi

# Whether any of our servers still runs (a zombie has an empty command line, so it does not
# count as running).
any_alive() {
  local i
  for i in "${!pids[@]}"; do
    if pid_is_ours "${pids[$i]}" "${markers[$i]}"; then return 0; fi
  done
  return 1
}

T0="$(now)"
deadline=$((SECONDS + GRACE_SECONDS))
while ((SECONDS < deadline)); do
  any_alive || break
  sleep 0.2
done

for i in "${!pids[@]}"; do
  if pid_is_ours "${pids[$i]}" "${markers[$i]}"; then
    printf 'infra: %s (pid %s) still running after %s s, sending SIGKILL\n' "${names[$i]}" "${pids[$i]}" "$GRACE_SECONDS" >&2
    kill -KILL "${pids[$i]}" 2>/dev/null || true
  fi
done
# A killed process is gone once the kernel reaps it; give it a moment so ports are free.
for _ in $(seq 1 50); do
  any_alive || break
  sleep 0.1
done
[[ "$CLUSTER_ONLY" == 1 ]] || rm -f "$RUN_DIR/env"
say "stopped ${names[*]} in $(elapsed "$T0") s"
