#!/usr/bin/env bash
# Runs a Kafka class on /opt/kafka/libs, with the environment knobs of Kafka's own script of
# this name: KAFKA_HEAP_OPTS (default -Xmx256M), KAFKA_JVM_PERFORMANCE_OPTS, KAFKA_GC_LOG_OPTS,
# KAFKA_JMX_OPTS, KAFKA_LOG4J_OPTS (default: the tools' log4j2 config, warnings to stderr),
# KAFKA_OPTS, JAVA_HOME. Written for the kubefacts stand-in image (not Kafka's script).
# Usage: kafka-run-class.sh CLASS [ARGS...]
set -euo pipefail
[[ $# -ge 1 ]] || { echo "usage: $0 CLASS [ARGS...]" >&2; exit 1; }
base="$(cd "$(dirname "$0")/.." && pwd)"
class="$1"
shift
java="java"
[[ -n "${JAVA_HOME:-}" ]] && java="$JAVA_HOME/bin/java"
read -r -a heap <<<"${KAFKA_HEAP_OPTS:--Xmx256M}"
read -r -a perf <<<"${KAFKA_JVM_PERFORMANCE_OPTS:--server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35 -XX:+ExplicitGCInvokesConcurrent -Djava.awt.headless=true}"
read -r -a gc <<<"${KAFKA_GC_LOG_OPTS:-}"
read -r -a jmx <<<"${KAFKA_JMX_OPTS:-}"
read -r -a log4j <<<"${KAFKA_LOG4J_OPTS:--Dlog4j2.configurationFile=$base/config/tools-log4j2.yaml}"
read -r -a opts <<<"${KAFKA_OPTS:-}"
exec "$java" "${heap[@]}" "${perf[@]}" "${gc[@]}" "${jmx[@]}" "${log4j[@]}" \
  -cp "$base/libs/*" "${opts[@]}" "$class" "$@"
