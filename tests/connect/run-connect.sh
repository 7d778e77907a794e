#!/usr/bin/env bash
# Starts Kafka Connect standalone (org.apache.kafka.connect.cli.ConnectStandalone) reading kubefacts
# output topics with Apicurio's AvroConverter and tests/connect/JsonLinesSink.java, which appends one
# JSON line per record to a file. The worker runs in the foreground (this script execs java), so a
# caller stops it by killing this script's PID; the files fill while it runs.
#
# Inputs (environment):
#   KUBEFACTS_CONNECT_BOOTSTRAP  Kafka bootstrap servers            (default: $KUBEFACTS_TEST_BOOTSTRAP)
#   KUBEFACTS_CONNECT_REGISTRY   Apicurio Registry: the ccompat URL .../apis/ccompat/v7 our producers
#                                use, or the server root           (default: $KUBEFACTS_TEST_REGISTRY)
#   KUBEFACTS_CONNECT_LIB        classpath folder filled from scripts/infra/connect-pom.xml
#   KUBEFACTS_CONNECT_WORK       work dir: properties, offsets, classes, log and the output files
#   KUBEFACTS_CONNECT_TOPICS     comma-separated topics; those ending in `job-runs.v2` (Avro key) go to
#                                connector `<name>-avro-keys`, the others (UTF-8 string keys) to
#                                `<name>-string-keys`
#   KUBEFACTS_CONNECT_NAME       connector name prefix = consumer group prefix (default: kubefacts-<pid>);
#                                sink offsets live in group connect-<connector>, so reuse resumes
#   KUBEFACTS_CONNECT_JAVA       java 17+                           (default: $KUBEFACTS_TEST_JAVA or java)
#   KUBEFACTS_CONNECT_FILTER     1 (default): drop heartbeats with Filter + HasHeaderKey; 0: keep them
#   KUBEFACTS_CONNECT_EXTRA      extra `key=value` lines appended to both connector files (to try
#                                other converter settings, e.g. value.converter.apicurio.registry.use-id=globalId)
#   KUBEFACTS_CONNECT_REST_PORT  loopback port of the worker's REST API (default 0: any free port; the log
#                                says which: "REST server listening at http://127.0.0.1:PORT/"). A failed
#                                task shows as "state":"FAILED" with its trace at /connectors/<name>/status
# Outputs in $KUBEFACTS_CONNECT_WORK: sink-string-keys.jsonl, sink-avro-keys.jsonl (see JsonLinesSink),
#   connect.log (worker log, INFO), worker.properties, <connector>.properties, classes/.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"

bootstrap="${KUBEFACTS_CONNECT_BOOTSTRAP:-${KUBEFACTS_TEST_BOOTSTRAP:?set KUBEFACTS_CONNECT_BOOTSTRAP}}"
registry="${KUBEFACTS_CONNECT_REGISTRY:-${KUBEFACTS_TEST_REGISTRY:?set KUBEFACTS_CONNECT_REGISTRY}}"
lib="${KUBEFACTS_CONNECT_LIB:?set KUBEFACTS_CONNECT_LIB (folder of jars from scripts/infra/connect-pom.xml)}"
work="${KUBEFACTS_CONNECT_WORK:?set KUBEFACTS_CONNECT_WORK}"
topics="${KUBEFACTS_CONNECT_TOPICS:?set KUBEFACTS_CONNECT_TOPICS (comma-separated)}"
name="${KUBEFACTS_CONNECT_NAME:-kubefacts-$$}"
java="${KUBEFACTS_CONNECT_JAVA:-${KUBEFACTS_TEST_JAVA:-java}}"
filter="${KUBEFACTS_CONNECT_FILTER:-1}"
extra="${KUBEFACTS_CONNECT_EXTRA:-}"
rest_port="${KUBEFACTS_CONNECT_REST_PORT:-0}"

[[ -f "$lib/connect-runtime-4.4.0.jar" ]] || { echo "run-connect.sh: $lib has no connect-runtime-4.4.0.jar" >&2; exit 2; }
ls "$lib"/apicurio-registry-utils-converter-*.jar >/dev/null 2>&1 ||
  { echo "run-connect.sh: $lib has no apicurio-registry-utils-converter jar" >&2; exit 2; }
mkdir -p "$work"
work="$(cd "$work" && pwd)"

# The converter talks to Apicurio's own REST API (v2 for the 2.6.x converter), not to ccompat.
root="${registry%/}"
root="${root%/apis/ccompat/v7}"
root="${root%/apis/ccompat/v6}"
apicurio_url="$root/apis/registry/v2"

# Compile the sink once per work dir (javac of one file: ~1.5 s), with its ServiceLoader manifest.
classes="$work/classes"
if [[ ! -f "$classes/io/kubefacts/testconnect/JsonLinesSink.class" ]]; then
  javac_bin="$(dirname "$(readlink -f "$(command -v "$java")")")/javac"
  [[ -x "$javac_bin" ]] || javac_bin=javac
  mkdir -p "$classes/META-INF/services"
  "$javac_bin" -proc:none -d "$classes" -cp "$lib/*" "$here/JsonLinesSink.java"
  printf '%s\n' io.kubefacts.testconnect.JsonLinesSink \
    >"$classes/META-INF/services/org.apache.kafka.connect.sink.SinkConnector"
fi

string_topics=() avro_key_topics=()
IFS=',' read -r -a all_topics <<<"$topics"
for t in "${all_topics[@]}"; do
  t="${t// /}"
  [[ -n "$t" ]] || continue
  if [[ "$t" == *job-runs.v2 ]]; then avro_key_topics+=("$t"); else string_topics+=("$t"); fi
done
join() { local IFS=','; printf '%s' "$*"; }

cat >"$work/worker.properties" <<EOF
bootstrap.servers=$bootstrap
# Worker defaults; each connector below sets its own converters.
key.converter=org.apache.kafka.connect.storage.StringConverter
value.converter=org.apache.kafka.connect.storage.StringConverter
offset.storage.file.filename=$work/connect.offsets
offset.flush.interval.ms=1000
# kubefacts writes its output topics in transactions: read only committed records.
consumer.isolation.level=read_committed
consumer.auto.offset.reset=earliest
# Everything is on the classpath; connectors are found by their ServiceLoader manifests (fast start).
plugin.discovery=service_load
listeners=http://127.0.0.1:$rest_port
EOF

# Converter settings for Apicurio's AvroConverter (2.6.x) reading Confluent framing as kubefacts
# writes it through Apicurio 3.x's ccompat API: a 4-byte id after magic byte 0 (Legacy4ByteIdHandler;
# the 2.x default reads 8 bytes), and that id is a content id (what ccompat returns in Apicurio 3.x
# unless apicurio.ccompat.legacy-id-mode.enabled=true), not a global id (the 2.x default).
# `apicurio.registry.as-confluent=true` selects the same handler but logs "Duplicate id-handler
# configuration" for every converter. headers.enabled=false: the id is in the payload, never in
# apicurio.* headers.
avro_converter() { # $1: key|value
  cat <<EOF
$1.converter=io.apicurio.registry.utils.converter.AvroConverter
$1.converter.apicurio.registry.url=$apicurio_url
$1.converter.apicurio.registry.id-handler=io.apicurio.registry.serde.Legacy4ByteIdHandler
$1.converter.apicurio.registry.use-id=contentId
$1.converter.apicurio.registry.headers.enabled=false
EOF
}

connector() { # $1: suffix, $2: topics, $3: key converter kind (string|avro)
  local c="$name-$1"
  {
    printf '%s\n' "name=$c" "connector.class=io.kubefacts.testconnect.JsonLinesSink" "tasks.max=1" \
      "topics=$2" "file=$work/sink-$1.jsonl" "errors.tolerance=none" "errors.log.enable=true" \
      "errors.log.include.messages=true"
    if [[ "$3" == avro ]]; then
      avro_converter key
    else
      printf '%s\n' "key.converter=org.apache.kafka.connect.storage.StringConverter"
    fi
    avro_converter value
    if [[ "$filter" == 1 ]]; then
      printf '%s\n' "transforms=dropHeartbeats" \
        "transforms.dropHeartbeats.type=org.apache.kafka.connect.transforms.Filter" \
        "transforms.dropHeartbeats.predicate=isHeartbeat" \
        "predicates=isHeartbeat" \
        "predicates.isHeartbeat.type=org.apache.kafka.connect.transforms.predicates.HasHeaderKey" \
        "predicates.isHeartbeat.name=kubefacts-heartbeat"
    fi
    [[ -z "$extra" ]] || printf '%s\n' "$extra"
  } >"$work/$c.properties"
  printf '%s\n' "$work/$c.properties"
}

connector_files=()
((${#string_topics[@]} == 0)) || connector_files+=("$(connector string-keys "$(join "${string_topics[@]}")" string)")
((${#avro_key_topics[@]} == 0)) || connector_files+=("$(connector avro-keys "$(join "${avro_key_topics[@]}")" avro)")
((${#connector_files[@]} > 0)) || { echo "run-connect.sh: no topics in KUBEFACTS_CONNECT_TOPICS" >&2; exit 2; }

exec "$java" -Xms64m -Xmx512m \
  -Dlog4j2.configurationFile="$repo/scripts/infra/log4j2.properties" \
  -Dkubefacts.log.file="$work/connect.log" -Dkubefacts.log.level=INFO \
  -cp "$classes:$lib/*" org.apache.kafka.connect.cli.ConnectStandalone \
  "$work/worker.properties" "${connector_files[@]}"
