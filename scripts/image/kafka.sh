#!/usr/bin/env bash
# Builds the local stand-in for the official Apache Kafka image that testcontainers users pull
# (apache/kafka:<version>), where no image registry is reachable, and checks it:
#   1. this checkout's dockerd (scripts/docker/up.sh) and the Debian base
#      ($KUBEFACTS_BASE_IMAGE, made once by the same step as scripts/image/build.sh);
#   2. the Kafka jars, resolved from Maven Central into .cache/kafka-<version>/lib by the
#      same code as scripts/infra/up.sh (prepare_kafka; cached, starts nothing);
#   3. deploy/testcontainers/kafka/Dockerfile on that base (Debian's openjdk-17-jre-headless
#      through the host network), skipped when the image's recipe label (a hash of the build
#      context, jars included, and of the base image) is unchanged;
#   4. smoke, unless --no-smoke: a single-node KRaft broker configured only through KAFKA_*
#      variables on two free loopback ports, run twice: as `docker run` starts it (the image's
#      CMD) and as the testcontainers Kafka module does (entrypoint bash waiting for a start
#      script that `docker exec` writes and that calls /etc/kafka/docker/run); each waits for
#      "Kafka Server started" and an ApiVersions answer, then kafka-topics.sh --create and
#      --list run inside the container. The container is removed; a failure prints its log tail.
# Leaves dockerd running (scripts/docker/down.sh stops it).
# Environment: KUBEFACTS_KAFKA_IMAGE (default kubefacts-local/kafka:<version>),
# KUBEFACTS_BASE_IMAGE, KUBEFACTS_DEBIAN_MIRROR, KUBEFACTS_IMAGE_SMOKE_TIMEOUT (120 s).
# Usage: scripts/image/kafka.sh [--no-smoke]
# shellcheck disable=SC2034  # INSTALL_LOG_DIR and SMOKE_CONTAINER are read by the sourced libraries
set -euo pipefail
COMPONENT=kafka
# shellcheck source=scripts/image/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

stand_in_begin "$@"

t0="$(now)"
prepare_kafka
info "kafka $KAFKA_VERSION jars ready in $(elapsed "$t0") s ($KAFKA_HOME/lib)"

# The build context: the recipe folder plus libs/ (hard links into .cache when possible).
t0="$(now)"
context="$(stand_in_context)"
link_into "$KAFKA_HOME/lib" "$context/libs"
# Every tool the Dockerfile wraps must name a class that is in these jars.
missing="$(grep -v '^#' "$RECIPE_DIR/tools.txt" | python3 -c '
import glob, sys, zipfile
names = set()
for jar in glob.glob(sys.argv[1] + "/kafka*.jar"):
    names.update(zipfile.ZipFile(jar).namelist())
for line in sys.stdin:
    tool, cls = line.split()
    if cls.replace(".", "/") + ".class" not in names:
        print(tool + "=" + cls, end=" ")
' "$context/libs")"
[[ -z "$missing" ]] || fail "$COMPONENT image" "classes missing from the kafka $KAFKA_VERSION jars: $missing"
stand_in_build "$context" "$t0" "kafka $KAFKA_VERSION" "KAFKA_VERSION=$KAFKA_VERSION"

# smoke MODE: MODE is "cmd" (the image's CMD) or "testcontainers" (the module's way).
smoke() {
  local mode="$1" port ctl cid t_start ready topics
  read -r port ctl < <(free_ports 2)
  [[ -n "$ctl" ]] || fail "$COMPONENT" "could not pick free loopback ports"
  # shellcheck disable=SC2054  # the commas are inside the values
  local -a env=(
    -e KAFKA_NODE_ID=1
    -e KAFKA_PROCESS_ROLES=broker,controller
    -e "KAFKA_LISTENERS=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$ctl"
    -e "KAFKA_CONTROLLER_QUORUM_VOTERS=1@127.0.0.1:$ctl"
    -e KAFKA_LISTENER_SECURITY_PROTOCOL_MAP=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
    -e KAFKA_CONTROLLER_LISTENER_NAMES=CONTROLLER
    -e KAFKA_INTER_BROKER_LISTENER_NAME=PLAINTEXT
    -e KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR=1
    -e KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR=1
    -e KAFKA_TRANSACTION_STATE_LOG_MIN_ISR=1
    -e KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS=0
    -e KAFKA_LOG_DIRS=/var/lib/kafka/data
    -e "CLUSTER_ID=$(new_cluster_id)"
  )
  local advertised="PLAINTEXT://127.0.0.1:$port"
  t_start="$(now)"
  if [[ "$mode" == cmd ]]; then
    cid="$(docker_cli run -d --network host --name "kubefacts-smoke-kafka-$$" \
      "${env[@]}" -e "KAFKA_ADVERTISED_LISTENERS=$advertised" "$IMAGE" 2>>"$LOG")" ||
      fail "$COMPONENT" "docker run $IMAGE failed" "$LOG"
    SMOKE_CONTAINER="$cid"
  else
    local script=/opt/kafka/testcontainers_start.sh
    cid="$(docker_cli run -d --network host --name "kubefacts-smoke-kafka-tc-$$" "${env[@]}" \
      --entrypoint bash "$IMAGE" \
      -c "while [ ! -f $script ]; do sleep 0.1; done; chmod 755 $script && $script" 2>>"$LOG")" ||
      fail "$COMPONENT" "docker run $IMAGE (testcontainers style) failed" "$LOG"
    SMOKE_CONTAINER="$cid"
    docker_cli exec "$cid" sh -c \
      "printf '#!/usr/bin/env bash\nexport KAFKA_ADVERTISED_LISTENERS=$advertised\n/etc/kafka/docker/run\n' > $script" \
      >>"$LOG" 2>&1 || smoke_fail "docker exec could not write $script as the image's user"
  fi
  while :; do
    smoke_running
    if docker_cli logs "$cid" 2>&1 | grep -q -F 'Kafka Server started' && kafka_api_versions 127.0.0.1 "$port"; then
      break
    fi
    if [[ "$(elapsed "$t_start" | cut -d. -f1)" -ge "$SMOKE_TIMEOUT" ]]; then
      smoke_fail "not ready after $SMOKE_TIMEOUT s (no 'Kafka Server started' and ApiVersions answer on 127.0.0.1:$port; $mode)"
    fi
    sleep 0.2
  done
  ready="$(elapsed "$t_start")"
  # The env -> properties convention, as the broker read it.
  local props
  props="$(docker_cli exec "$cid" cat /opt/kafka/config/server.properties 2>&1)" ||
    smoke_fail "no /opt/kafka/config/server.properties in the container"
  local want
  for want in node.id=1 process.roles=broker,controller "controller.quorum.voters=1@127.0.0.1:$ctl" \
    "advertised.listeners=$advertised" group.initial.rebalance.delay.ms=0 transaction.state.log.min.isr=1 \
    log.dirs=/var/lib/kafka/data; do
    grep -q -x -F "$want" <<<"$props" || smoke_fail "server.properties lacks '$want' ($mode): $(tr '\n' ' ' <<<"$props")"
  done
  local t_tools
  t_tools="$(now)"
  docker_cli exec "$cid" /opt/kafka/bin/kafka-topics.sh --bootstrap-server "127.0.0.1:$port" \
    --create --topic kubefacts-smoke --partitions 3 --replication-factor 1 >>"$WORK/tools.log" 2>&1 ||
    smoke_fail "kafka-topics.sh --create failed inside the container ($mode; see $WORK/tools.log)"
  topics="$(docker_cli exec "$cid" /opt/kafka/bin/kafka-topics.sh --bootstrap-server "127.0.0.1:$port" --list 2>>"$WORK/tools.log")" ||
    smoke_fail "kafka-topics.sh --list failed inside the container ($mode; see $WORK/tools.log)"
  grep -q -x kubefacts-smoke <<<"$topics" || smoke_fail "kafka-topics.sh --list does not show kubefacts-smoke ($mode): $topics"
  info "smoke ($mode): ready in $ready s (container start -> 'Kafka Server started' + ApiVersions on 127.0.0.1:$port);" \
    "env -> server.properties checked; kafka-topics.sh --create/--list in $(elapsed "$t_tools") s"
  smoke_cleanup
}

: >"$WORK/tools.log"
smoke cmd
smoke testcontainers
info "all in $(elapsed "$T_ALL") s"
