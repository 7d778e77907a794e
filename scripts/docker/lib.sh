# shellcheck shell=bash disable=SC2034  # the variables are used by the scripts that source this
# Shared helpers for scripts/docker/{up,down}.sh and scripts/image/build.sh: a private Docker
# daemon for this checkout (DESIGN §7). Debian's docker.io (Engine 20.10) runs as root on its
# own socket, data root and exec root, with --iptables=false --bridge=none: it never touches
# the host's firewall or a system daemon, and every container runs with host networking.

DOCKER_SCRIPTS="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$DOCKER_SCRIPTS/../.." && pwd)"

CACHE_DIR="$REPO_ROOT/.cache"
# Images and layers persist across runs of this checkout (a warm run rebuilds nothing).
DOCKER_DATA="$CACHE_DIR/docker/data"
DOCKER_LOG="$CACHE_DIR/docker/dockerd.log"
# The exec root holds containerd's sockets, whose paths must stay under the 108 bytes a unix
# socket name allows: a short directory per checkout, not one inside a deep clone path.
DOCKER_RUN="${KUBEFACTS_DOCKER_RUN:-/tmp/kubefacts-docker-$(printf '%s' "$REPO_ROOT" | sha256sum | cut -c1-8)}"
DOCKER_SOCK="$DOCKER_RUN/docker.sock"
DOCKER_PIDFILE="$DOCKER_RUN/docker.pid"
DOCKER_EXEC="$DOCKER_RUN/exec"
# What scripts and tests source: DOCKER_HOST for the docker client.
DOCKER_ENV="$CACHE_DIR/docker/env"

READY_TIMEOUT="${KUBEFACTS_DOCKER_READY_TIMEOUT:-60}"

LOG_PREFIX=docker
FAIL_TAIL_LINES=30
# shellcheck source=scripts/common.sh
source "$DOCKER_SCRIPTS/../common.sh"

# dockerd_pid: the pid of this checkout's dockerd when it runs (its command line names our
# socket, so a reused pid never matches), else nothing.
dockerd_pid() {
  local pid
  pid="$(cat "$DOCKER_PIDFILE" 2>/dev/null || true)"
  [[ -n "$pid" ]] || return 0
  if tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -F -- "$DOCKER_SOCK"; then
    printf '%s\n' "$pid"
  fi
}

# docker_cli ARGS...: the docker client against this checkout's daemon.
docker_cli() { DOCKER_HOST="unix://$DOCKER_SOCK" docker "$@"; }
