#!/usr/bin/env bash
# Every image a testcontainers stack runs (docs/TESTING_DOWNSTREAM.md), built here where no
# image registry is reachable, and their names for the helper in .cache/image/env:
#   scripts/image/kafka.sh     the stand-in for apache/kafka      → KUBEFACTS_KAFKA_IMAGE
#   scripts/image/registry.sh  the stand-in for Apicurio Registry → KUBEFACTS_REGISTRY_IMAGE
#   scripts/image/build.sh     kubefacts' image of a binary       → KUBEFACTS_IMAGE
# Unchanged stand-ins are not rebuilt (their recipe label); kubefacts' image always is.
# Usage: scripts/image/stand-ins.sh [--binary PATH] [--smoke]
#   --binary PATH  the kubefacts binary (default: the release build, as build.sh makes it)
#   --smoke        also run the stand-ins' smoke checks (a broker and a registry, ~30 s)
# Then: source .cache/image/env
# Environment: the three names above override the defaults (kubefacts-local/kafka:<version>,
# kubefacts-local/apicurio-registry:<version>, kubefacts:<crate version>).
set -euo pipefail
COMPONENT=stand-ins
# shellcheck source=scripts/image/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

SMOKE=--no-smoke
BUILD_ARGS=(--quiet)
while [[ $# -gt 0 ]]; do
  case "$1" in
  --smoke) SMOKE="" ;;
  --binary) BUILD_ARGS+=(--binary "${2:?--binary needs a path}"); shift ;;
  *) fail usage "unknown argument '$1' (usage: stand-ins.sh [--binary PATH] [--smoke])" ;;
  esac
  shift
done

T_ALL="$(now)"
export KUBEFACTS_KAFKA_IMAGE="$KAFKA_STAND_IN" KUBEFACTS_REGISTRY_IMAGE="$REGISTRY_STAND_IN"
KUBEFACTS_IMAGE="$(kubefacts_image)"
export KUBEFACTS_IMAGE
"$IMAGE_SCRIPTS/kafka.sh" ${SMOKE:+"$SMOKE"}
"$IMAGE_SCRIPTS/registry.sh" ${SMOKE:+"$SMOKE"}
t0="$(now)"
"$IMAGE_SCRIPTS/build.sh" "${BUILD_ARGS[@]}"
info "kubefacts image $KUBEFACTS_IMAGE in $(elapsed "$t0") s"

mkdir -p "$CACHE_DIR/image"
{
  printf 'export KUBEFACTS_KAFKA_IMAGE=%q\n' "$KUBEFACTS_KAFKA_IMAGE"
  printf 'export KUBEFACTS_REGISTRY_IMAGE=%q\n' "$KUBEFACTS_REGISTRY_IMAGE"
  printf 'export KUBEFACTS_IMAGE=%q\n' "$KUBEFACTS_IMAGE"
} >"$CACHE_DIR/image/env"
info "all three in $(elapsed "$T_ALL") s; names in .cache/image/env"
