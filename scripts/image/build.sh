#!/usr/bin/env bash
# Builds the kubefacts image here, where no image registry is reachable:
#   1. a Debian bookworm base from Debian's packages (debootstrap --variant=minbase, then
#      `docker import`), once: kept in the private daemon's storage as $KUBEFACTS_BASE_IMAGE;
#   2. the release binary (`cargo build --release --locked`, or --binary PATH);
#   3. deploy/image/Dockerfile's `prebuilt` target on that base (the same runtime stage a
#      user's `docker build` makes: apt installs CA certificates, libssl3, zlib1g, uid 65532);
#   4. a smoke run: `kubefacts --version` in the image, as uid 65532, read-only root.
# Starts this checkout's dockerd when it is not running (scripts/docker/up.sh) and leaves it
# running; scripts/docker/down.sh stops it.
# Environment: KUBEFACTS_IMAGE (default kubefacts:<crate version>), KUBEFACTS_BASE_IMAGE
# (kubefacts-local/debian:bookworm), KUBEFACTS_DEBIAN_MIRROR (http://deb.debian.org/debian).
# Usage: scripts/image/build.sh [--binary PATH] [--quiet]
set -euo pipefail
# shellcheck source=scripts/docker/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../docker/lib.sh"
LOG_PREFIX=image

QUIET=0 BINARY=""
while [[ $# -gt 0 ]]; do
  case "$1" in
  --quiet) QUIET=1 ;;
  --binary) BINARY="${2:?--binary needs a path}"; shift ;;
  *) fail usage "unknown argument '$1' (usage: build.sh [--binary PATH] [--quiet])" ;;
  esac
  shift
done
say() { [[ "$QUIET" == 1 ]] || info "$@"; }

VERSION="$(awk -F'"' '/^version = / { print $2; exit }' "$REPO_ROOT/Cargo.toml")"
IMAGE="${KUBEFACTS_IMAGE:-kubefacts:$VERSION}"
BASE_IMAGE="${KUBEFACTS_BASE_IMAGE:-kubefacts-local/debian:bookworm}"
MIRROR="${KUBEFACTS_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
WORK="$CACHE_DIR/image"
LOG="$WORK/build.log"
mkdir -p "$WORK"
: >"$LOG"
T_ALL="$(now)"

"$DOCKER_SCRIPTS/up.sh" --quiet

# 1. The base: what `debian:bookworm-slim` would be, made from Debian's archive.
if docker_cli image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
  say "base $BASE_IMAGE: cached"
else
  command -v debootstrap >/dev/null 2>&1 ||
    fail debootstrap "debootstrap not found: apt-get install debootstrap (.ci/run does)"
  t0="$(now)"
  rootfs="$WORK/rootfs"
  rm -rf "$rootfs"
  debootstrap --variant=minbase bookworm "$rootfs" "$MIRROR" >>"$LOG" 2>&1 ||
    fail debootstrap "debootstrap --variant=minbase bookworm from $MIRROR failed" "$LOG"
  # What slim images drop: package lists, apt caches, documentation, manuals, translations.
  rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/cache/apt/archives/*.deb \
    "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/* "$rootfs"/usr/share/locale/*
  tar -C "$rootfs" -c . | docker_cli import --change 'CMD ["bash"]' - "$BASE_IMAGE" >>"$LOG" 2>&1 ||
    fail "docker import" "importing the debootstrap root as $BASE_IMAGE failed" "$LOG"
  rm -rf "$rootfs"
  say "base $BASE_IMAGE: debootstrap + import in $(elapsed "$t0") s"
fi

# 2. The binary.
if [[ -z "$BINARY" ]]; then
  t0="$(now)"
  (cd "$REPO_ROOT" && cargo build --release --locked --bin kubefacts) >>"$LOG" 2>&1 ||
    fail cargo "cargo build --release failed" "$LOG"
  BINARY="${CARGO_TARGET_DIR:-$REPO_ROOT/target}/release/kubefacts"
  say "release binary in $(elapsed "$t0") s"
fi
[[ -x "$BINARY" ]] || fail binary "$BINARY is not an executable file"

# 3. The runtime stage from a context holding only the binary (debug info stripped: the
# release profile keeps line tables for backtraces, which an image does not need).
t0="$(now)"
context="$WORK/context"
rm -rf "$context"
mkdir -p "$context"
cp "$BINARY" "$context/kubefacts"
strip --strip-debug "$context/kubefacts" 2>>"$LOG" || say "strip unavailable: the image keeps debug line tables"
docker_cli build --network host -q \
  -f "$REPO_ROOT/deploy/image/Dockerfile" --target prebuilt \
  --build-arg "RUNTIME_IMAGE=$BASE_IMAGE" \
  --label "org.opencontainers.image.version=$VERSION" \
  --label "org.opencontainers.image.revision=$(git -C "$REPO_ROOT" rev-parse HEAD 2>/dev/null || echo unknown)" \
  -t "$IMAGE" "$context" >>"$LOG" 2>&1 ||
  fail "docker build" "deploy/image/Dockerfile (target prebuilt) failed" "$LOG"
rm -rf "$context"

# 4. Smoke: the entrypoint runs as the non-root user on a read-only root.
got="$(docker_cli run --rm --network host --read-only "$IMAGE" --version 2>>"$LOG")" ||
  fail "$IMAGE" "kubefacts --version in the image failed" "$LOG"
[[ "$got" == "kubefacts $VERSION" ]] || fail "$IMAGE" "kubefacts --version printed '$got', expected 'kubefacts $VERSION'" "$LOG"
user="$(docker_cli image inspect --format '{{.Config.User}}' "$IMAGE")"
[[ "$user" == "65532:65532" ]] || fail "$IMAGE" "runs as '$user', expected 65532:65532" "$LOG"
size="$(docker_cli image inspect --format '{{.Size}}' "$IMAGE")"
say "$IMAGE built in $(elapsed "$t0") s ($((size / 1024 / 1024)) MiB, user $user); all in $(elapsed "$T_ALL") s"
