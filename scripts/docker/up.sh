#!/usr/bin/env bash
# Starts this checkout's private Docker daemon (see lib.sh) and writes .cache/docker/env
# (DOCKER_HOST). A second call while it runs is a no-op. Fails naming dockerd, with the tail
# of its log, when the daemon is missing or cannot start.
# Usage: scripts/docker/up.sh [--quiet]
set -euo pipefail
# shellcheck source=scripts/docker/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

QUIET=0
[[ "${1:-}" == "--quiet" ]] && QUIET=1
say() { [[ "$QUIET" == 1 ]] || info "$@"; }

command -v dockerd >/dev/null 2>&1 ||
  fail dockerd "dockerd not found: install Debian's docker.io (apt-get install docker.io; scripts/prerequisites.sh does)"
command -v docker >/dev/null 2>&1 || fail docker "the docker client is not on PATH (Debian's docker.io has it)"
[[ "$(id -u)" == 0 ]] || fail dockerd "dockerd runs as root here (rootless Docker is not set up on these machines)"

write_env() {
  mkdir -p "$(dirname "$DOCKER_ENV")"
  printf 'export DOCKER_HOST=%q\nexport KUBEFACTS_DOCKER_HOST=%q\n' \
    "unix://$DOCKER_SOCK" "unix://$DOCKER_SOCK" >"$DOCKER_ENV"
}

if [[ -n "$(dockerd_pid)" ]] && docker_cli version >/dev/null 2>&1; then
  write_env
  say "dockerd already running (unix://$DOCKER_SOCK)"
  exit 0
fi

T0="$(now)"
# A daemon killed hard leaves its default network namespace mounted and its pid file behind.
umount "$DOCKER_EXEC/netns/default" 2>/dev/null || true
rm -f "$DOCKER_PIDFILE" "$DOCKER_SOCK"
mkdir -p "$DOCKER_DATA" "$DOCKER_EXEC" "$(dirname "$DOCKER_LOG")"
: >"$DOCKER_LOG"
# setsid: its own process group, so a test runner's Ctrl-C does not reach it; down.sh stops it.
setsid dockerd \
  --host "unix://$DOCKER_SOCK" \
  --data-root "$DOCKER_DATA" \
  --exec-root "$DOCKER_EXEC" \
  --pidfile "$DOCKER_PIDFILE" \
  --iptables=false --ip-masq=false --bridge=none \
  </dev/null >>"$DOCKER_LOG" 2>&1 &

deadline=$(( $(date +%s) + READY_TIMEOUT ))
until docker_cli version >/dev/null 2>&1; do
  if (( $(date +%s) > deadline )); then
    fail dockerd "not answering on unix://$DOCKER_SOCK after ${READY_TIMEOUT} s" "$DOCKER_LOG"
  fi
  if ! kill -0 $! 2>/dev/null; then
    fail dockerd "exited while starting" "$DOCKER_LOG"
  fi
  sleep 0.5
done
write_env
say "dockerd $(docker_cli version --format '{{.Server.Version}}' 2>/dev/null) up in $(elapsed "$T0") s" \
  "(unix://$DOCKER_SOCK, storage $(docker_cli info --format '{{.Driver}}' 2>/dev/null), data $DOCKER_DATA)"
