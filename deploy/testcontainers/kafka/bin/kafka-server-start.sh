#!/usr/bin/env bash
# Starts the broker/controller (kafka.Kafka) with a server.properties, as Kafka's script of
# this name does: heap -Xmx1G -Xms1G unless KAFKA_HEAP_OPTS says otherwise, the broker's
# log4j2 config (everything at INFO on stdout) unless KAFKA_LOG4J_OPTS does.
# Usage: kafka-server-start.sh server.properties [--override property=value]...
set -euo pipefail
[[ $# -ge 1 ]] || { echo "usage: $0 server.properties [--override property=value]..." >&2; exit 1; }
base="$(cd "$(dirname "$0")/.." && pwd)"
export KAFKA_HEAP_OPTS="${KAFKA_HEAP_OPTS:--Xmx1G -Xms1G}"
export KAFKA_LOG4J_OPTS="${KAFKA_LOG4J_OPTS:--Dlog4j2.configurationFile=$base/config/log4j2.yaml}"
exec "$base/bin/kafka-run-class.sh" kafka.Kafka "$@"
