# shellcheck shell=bash disable=SC2034  # the variables are used by the scripts that source this
# Shared by scripts/image/kafka.sh and registry.sh, the local stand-ins for the official images
# a testcontainers user pulls (docs/TESTING_DOWNSTREAM.md, "The images"). Sources the infra
# library (versions, the Maven Central resolvers, free ports) and the docker library (this
# checkout's private dockerd, the Debian base). Set COMPONENT before sourcing.

: "${COMPONENT:?set COMPONENT (kafka, registry) before sourcing scripts/image/lib.sh}"
IMAGE_SCRIPTS="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=scripts/infra/lib.sh
source "$IMAGE_SCRIPTS/../infra/lib.sh"
# shellcheck source=scripts/docker/lib.sh
source "$IMAGE_SCRIPTS/../docker/lib.sh"
LOG_PREFIX="image-$COMPONENT"
FAIL_TAIL_LINES=40

# The stand-ins' names: the variables the testcontainers helper reads (src/testcontainers/images.rs).
KAFKA_STAND_IN="${KUBEFACTS_KAFKA_IMAGE:-kubefacts-local/kafka:$KAFKA_VERSION}"
REGISTRY_STAND_IN="${KUBEFACTS_REGISTRY_IMAGE:-kubefacts-local/apicurio-registry:$APICURIO_VERSION}"
WORK="$CACHE_DIR/image/$COMPONENT"
# The recipe label: a build is skipped when the image carries the same one.
RECIPE_LABEL=io.kubefacts.recipe
SMOKE_TIMEOUT="${KUBEFACTS_IMAGE_SMOKE_TIMEOUT:-120}"

# context_recipe DIR EXTRA...: sha256 over every file of the build context (path and content)
# plus EXTRA strings (the base image's id, versions): what the image is made of.
context_recipe() {
  local dir="$1"
  shift
  {
    (cd "$dir" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum)
    printf '%s\n' "$@"
  } | sha256sum | cut -d' ' -f1
}

# build_if_changed IMAGE DOCKERFILE CONTEXT RECIPE LOG BUILD-ARGS...: docker build unless IMAGE
# exists with RECIPE in its label. Sets BUILT=1 when it built, 0 when it was cached.
build_if_changed() {
  local image="$1" dockerfile="$2" context="$3" recipe="$4" log="$5"
  shift 5
  local have
  have="$(docker_cli image inspect --format "{{ index .Config.Labels \"$RECIPE_LABEL\" }}" "$image" 2>/dev/null || true)"
  if [[ "$have" == "$recipe" ]]; then
    BUILT=0
    return 0
  fi
  local -a args=()
  local a
  for a in "$@"; do args+=(--build-arg "$a"); done
  docker_cli build --network host -q -f "$dockerfile" "${args[@]}" \
    --label "$RECIPE_LABEL=$recipe" \
    --label "org.opencontainers.image.revision=$(git -C "$REPO_ROOT" rev-parse HEAD 2>/dev/null || echo unknown)" \
    -t "$image" "$context" >>"$log" 2>&1 ||
    fail "$COMPONENT image" "docker build of $image from $dockerfile failed" "$log"
  BUILT=1
}

# image_size_mib IMAGE
image_size_mib() { echo $(($(docker_cli image inspect --format '{{.Size}}' "$1") / 1024 / 1024)); }

# stand_in_begin ARGS...: the start both stand-in scripts share: [--no-smoke] (sets SMOKE),
# IMAGE (never an official name: a machine that later reaches Docker Hub must not mistake a
# stand-in for the real image, or the real one for it), RECIPE_DIR, LOG, T_ALL, this
# checkout's dockerd and the Debian base.
stand_in_begin() {
  local official variable
  case "$COMPONENT" in
  kafka) IMAGE="$KAFKA_STAND_IN" official=apache/kafka variable=KUBEFACTS_KAFKA_IMAGE ;;
  registry) IMAGE="$REGISTRY_STAND_IN" official=apicurio/apicurio-registry variable=KUBEFACTS_REGISTRY_IMAGE ;;
  *) fail usage "stand_in_begin: no stand-in named '$COMPONENT'" ;;
  esac
  SMOKE=1
  case "${1:-}" in
  "") ;;
  --no-smoke) SMOKE=0 ;;
  *) fail usage "unknown argument '$1' (usage: $COMPONENT.sh [--no-smoke])" ;;
  esac
  case "$IMAGE" in
  "$official":* | */"$official":*) fail usage "$variable=$IMAGE is the official image's name; build the stand-in under another (default kubefacts-local/...)" ;;
  esac
  RECIPE_DIR="$REPO_ROOT/deploy/testcontainers/$COMPONENT"
  LOG="$WORK/build.log"
  INSTALL_LOG_DIR="$WORK"
  mkdir -p "$WORK"
  : >"$LOG"
  T_ALL="$(now)"
  "$DOCKER_SCRIPTS/up.sh" --quiet
  ensure_base_image "$BASE_IMAGE" "$CACHE_DIR/image" "$LOG"
}

# stand_in_context: a fresh build context, $WORK/context, holding the recipe folder; prints it.
stand_in_context() {
  local context="$WORK/context"
  rm -rf "$context"
  mkdir -p "$context"
  cp -a "$RECIPE_DIR/." "$context/"
  printf '%s\n' "$context"
}

# link_into SRC DEST: SRC's tree at DEST, hard-linked when the file system allows it.
link_into() { cp -al "$1" "$2" 2>/dev/null || cp -a "$1" "$2"; }

# stand_in_build CONTEXT T0 RECIPE-EXTRAS BUILD-ARGS...: builds IMAGE from CONTEXT unless its
# recipe (the context, the base image's id and RECIPE-EXTRAS: versions, one per line) is
# unchanged, removes CONTEXT, says what it did since T0, and ends the script here with
# --no-smoke.
stand_in_build() {
  local context="$1" t0="$2" extras="$3" base_id recipe
  shift 3
  base_id="$(docker_cli image inspect --format '{{.Id}}' "$BASE_IMAGE")"
  recipe="$(context_recipe "$context" "base $base_id" "$extras")"
  build_if_changed "$IMAGE" "$context/Dockerfile" "$context" "$recipe" "$LOG" "BASE_IMAGE=$BASE_IMAGE" "$@"
  rm -rf "$context"
  if [[ "$BUILT" == 1 ]]; then
    info "$IMAGE built in $(elapsed "$t0") s ($(image_size_mib "$IMAGE") MiB)"
  else
    info "$IMAGE: cached, recipe unchanged (checked in $(elapsed "$t0") s; $(image_size_mib "$IMAGE") MiB)"
  fi
  if [[ "$SMOKE" == 0 ]]; then
    info "all in $(elapsed "$T_ALL") s (no smoke run)"
    exit 0
  fi
}

# The smoke container: one at a time, removed on exit (also on failure, after its log tail
# has been printed by smoke_fail).
SMOKE_CONTAINER=""
smoke_cleanup() {
  if [[ -n "$SMOKE_CONTAINER" ]]; then
    docker_cli rm -f "$SMOKE_CONTAINER" >/dev/null 2>&1 || true
    SMOKE_CONTAINER=""
  fi
}
trap smoke_cleanup EXIT

# smoke_fail REASON: the container's log into $WORK/smoke.log, then fail with its tail.
smoke_fail() {
  if [[ -n "$SMOKE_CONTAINER" ]]; then
    docker_cli logs "$SMOKE_CONTAINER" >"$WORK/smoke.log" 2>&1 || true
  fi
  fail "$COMPONENT" "$1" "$WORK/smoke.log"
}

# smoke_running: false (after smoke_fail) when the smoke container has exited.
smoke_running() {
  local state
  state="$(docker_cli inspect --format '{{.State.Status}} {{.State.ExitCode}}' "$SMOKE_CONTAINER" 2>/dev/null || echo "gone -")"
  if [[ "$state" != running* ]]; then
    smoke_fail "the container exited before it was ready (state: $state)"
  fi
}
