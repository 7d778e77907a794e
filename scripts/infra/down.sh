#!/usr/bin/env bash
# Stops what scripts/infra/up.sh started: SIGTERM, up to 20 s for a clean shutdown, then SIGKILL.
# Tolerant of processes that already stopped (or never started). Only signals pids whose
# command line carries up.sh's marker, so a reused pid is never hit.
# Usage: scripts/infra/down.sh [--quiet]
set -euo pipefail
# shellcheck source=scripts/infra/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

QUIET=0
[[ "${1:-}" == "--quiet" ]] && QUIET=1
say() { [[ "$QUIET" == 1 ]] || info "$@"; }

GRACE_SECONDS="${KUBEFACTS_INFRA_STOP_GRACE:-20}"

declare -a names=() pids=() markers=()
for entry in "kafka:$KAFKA_MARKER" "registry:$REGISTRY_MARKER" "alertmanager:$ALERTMANAGER_MARKER"; do
  name="${entry%%:*}"
  marker="${entry#*:}"
  pidfile="$RUN_DIR/$name.pid"
  [[ -f "$pidfile" ]] || continue
  pid="$(cat "$pidfile" 2>/dev/null || true)"
  if pid_is_ours "$pid" "$marker"; then
    kill -TERM "$pid" 2>/dev/null || true
    names+=("$name")
    pids+=("$pid")
    markers+=("$marker")
  fi
  rm -f "$pidfile"
done

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
rm -f "$RUN_DIR/env"
say "stopped ${names[*]} in $(elapsed "$T0") s"
