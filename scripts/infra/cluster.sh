#!/usr/bin/env bash
# A three-node Kafka cluster on loopback for the security and broker-failure tests (issue 26):
# KRaft, every node both broker and controller (node ids 1, 2, 3; three voters), clients on
# SASL_SSL (SCRAM-SHA-512, SCRAM-SHA-256, PLAIN), StandardAuthorizer with no ACL meaning deny.
#
#   scripts/infra/cluster.sh up            # stop any previous cluster, start a fresh one
#   source .cache/run/cluster/env          # KUBEFACTS_CLUSTER_* (bootstrap, CA, nodes, ...)
#   .venv/bin/python scripts/infra/kafka_admin.py users alice bob    # SCRAM users, as admin
#   scripts/infra/cluster.sh start-node N  # restart node N (after a test SIGKILLed it)
#   scripts/infra/cluster.sh down          # stop all three; logs stay in .cache/run/cluster
#
# Users: only `admin` (the super user the brokers talk to each other as) is created here, at
# storage format, because the cluster needs it before it runs; every other user is created
# through the admin API by kafka_admin.py. Needs Kafka and .venv from scripts/infra/up.sh.
set -euo pipefail
# shellcheck source=scripts/infra/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# shellcheck disable=SC2034  # read by info and fail (scripts/common.sh)
LOG_PREFIX=cluster

ENV_FILE="$CLUSTER_DIR/env"
TLS_DIR="$CLUSTER_DIR/tls"
ADMIN_PASSWORD_FILE="$CLUSTER_DIR/admin.password"
USERS_DIR="$CLUSTER_DIR/users"
PYTHON="$VENV_DIR/bin/python"
KAFKA_ADMIN="$INFRA_DIR/kafka_admin.py"
# The principal the nodes present to each other's controller listener (their certificate's
# subject): a super user, as controllers and brokers need CLUSTER_ACTION there.
BROKER_SUBJECT="CN=kubefacts-broker"

usage() {
  printf 'usage: %s up | start-node N | down [--quiet]\n' "$0" >&2
  exit 2
}

node_dir() { printf '%s/node-%s' "$CLUSTER_DIR" "$1"; }

# launch_node JAVA N: starts node N in its own session (a signal to the caller's process group
# does not reach it; down.sh stops it) and writes its pid file. Output is appended, so the
# logs of earlier starts stay. Three JVMs share two cores on CI and the tests send little
# data: a small heap, the serial collector and only the C1 compiler (here, on two cores, the
# nodes were ready after ~7 s instead of ~13 s). The marker "$CLUSTER_MARKER-N" is for down.sh.
launch_node() {
  local java="$1" n="$2" dir
  dir="$(node_dir "$n")"
  prepare_topic_policy "$java"
  (
    cd "$dir"
    exec setsid "$java" "$CLUSTER_MARKER-$n" -Xms64m -Xmx512m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
      -cp "$KAFKA_HOME/lib/*:$TOPIC_POLICY_CLASSES" -Dlog4j2.configurationFile="$KAFKA_LOG4J" -Djava.awt.headless=true \
      -Dkubefacts.log.file="$dir/server.log" -Dkubefacts.log.level=INFO \
      kafka.Kafka "$dir/server.properties" </dev/null >>"$dir/stdout.log" 2>&1
  ) &
  printf '%s\n' "$!" >"$dir/kafka.pid"
}

# node_failed N REASON: fails naming the node; shows the JVM's own output and the server log
# written since this start.
node_failed() {
  local n="$1" reason="$2" dir
  dir="$(node_dir "$n")"
  {
    tail -c +"$((START_OFFSET_OUT[n] + 1))" "$dir/stdout.log" 2>/dev/null || true
    tail -c +"$((START_OFFSET[n] + 1))" "$dir/server.log" 2>/dev/null || true
  } >"$dir/failed.log"
  fail "node-$n" "$reason (log: $dir/server.log)" "$dir/failed.log"
}

# wait_ready N...: waits until each node logs "Kafka Server started" after its start offset
# (START_OFFSET[N], bytes of server.log before this start), i.e. it has joined the quorum,
# registered and been unfenced. Fails on the first node that exits or is late.
wait_ready() {
  local -a pending=("$@") left
  local n dir pid t0
  t0="$(now)"
  while ((${#pending[@]} > 0)); do
    left=()
    for n in "${pending[@]}"; do
      dir="$(node_dir "$n")"
      # Process substitution, not a pipe: grep -q stops reading early, which pipefail would
      # turn into a failure of the pipeline.
      if grep -q -F 'Kafka Server started' < <(tail -c +"$((START_OFFSET[n] + 1))" "$dir/server.log" 2>/dev/null); then
        info "node $n ready on 127.0.0.1:${CLIENT_PORT[n]} in $(elapsed "$t0") s"
        continue
      fi
      pid="$(cat "$dir/kafka.pid")"
      if ! pid_is_ours "$pid" "$CLUSTER_MARKER-$n"; then
        local code=0
        wait "$pid" 2>/dev/null || code=$?
        node_failed "$n" "the node process (pid $pid) exited with status $code before it was ready"
      fi
      if [[ "$(elapsed "$t0" | cut -d. -f1)" -ge "$READY_TIMEOUT" ]]; then
        node_failed "$n" "not ready after $READY_TIMEOUT s (no 'Kafka Server started' line since this start)"
      fi
      left+=("$n")
    done
    pending=("${left[@]+"${left[@]}"}")
    ((${#pending[@]} == 0)) || sleep 0.2
  done
}

# write_secret FILE VALUE: FILE gets VALUE and a newline, readable by us only.
write_secret() {
  (umask 077 && printf '%s\n' "$2" >"$1")
  chmod 600 "$1"
}

on_up_exit() {
  local rc=$?
  if [[ "$rc" != 0 ]]; then
    "$INFRA_DIR/down.sh" --cluster-only --quiet || true
  fi
}

declare -a CLIENT_PORT=() CONTROLLER_PORT=() START_OFFSET=() START_OFFSET_OUT=()

cmd_up() {
  local t_up n
  t_up="$(now)"
  for tool in openssl python3; do
    command -v "$tool" >/dev/null 2>&1 || fail prerequisites "'$tool' not found on PATH"
  done
  [[ -d "$KAFKA_HOME/lib" ]] || fail prerequisites "Kafka $KAFKA_VERSION is not installed in $KAFKA_HOME; run ./scripts/infra/up.sh first"
  [[ -x "$PYTHON" ]] || fail prerequisites "$PYTHON is missing; run ./scripts/infra/up.sh first"
  local java
  java="$(find_java 17 || true)"
  [[ -n "$java" ]] || fail prerequisites "no Java >= 17 found for Kafka $KAFKA_VERSION (checked \$KUBEFACTS_JAVA_HOME, \$JAVA_HOME, PATH, /usr/lib/jvm/*)"
  # The nodes' create-topic policy; the storage format loads it too (a CLASS config).
  prepare_topic_policy "$java"

  # A previous cluster? Stop it, then start from an empty dir.
  "$INFRA_DIR/down.sh" --cluster-only --quiet
  rm -rf "$CLUSTER_DIR"
  mkdir -p "$TLS_DIR" "$USERS_DIR"
  chmod 700 "$TLS_DIR" "$USERS_DIR"
  # From here on, a failure stops whatever was started (the logs stay).
  trap on_up_exit EXIT

  local -a ports
  read -r -a ports < <(free_ports 6)
  [[ "${#ports[@]}" == 6 ]] || fail prerequisites "could not pick free loopback ports with python3"
  for n in "${CLUSTER_NODES[@]}"; do
    CLIENT_PORT[n]="${ports[2 * n - 2]}"
    CONTROLLER_PORT[n]="${ports[2 * n - 1]}"
  done

  # Certificates: a throwaway CA and one certificate for all three nodes, naming the loopback
  # address (clients and nodes verify the host name). The nodes read PEM key stores directly.
  local log="$TLS_DIR/openssl.log"
  (
    cd "$TLS_DIR"
    umask 077
    openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 30 -subj "/CN=kubefacts-test-ca" &&
      openssl req -newkey rsa:2048 -nodes -keyout broker.key -out broker.csr -subj "/$BROKER_SUBJECT" &&
      printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\n' >san.ext &&
      openssl x509 -req -in broker.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out broker.crt -days 30 -extfile san.ext &&
      openssl pkcs8 -topk8 -nocrypt -in broker.key -out broker.pk8 &&
      cat broker.pk8 broker.crt >broker.pem
  ) >"$log" 2>&1 || fail certificates "openssl failed" "$log"
  chmod 600 "$TLS_DIR"/ca.key "$TLS_DIR"/broker.key "$TLS_DIR"/broker.pk8 "$TLS_DIR"/broker.pem
  chmod 644 "$TLS_DIR/ca.crt" "$TLS_DIR/broker.crt"

  local admin_password
  admin_password="$(openssl rand -hex 24)"
  write_secret "$ADMIN_PASSWORD_FILE" "$admin_password"

  local voters="" dir
  for n in "${CLUSTER_NODES[@]}"; do
    voters+="${voters:+,}$n@127.0.0.1:${CONTROLLER_PORT[n]}"
  done
  for n in "${CLUSTER_NODES[@]}"; do
    dir="$(node_dir "$n")"
    mkdir -p "$dir"
    # It holds the admin password (JAAS), so it is ours only.
    (umask 077 && cat >"$dir/server.properties") <<EOF
# generated by scripts/infra/cluster.sh
process.roles=broker,controller
node.id=$n
controller.quorum.voters=$voters
listeners=SASL_SSL://127.0.0.1:${CLIENT_PORT[n]},CONTROLLER://127.0.0.1:${CONTROLLER_PORT[n]}
advertised.listeners=SASL_SSL://127.0.0.1:${CLIENT_PORT[n]}
listener.security.protocol.map=SASL_SSL:SASL_SSL,CONTROLLER:SSL
controller.listener.names=CONTROLLER
inter.broker.listener.name=SASL_SSL
# Clients: SCRAM (users made by kafka_admin.py through the admin API) and PLAIN (admin only,
# from the JAAS line below). The nodes talk to each other as admin over SCRAM-SHA-512.
sasl.enabled.mechanisms=SCRAM-SHA-512,SCRAM-SHA-256,PLAIN
sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="$admin_password";
listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_admin="$admin_password";
# TLS everywhere. The controller listener wants a client certificate: the nodes authenticate
# there as User:$BROKER_SUBJECT (a super user), and nothing without the key gets in.
ssl.keystore.type=PEM
ssl.keystore.location=$TLS_DIR/broker.pem
ssl.truststore.type=PEM
ssl.truststore.location=$TLS_DIR/ca.crt
listener.name.controller.ssl.client.auth=required
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
allow.everyone.if.no.acl.found=false
super.users=User:admin;User:$BROKER_SUBJECT
log.dirs=$dir/data
num.partitions=1
default.replication.factor=3
min.insync.replicas=2
auto.create.topics.enable=false
offsets.topic.replication.factor=3
offsets.topic.num.partitions=5
transaction.state.log.replication.factor=3
transaction.state.log.min.isr=2
transaction.state.log.num.partitions=5
group.initial.rebalance.delay.ms=0
# A SIGKILLed node is fenced (its partitions get new leaders) after 6 s instead of 9 s:
# the broker-failure tests wait for that.
broker.heartbeat.interval.ms=1000
broker.session.timeout.ms=6000
# As on the single test broker (up.sh): a topic that deletes by time says its retention.ms.
create.topic.policy.class.name=$TOPIC_POLICY_CLASS
EOF
    chmod 600 "$dir/server.properties"
  done

  # Storage format of the three in parallel (one cluster id). admin's SCRAM credentials go into
  # the bootstrap metadata: the nodes need them to talk to each other before anything else
  # runs. (The password is on the format tool's command line for its few seconds; the tool
  # has no way to read it from a file.)
  local cluster_id t_format
  cluster_id="$(new_cluster_id)"
  t_format="$(now)"
  local -a format_pids=()
  for n in "${CLUSTER_NODES[@]}"; do
    dir="$(node_dir "$n")"
    "$java" -cp "$KAFKA_HOME/lib/*:$TOPIC_POLICY_CLASSES" -Dlog4j2.configurationFile="$KAFKA_LOG4J" -Djava.awt.headless=true \
      -Xmx256m -XX:TieredStopAtLevel=1 -XX:+UseSerialGC \
      -Dkubefacts.log.file="$dir/format.log" -Dkubefacts.log.level=INFO \
      kafka.tools.StorageTool format -t "$cluster_id" -c "$dir/server.properties" \
      --add-scram "SCRAM-SHA-512=[name=admin,password=$admin_password]" \
      --add-scram "SCRAM-SHA-256=[name=admin,password=$admin_password]" \
      >"$dir/format.out" 2>&1 &
    format_pids[n]=$!
  done
  for n in "${CLUSTER_NODES[@]}"; do
    wait "${format_pids[n]}" || fail "node-$n" "kafka.tools.StorageTool format failed" "$(node_dir "$n")/format.out"
  done
  info "storage formatted in $(elapsed "$t_format") s (cluster id $cluster_id)"

  # Start the three at once: a controller quorum needs two voters before anything is ready.
  local t_start
  t_start="$(now)"
  for n in "${CLUSTER_NODES[@]}"; do
    START_OFFSET[n]=0
    START_OFFSET_OUT[n]=0
    launch_node "$java" "$n"
  done
  wait_ready "${CLUSTER_NODES[@]}"
  local ready_seconds
  ready_seconds="$(elapsed "$t_start")"

  local bootstrap=""
  for n in "${CLUSTER_NODES[@]}"; do
    bootstrap+="${bootstrap:+,}127.0.0.1:${CLIENT_PORT[n]}"
  done
  {
    printf '# generated by scripts/infra/cluster.sh at %s; source it: . .cache/run/cluster/env\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    local -a kvs=(
      "KUBEFACTS_CLUSTER_DIR=$CLUSTER_DIR"
      "KUBEFACTS_CLUSTER_BOOTSTRAP=$bootstrap"
      "KUBEFACTS_CLUSTER_CA=$TLS_DIR/ca.crt"
      "KUBEFACTS_CLUSTER_SECURITY_PROTOCOL=SASL_SSL"
      "KUBEFACTS_CLUSTER_ADMIN_USER=admin"
      "KUBEFACTS_CLUSTER_ADMIN_PASSWORD_FILE=$ADMIN_PASSWORD_FILE"
      "KUBEFACTS_CLUSTER_USERS_DIR=$USERS_DIR"
      "KUBEFACTS_CLUSTER_NODES=${CLUSTER_NODES[*]}"
      "KUBEFACTS_CLUSTER_PYTHON=$PYTHON"
      "KUBEFACTS_CLUSTER_ADMIN_TOOL=$KAFKA_ADMIN"
      "KUBEFACTS_CLUSTER_SCRIPT=$INFRA_DIR/cluster.sh"
      "KUBEFACTS_CLUSTER_JAVA=$java"
      "KUBEFACTS_CLUSTER_READY_SECONDS=$ready_seconds"
    )
    for n in "${CLUSTER_NODES[@]}"; do
      dir="$(node_dir "$n")"
      kvs+=(
        "KUBEFACTS_CLUSTER_NODE_${n}_ADDR=127.0.0.1:${CLIENT_PORT[n]}"
        "KUBEFACTS_CLUSTER_NODE_${n}_CONTROLLER_ADDR=127.0.0.1:${CONTROLLER_PORT[n]}"
        "KUBEFACTS_CLUSTER_NODE_${n}_PID_FILE=$dir/kafka.pid"
        "KUBEFACTS_CLUSTER_NODE_${n}_LOG=$dir/server.log"
      )
    done
    local kv
    for kv in "${kvs[@]}"; do
      printf 'export %s=%q\n' "${kv%%=*}" "${kv#*=}"
    done
  } >"$ENV_FILE.part"
  mv "$ENV_FILE.part" "$ENV_FILE"

  # The tests' own path end to end: admin over SASL_SSL (CA, host name, SCRAM) sees three brokers.
  local check_log="$CLUSTER_DIR/check.log"
  "$PYTHON" "$KAFKA_ADMIN" --env "$ENV_FILE" check --brokers "${#CLUSTER_NODES[@]}" >"$check_log" 2>&1 ||
    fail check "the cluster is up but admin cannot use it over SASL_SSL" "$check_log"
  info "$(cat "$check_log")"
  info "up in $(elapsed "$t_up") s (nodes ready $ready_seconds s after launch); env: source $ENV_FILE"
}

cmd_start_node() {
  local n="${1:-}"
  [[ " ${CLUSTER_NODES[*]} " == *" $n "* ]] || fail usage "start-node takes a node id (${CLUSTER_NODES[*]}), not '$n'"
  [[ -f "$ENV_FILE" ]] || fail "node-$n" "no cluster is up ($ENV_FILE is missing); run '$0 up' first"
  # shellcheck source=/dev/null
  source "$ENV_FILE"
  local dir pid addr
  dir="$(node_dir "$n")"
  pid="$(cat "$dir/kafka.pid" 2>/dev/null || true)"
  # A node SIGKILLed a moment ago may not be gone yet.
  for _ in $(seq 1 50); do
    pid_is_ours "$pid" "$CLUSTER_MARKER-$n" || break
    sleep 0.1
  done
  if pid_is_ours "$pid" "$CLUSTER_MARKER-$n"; then
    fail "node-$n" "still running (pid $pid); stop it first"
  fi
  addr="KUBEFACTS_CLUSTER_NODE_${n}_ADDR"
  CLIENT_PORT[n]="${!addr##*:}"
  # Only what this start writes counts: an old "Kafka Server started" line does not.
  START_OFFSET[n]="$(stat -c %s "$dir/server.log" 2>/dev/null || echo 0)"
  START_OFFSET_OUT[n]="$(stat -c %s "$dir/stdout.log" 2>/dev/null || echo 0)"
  launch_node "$KUBEFACTS_CLUSTER_JAVA" "$n"
  wait_ready "$n"
}

case "${1:-}" in
up)
  [[ $# == 1 ]] || usage
  cmd_up
  ;;
start-node)
  [[ $# == 2 ]] || usage
  cmd_start_node "$2"
  ;;
down)
  shift
  exec "$INFRA_DIR/down.sh" --cluster-only "$@"
  ;;
*) usage ;;
esac
