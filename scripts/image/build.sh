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

VERSION="$(crate_version)"
IMAGE="$(kubefacts_image)"
WORK="$CACHE_DIR/image"
LOG="$WORK/build.log"
mkdir -p "$WORK"
: >"$LOG"
T_ALL="$(now)"

"$DOCKER_SCRIPTS/up.sh" --quiet

# 1. The base: what `debian:bookworm-slim` would be, made from Debian's archive (shared with
# the testcontainers stand-ins, scripts/image/{kafka,registry}.sh).
ensure_base_image "$BASE_IMAGE" "$WORK" "$LOG"

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
