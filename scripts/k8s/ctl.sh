#!/usr/bin/env bash
# Stops, starts or restarts one piece of the control plane started by scripts/k8s/up.sh, with
# the command line up.sh stored in .cache/k8s/run/cmd/<name>.sh (same flags, same ports).
# For example, to let kube-controller-manager's Lease expire and another term begin:
#   scripts/k8s/ctl.sh stop kube-controller-manager
#   sleep 20   # longer than its 15 s lease
#   scripts/k8s/ctl.sh start kube-controller-manager   # waits for /healthz and the Lease
# Usage: scripts/k8s/ctl.sh stop|start|restart|status NAME
#   NAME: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok
# start waits until the piece is healthy again (and, for the controller manager and the
# scheduler, until their Lease has a holder whose renewTime is newer than the start).
set -euo pipefail
# shellcheck source=scripts/k8s/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

usage() { printf 'usage: %s stop|start|restart|status %s\n' "$0" "$(IFS='|'; echo "${K8S_COMPONENTS[*]}")" >&2; exit 2; }
[[ $# == 2 ]] || usage
action="$1" name="$2"
printf '%s\n' "${K8S_COMPONENTS[@]}" | grep -qx -- "$name" || usage
[[ -f "$K8S_RUN/cmd/$name.sh" ]] || fail "$name" "no control plane in $K8S_RUN (run scripts/k8s/up.sh first)"
LOG="$K8S_LOGS/$name.log"

# The secure port from the stored command line.
port_of() { grep -o -- '--secure-port=[0-9]*' "$K8S_RUN/cmd/$name.sh" | cut -d= -f2; }

await_ready() {
  local t0="$1" port start_iso
  start_iso="$(date -u -d "@${t0%.*}" +%Y-%m-%dT%H:%M:%SZ)"
  until {
    case "$name" in
    etcd) curl -sf --max-time 2 "$(grep -o -- '--listen-client-urls=[^ ]*' "$K8S_RUN/cmd/etcd.sh" | cut -d= -f2)/health" | jq -e '.health == "true"' ;;
    kube-apiserver) [[ "$(kapi GET /readyz 2>/dev/null)" == ok ]] ;;
    kube-controller-manager | kube-scheduler)
      port="$(port_of)"
      [[ "$(curl -sk --max-time 2 "https://127.0.0.1:$port/healthz")" == ok ]] &&
        kapi GET "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/$name" |
        jq -e --arg t "$start_iso" '(.spec.holderIdentity // "") != "" and (.spec.renewTime // "" | .[0:19]) >= ($t | .[0:19])'
      ;;
    kwok) true ;;
    esac
  } >/dev/null 2>&1; do
    is_running "$name" || fail "$name" "the $name process exited (see its log)" "$LOG"
    [[ "$(elapsed "$t0" | cut -d. -f1)" -lt "$READY_TIMEOUT" ]] ||
      fail "$name" "not ready $READY_TIMEOUT s after its start" "$LOG"
    sleep 0.2
  done
  info "$name ready again in $(elapsed "$t0") s (pid $(get_pid "$name"))"
}

do_stop() {
  local t0
  t0="$(now)"
  if ! is_running "$name"; then
    info "$name: not running"
    return 0
  fi
  stop_one "$name"
  info "$name stopped in $(elapsed "$t0") s"
}
do_start() {
  local t0
  if is_running "$name"; then
    info "$name: already running (pid $(get_pid "$name"))"
    return 0
  fi
  t0="$(now)"
  launch "$name"
  await_ready "$t0"
}

case "$action" in
stop) do_stop ;;
start) do_start ;;
restart) do_stop; do_start ;;
status)
  if is_running "$name"; then info "$name: running (pid $(get_pid "$name"))"; else info "$name: stopped"; exit 1; fi
  ;;
*) usage ;;
esac
