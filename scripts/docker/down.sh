#!/usr/bin/env bash
# Stops this checkout's private Docker daemon: its containers first (they are ours: every one
# was started by a script or test of this checkout), then dockerd with SIGTERM, up to 20 s,
# then SIGKILL. Tolerant of a daemon that is not running. Keeps the images.
# Usage: scripts/docker/down.sh [--quiet]
set -euo pipefail
# shellcheck source=scripts/docker/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

QUIET=0
[[ "${1:-}" == "--quiet" ]] && QUIET=1
say() { [[ "$QUIET" == 1 ]] || info "$@"; }

pid="$(dockerd_pid)"
rm -f "$DOCKER_ENV"
if [[ -z "$pid" ]]; then
  say "dockerd not running"
  exit 0
fi
T0="$(now)"
mapfile -t running < <(docker_cli ps -q 2>/dev/null || true)
if [[ "${#running[@]}" -gt 0 ]]; then
  docker_cli rm -f "${running[@]}" >/dev/null 2>&1 || true
fi
kill -TERM "$pid" 2>/dev/null || true
for _ in $(seq 1 40); do
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.5
done
if kill -0 "$pid" 2>/dev/null; then
  kill -KILL "$pid" 2>/dev/null || true
  say "dockerd did not stop within 20 s: killed"
fi
umount "$DOCKER_EXEC/netns/default" 2>/dev/null || true
say "dockerd stopped in $(elapsed "$T0") s (removed ${#running[@]} running containers)"
