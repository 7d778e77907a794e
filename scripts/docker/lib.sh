# shellcheck shell=bash disable=SC2034  # the variables are used by the scripts that source this
# Shared helpers for scripts/docker/{up,down}.sh and scripts/image/*.sh: a private Docker
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

# The images every image script shares: the Debian base, and kubefacts' own, tagged with the
# crate's version unless KUBEFACTS_IMAGE names it.
BASE_IMAGE="${KUBEFACTS_BASE_IMAGE:-kubefacts-local/debian:bookworm}"
crate_version() { awk -F'"' '/^version = / { print $2; exit }' "$REPO_ROOT/Cargo.toml"; }
kubefacts_image() { printf '%s\n' "${KUBEFACTS_IMAGE:-kubefacts:$(crate_version)}"; }

# docker_cli ARGS...: the docker client against this checkout's daemon.
docker_cli() { DOCKER_HOST="unix://$DOCKER_SOCK" docker "$@"; }

# ensure_base_image IMAGE WORKDIR LOG: makes the Debian bookworm base once, where no image
# registry is reachable (what `debian:bookworm-slim` would be, made from Debian's archive):
# debootstrap --variant=minbase, package lists, apt caches, docs, manuals and translations
# removed, then `docker import` as IMAGE. A no-op when IMAGE exists. The mirror is
# $KUBEFACTS_DEBIAN_MIRROR (default http://deb.debian.org/debian). Used by every image script
# (scripts/image/build.sh, kafka.sh, registry.sh), so all of them share one base.
ensure_base_image() {
  local image="$1" work="$2" log="$3"
  local mirror="${KUBEFACTS_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
  local note=info
  declare -F say >/dev/null && note=say
  if docker_cli image inspect "$image" >/dev/null 2>&1; then
    "$note" "base $image: cached"
    return 0
  fi
  command -v debootstrap >/dev/null 2>&1 ||
    fail debootstrap "debootstrap not found: apt-get install debootstrap (scripts/prerequisites.sh does)"
  local t0 rootfs="$work/rootfs"
  t0="$(now)"
  mkdir -p "$work"
  rm -rf "$rootfs"
  debootstrap --variant=minbase bookworm "$rootfs" "$mirror" >>"$log" 2>&1 ||
    fail debootstrap "debootstrap --variant=minbase bookworm from $mirror failed" "$log"
  # What slim images drop: package lists, apt caches, documentation, manuals, translations.
  rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/cache/apt/archives/*.deb \
    "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/* "$rootfs"/usr/share/locale/*
  tar -C "$rootfs" -c . | docker_cli import --change 'CMD ["bash"]' - "$image" >>"$log" 2>&1 ||
    fail "docker import" "importing the debootstrap root as $image failed" "$log"
  rm -rf "$rootfs"
  "$note" "base $image: debootstrap + import in $(elapsed "$t0") s"
}
