# shellcheck shell=bash disable=SC2034  # the variables are used by the scripts that source this
# Shared helpers for scripts/k8s/*.sh. Source it; it defines no side effects beyond variables
# and functions.

K8S_SCRIPTS="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$K8S_SCRIPTS/../.." && pwd)"

# Versions. Kubernetes from the Go module proxy (k8s.io/kubernetes vX.Y.Z, its staging modules
# at v0.Y.Z); etcd at the release that Kubernetes version pins in its own go.mod; kwok pinned.
K8S_VERSION="${KUBEFACTS_K8S_VERSION:-v1.34.4}"
ETCD_VERSION="${KUBEFACTS_ETCD_VERSION:-v3.6.4}"
KWOK_VERSION="${KUBEFACTS_KWOK_VERSION:-v0.8.0}"
# helm (helm.sh/helm/v4), for the chart in deploy/helm/kubefacts: built and cached beside the
# control plane's binaries; up.sh exports its path as KUBEFACTS_HELM.
HELM_VERSION="${KUBEFACTS_HELM_VERSION:-v4.3.2}"

CACHE_DIR="$REPO_ROOT/.cache"
# The built binaries are shared by every checkout on the machine (a fresh clone on a warm
# machine rebuilds nothing); the run directory belongs to this checkout.
K8S_BUILD_CACHE="${KUBEFACTS_K8S_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kubefacts/k8s}"
K8S_HOME="$K8S_BUILD_CACHE/$K8S_VERSION"
K8S_BIN="$K8S_HOME/bin"
K8S_RUN="$CACHE_DIR/k8s/run"
K8S_LOGS="$K8S_RUN/logs"
KWOK_STAGES="$REPO_ROOT/deploy/kwok"

# Processes, in start order. down.sh stops them in reverse order.
K8S_COMPONENTS=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok)

# Seconds to wait for each piece to become ready.
READY_TIMEOUT="${KUBEFACTS_K8S_READY_TIMEOUT:-120}"

LOG_PREFIX=k8s
FAIL_TAIL_LINES=30
# shellcheck source=scripts/common.sh
source "$K8S_SCRIPTS/../common.sh"


# pid_is_ours PID MARKER: true if PID is alive and its command line carries MARKER.
pid_is_ours() {
  local pid="$1" marker="$2" try cmdline
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  # A process between two execs (setsid → bash → the binary) briefly shows an empty
  # cmdline: up.sh once took a starting kube-apiserver for dead. Look again before saying no.
  for try in 1 2 3 4 5; do
    [[ -r "/proc/$pid/cmdline" ]] || return 1
    cmdline="$({ tr '\0' ' ' <"/proc/$pid/cmdline"; } 2>/dev/null)"
    [[ -n "$cmdline" ]] && break
    sleep 0.1
  done
  grep -q -F -- "$marker" <<<"$cmdline"
}

# The marker of every process we start: its own binary path under this checkout's cache plus
# this checkout's run dir appear on its command line, so a reused pid (or another checkout's
# control plane) never matches.
marker_of() { printf '%s' "$K8S_RUN/"; }

# ------------------------------------------------------------------------------------------
# Processes. Each component's command line is stored in $K8S_RUN/cmd/<name>.sh (written by
# up.sh) so that ctl.sh can restart it with the same flags; its pid is a line "<name> <pid>"
# in $K8S_PIDS; its output is appended to $K8S_LOGS/<name>.log.
# ------------------------------------------------------------------------------------------
K8S_PIDS="$K8S_RUN/pids"

# get_pid NAME: the recorded pid of NAME (or nothing).
get_pid() { awk -v n="$1" '$1 == n { print $2 }' "$K8S_PIDS" 2>/dev/null | tail -n 1; }

# set_pid NAME PID (PID empty: forget NAME).
set_pid() {
  { grep -v "^$1 " "$K8S_PIDS" 2>/dev/null || true; [[ -z "$2" ]] || printf '%s %s\n' "$1" "$2"; } >"$K8S_PIDS.part"
  mv "$K8S_PIDS.part" "$K8S_PIDS"
}

# is_running NAME: its recorded pid is alive and is ours (its command line names our run dir).
is_running() { pid_is_ours "$(get_pid "$1")" "$K8S_RUN/"; }

# launch NAME: starts $K8S_RUN/cmd/NAME.sh in its own session, output appended to its log,
# and records its pid. The script execs the binary, so the recorded pid is the binary's.
launch() {
  local name="$1" pid
  local script="$K8S_RUN/cmd/$name.sh" log="$K8S_LOGS/$name.log"
  [[ -f "$script" ]] || fail "$name" "no stored command line $script (run scripts/k8s/up.sh first)"
  printf -- '----- %s: started by scripts/k8s (%s) -----\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$script" >>"$log"
  (exec setsid bash "$script" </dev/null >>"$log" 2>&1) &
  pid=$!
  set_pid "$name" "$pid"
}

# stop_one NAME [GRACE]: SIGTERM, up to GRACE seconds (default 20), then SIGKILL. Quiet if
# NAME is not running. Prints what it did.
stop_one() {
  local name="$1" grace="${2:-${KUBEFACTS_K8S_STOP_GRACE:-20}}" pid deadline
  pid="$(get_pid "$name")"
  if ! pid_is_ours "$pid" "$K8S_RUN/"; then
    set_pid "$name" ""
    return 0
  fi
  kill -TERM "$pid" 2>/dev/null || true
  deadline=$((SECONDS + grace))
  while ((SECONDS < deadline)) && pid_is_ours "$pid" "$K8S_RUN/"; do sleep 0.1; done
  if pid_is_ours "$pid" "$K8S_RUN/"; then
    printf 'k8s: %s (pid %s) still running after %s s, sending SIGKILL\n' "$name" "$pid" "$grace" >&2
    kill -KILL "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do pid_is_ours "$pid" "$K8S_RUN/" || break; sleep 0.1; done
  fi
  set_pid "$name" ""
  printf -- '----- %s: stopped by scripts/k8s -----\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" >>"$K8S_LOGS/$name.log"
}

# kapi METHOD PATH [curl args...]: the API server as the admin (reads $K8S_RUN/env-less
# values from the run dir), prints the body; fails on HTTP >= 400.
kapi() {
  local method="$1" path="$2"
  shift 2
  curl -sS --fail-with-body --max-time 10 -X "$method" \
    --cacert "$K8S_RUN/pki/ca.crt" --cert "$K8S_RUN/pki/admin.crt" --key "$K8S_RUN/pki/admin.key" \
    "$(cat "$K8S_RUN/server")$path" "$@"
}
