#!/usr/bin/env python3
"""Read one kubefacts topic with confluent-kafka and a Confluent-compatible schema registry.

Prints one JSON line per record: {"topic", "partition", "offset", "timestamp", "key", "value"}.
  * values: Avro in Confluent framing (magic byte 0, 4-byte schema id), decoded with the writer
    schema fetched from the registry (subject <topic>-value, TopicNameStrategy);
  * keys: UTF-8 strings, except on job-runs.v2 where the key is an Avro record (JobRunWindowPartKey,
    subject <topic>-key) in the same framing; `--key-format auto` (default) decodes a key as Avro
    when it starts with the magic byte 0, as a UTF-8 string otherwise;
  * tombstones (a real key, a null value) print with "value": null: they delete the key's row;
  * heartbeats (header `kubefacts-heartbeat`, key `kubefacts.heartbeat`, null value) are stream-time
    markers, not facts: they are skipped and only counted on stderr.
Records are read with isolation.level=read_committed: kubefacts writes its outputs in transactions,
and a read_uncommitted consumer would also see records of aborted transactions.

Requires: pip install "confluent-kafka[avro,schemaregistry]==2.16.1" (a binary wheel with librdkafka)

  python read_facts.py --bootstrap HOST:PORT --registry http://HOST:PORT/apis/ccompat/v7 \
      --topic prod.job-runs.v2 --until-idle

With Apicurio Registry, point --registry at its Confluent-compatible API (.../apis/ccompat/v7): the
ids in our records are the ids that API returned when the schemas were registered.
"""

import argparse
import base64
import datetime
import decimal
import json
import os
import sys
import time
import uuid

from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka.schema_registry import SchemaRegistryClient, topic_subject_name_strategy
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

HEARTBEAT_HEADER = "kubefacts-heartbeat"
EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bootstrap", default=os.environ.get("KUBEFACTS_BOOTSTRAP", "127.0.0.1:9092"))
    p.add_argument("--registry", default=os.environ.get("KUBEFACTS_REGISTRY"),
                   help="Confluent-compatible registry URL (Apicurio: .../apis/ccompat/v7)")
    p.add_argument("--topic", required=True)
    p.add_argument("--group", default=f"read-facts-{os.getpid()}-{int(time.time())}",
                   help="consumer group (default: a fresh one, so reading starts at the beginning)")
    p.add_argument("--key-format", choices=["auto", "string", "avro"], default="auto")
    p.add_argument("--reader-schema", metavar="AVSC",
                   help="decode values into this schema (e.g. the newest revision from schemas/): fields renamed "
                        "with `aliases` then come out under their new names; without it, each record keeps the "
                        "field names of the schema it was written with")
    p.add_argument("--timestamps", choices=["rfc3339", "millis"], default="rfc3339",
                   help="timestamp-millis fields as 2026-11-29T10:00:00.250Z or epoch milliseconds")
    p.add_argument("--until-idle", action="store_true",
                   help="exit once every assigned partition is caught up (or nothing arrived for --idle-ms)")
    p.add_argument("--idle-ms", type=int, default=10000)
    args = p.parse_args()
    if not args.registry:
        p.error("--registry (or KUBEFACTS_REGISTRY) is required")

    # A timeout, so an unanswered request fails instead of stalling the consumer forever.
    registry = SchemaRegistryClient({"url": args.registry, "timeout": 30})
    # kubefacts registers schemas under TopicNameStrategy (<topic>-key, <topic>-value). Naming
    # it skips the client's default subject lookup through Confluent's associations endpoint,
    # which other Confluent-compatible registries (Apicurio) do not serve.
    conf = {"subject.name.strategy": topic_subject_name_strategy}
    avro = AvroDeserializer(registry, conf=conf)  # no reader schema: decode with the writer schema
    values = avro
    if args.reader_schema:
        with open(args.reader_schema, encoding="utf-8") as f:
            values = AvroDeserializer(registry, schema_str=f.read(), conf=conf)
    consumer = Consumer({
        "bootstrap.servers": args.bootstrap,
        "group.id": args.group,
        "isolation.level": "read_committed",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,  # an example reader: a loader commits after its write lands
        "enable.partition.eof": True,  # tells us when each partition is caught up
    })

    assigned = set()
    at_eof = set()

    def on_assign(c, partitions):
        for tp in partitions:
            assigned.add((tp.topic, tp.partition))

    def on_revoke(c, partitions):
        for tp in partitions:
            assigned.discard((tp.topic, tp.partition))
            at_eof.discard((tp.topic, tp.partition))

    consumer.subscribe([args.topic], on_assign=on_assign, on_revoke=on_revoke)
    fmt = lambda v: render(v, args.timestamps)
    printed = heartbeats = 0
    last = time.monotonic()
    try:
        while True:
            msg = consumer.poll(0.5)
            now = time.monotonic()
            if msg is None:
                if args.until_idle and assigned and (at_eof >= assigned or now - last > args.idle_ms / 1000):
                    break
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    at_eof.add((msg.topic(), msg.partition()))
                    if args.until_idle and assigned and at_eof >= assigned:
                        break
                    continue
                raise KafkaException(msg.error())
            last = now
            at_eof.discard((msg.topic(), msg.partition()))
            headers = msg.headers() or []
            if any(k == HEARTBEAT_HEADER for k, _ in headers):
                heartbeats += 1
                continue
            key = decode_key(msg, avro, args.key_format)
            raw = msg.value()
            value = None if raw is None else values(raw, SerializationContext(msg.topic(), MessageField.VALUE, headers))
            ts_type, ts = msg.timestamp()
            line = {"topic": msg.topic(), "partition": msg.partition(), "offset": msg.offset(),
                    "timestamp": ts if ts_type != 0 else None, "key": key, "value": value}
            print(json.dumps(line, default=fmt, ensure_ascii=False, separators=(",", ":")), flush=True)
            printed += 1
    finally:
        consumer.close()
    print(f"read_facts: {args.topic}: {printed} record(s), {heartbeats} heartbeat(s) skipped", file=sys.stderr)


def decode_key(msg, avro, key_format):
    raw = msg.key()
    if raw is None:
        return None
    if key_format == "avro" or (key_format == "auto" and len(raw) >= 5 and raw[0] == 0):
        return avro(raw, SerializationContext(msg.topic(), MessageField.KEY, msg.headers()))
    return raw.decode("utf-8")  # strict: a key that is not UTF-8 is an error, not a guess


def render(v, timestamps):
    """JSON for what fastavro returns beyond JSON's own types."""
    if isinstance(v, datetime.datetime):  # timestamp-millis (UTC)
        if v.tzinfo is None:
            v = v.replace(tzinfo=datetime.timezone.utc)
        ms = (v - EPOCH) // datetime.timedelta(milliseconds=1)
        if timestamps == "millis":
            return ms
        return v.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"
    if isinstance(v, datetime.date):
        return v.isoformat()
    if isinstance(v, uuid.UUID):
        return str(v)
    if isinstance(v, decimal.Decimal):
        return str(v)
    if isinstance(v, (bytes, bytearray)):
        return base64.b64encode(v).decode("ascii")
    raise TypeError(f"no JSON rendering for {type(v).__name__}")


if __name__ == "__main__":
    main()
