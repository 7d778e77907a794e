#!/usr/bin/env bash
# Stops what scripts/k8s/up.sh started, in reverse start order (kwok, scheduler, controller
# manager, API server, etcd): SIGTERM, up to 20 s (KUBEFACTS_K8S_STOP_GRACE) each, then SIGKILL.
# Tolerant of processes that already stopped or never started; only signals pids whose command
# line names this checkout's run dir, so a reused pid is never hit. Keeps the run dir (logs,
# certificates) for a post-mortem; up.sh clears it.
# Usage: scripts/k8s/down.sh [--quiet]
set -euo pipefail
# shellcheck source=scripts/k8s/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

QUIET=0
[[ "${1:-}" == "--quiet" ]] && QUIET=1
say() { [[ "$QUIET" == 1 ]] || info "$@"; }

if [[ ! -f "$K8S_PIDS" ]]; then
  say "nothing running"
  exit 0
fi
T0="$(now)"
stopped=()
for name in "${K8S_COMPONENTS[@]}"; do
  if is_running "$name"; then stopped+=("$name"); fi
done
# The three clients first, together (they only talk to the API server), then the API server,
# then etcd.
for name in kwok kube-scheduler kube-controller-manager; do
  if is_running "$name"; then kill -TERM "$(get_pid "$name")" 2>/dev/null || true; fi
done
for (( i = ${#K8S_COMPONENTS[@]} - 1; i >= 0; i-- )); do
  name="${K8S_COMPONENTS[$i]}"
  stop_one "$name"
done
rm -f "$K8S_RUN/env"
if [[ "${#stopped[@]}" == 0 ]]; then
  say "nothing running"
else
  say "stopped ${stopped[*]} in $(elapsed "$T0") s"
fi
