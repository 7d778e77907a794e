#!/usr/bin/env bash
# How long a testcontainers stack takes to start (examples/stack_start.rs): Kafka and
# `kubefacts process`, then the same with a registry, --runs times each, warm (the images
# exist) or, with --cold, after removing every image the stack runs and the Debian base and
# building them again: here, where no image registry is reachable, the cold path is a
# build from cached jars and Debian packages, where a user's is a pull.
# Usage: scripts/image/stack-start.sh [--cold] [--runs N] [--binary PATH] [--features LIST]
#   --runs N         starts of each kind (default 3)
#   --binary PATH    the binary in kubefacts' image (default: the release build)
#   --features LIST  the crate features the example is built with (default testcontainers;
#                    test.sh passes its test build's, so nothing recompiles)
# Starts this checkout's dockerd when it is not running and leaves it running.
set -euo pipefail
COMPONENT=stack-start
# shellcheck source=scripts/image/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

COLD=0 RUNS=3 FEATURES=testcontainers STAND_IN_ARGS=()
while [[ $# -gt 0 ]]; do
  case "$1" in
  --cold) COLD=1 ;;
  --runs) RUNS="${2:?--runs needs a number}"; shift ;;
  --binary) STAND_IN_ARGS+=(--binary "${2:?--binary needs a path}"); shift ;;
  --features) FEATURES="${2:?--features needs a list}"; shift ;;
  *) fail usage "unknown argument '$1' (usage: stack-start.sh [--cold] [--runs N] [--binary PATH] [--features LIST])" ;;
  esac
  shift
done

"$DOCKER_SCRIPTS/up.sh" --quiet
# The example first: its build is not part of any start.
(cd "$REPO_ROOT" && cargo build --quiet --example stack_start --features "$FEATURES")
example="${CARGO_TARGET_DIR:-$REPO_ROOT/target}/debug/examples/stack_start"

if [[ "$COLD" == 1 ]]; then
  for image in "$KAFKA_STAND_IN" "$REGISTRY_STAND_IN" "$(kubefacts_image)" "$BASE_IMAGE"; do
    docker_cli rmi -f "$image" >/dev/null 2>&1 || true
  done
  docker_cli image prune -f >/dev/null
  info "removed the stack's images and the Debian base"
fi
t0="$(now)"
"$IMAGE_SCRIPTS/stand-ins.sh" "${STAND_IN_ARGS[@]}"
images_s="$(elapsed "$t0")"
# shellcheck source=/dev/null
source "$CACHE_DIR/image/env"
DOCKER_HOST="unix://$DOCKER_SOCK" "$example" --runs "$RUNS"
if [[ "$COLD" == 1 ]]; then
  echo "  images built from nothing in $images_s s (then the first start above is the cold one)"
else
  echo "  images checked and kubefacts' image rebuilt in $images_s s"
fi
