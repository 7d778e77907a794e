#!/usr/bin/env python3
"""Independent Avro decoder for kubefacts' Rust tests (fastavro, no project code involved).

Usage:
  fastavro_decode.py --framing confluent --registry URL
  fastavro_decode.py --framing confluent --schema FILE.avsc
  fastavro_decode.py --framing single-object --schema FILE.avsc

Reads one hex-encoded Kafka record value per line on stdin and prints one JSON line per value:
  confluent:      {"value": <decoded>, "schema_id": N}
  single-object:  {"value": <decoded>, "fingerprint": "<16 hex chars, the 8 bytes as on the wire>"}

Confluent framing: magic byte 0, big-endian 4-byte schema id, Avro binary datum. The writer
schema is fetched from the registry by this script (GET {URL}/schemas/ids/{id}, cached), URL
being the Confluent-compatible base, e.g. http://127.0.0.1:PORT/apis/ccompat/v7. With
--schema instead of --registry, the magic byte and schema id are stripped and the datum is
decoded with that schema file (the repository's .avsc, not what the writer registered).

Single-object encoding: C3 01, the schema's CRC-64-AVRO fingerprint as 8 little-endian bytes,
Avro binary datum. The fingerprint is recomputed here by fastavro from --schema's parsing
canonical form and must match.

Values become plain JSON, deterministically:
  - logical types are NOT converted: the datum is decoded with the underlying Avro type, so
    timestamp-millis is the integer epoch millis written on the wire, uuid the string, date the
    int day count, decimal its raw bytes (the parsing canonical form and therefore the
    fingerprint ignore logicalType, so this changes nothing else);
  - bytes and fixed -> lower-case hex (as kubefacts tail prints them);
  - enum -> its symbol; record -> object in schema field order; map -> object; array -> list;
  - union -> the plain value of the branch (no type wrapper);
  - NaN or infinite floats are an error (not representable in JSON).
The whole datum must be consumed: trailing bytes are an error. Any error exits non-zero with
the reason (and the 1-based input line) on stderr; lines already printed stay valid.
"""

from __future__ import annotations

import argparse
import copy
import io
import json
import math
import re
import sys
import urllib.error
import urllib.request
from typing import Any

import fastavro
from fastavro.schema import fingerprint, parse_schema, to_parsing_canonical_form

HEX_LINE = re.compile(r"^(?:[0-9a-fA-F]{2})*$")
SINGLE_OBJECT_MAGIC = b"\xc3\x01"


class DecodeError(Exception):
    pass


def strip_logical_types(schema: Any) -> Any:
    """Returns a copy of the schema without logicalType annotations (see module doc).

    Walks the schema structure only: field defaults are values and are left untouched.
    """
    if isinstance(schema, list):
        return [strip_logical_types(branch) for branch in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: v for k, v in schema.items() if k != "logicalType"}
    kind = out.get("type")
    if isinstance(kind, (dict, list)):
        out["type"] = strip_logical_types(kind)
    elif kind == "record" or kind == "error":
        fields = []
        for field in out.get("fields", []):
            field = dict(field)
            field["type"] = strip_logical_types(field.get("type"))
            fields.append(field)
        out["fields"] = fields
    elif kind == "array":
        out["items"] = strip_logical_types(out.get("items"))
    elif kind == "map":
        out["values"] = strip_logical_types(out.get("values"))
    return out


def parse_for_decoding(schema_json: Any) -> Any:
    return parse_schema(strip_logical_types(copy.deepcopy(schema_json)))


def to_plain_json(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            raise DecodeError(f"float value {value!r} has no JSON representation")
        return value
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).hex()
    if isinstance(value, dict):
        return {str(k): to_plain_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_plain_json(v) for v in value]
    raise DecodeError(f"unexpected decoded Python type {type(value).__name__}: {value!r}")


def decode_datum(payload: bytes, parsed_schema: Any) -> Any:
    buf = io.BytesIO(payload)
    try:
        value = fastavro.schemaless_reader(buf, parsed_schema)
    except Exception as e:  # fastavro raises EOFError, StopIteration, ValueError, ...
        raise DecodeError(f"Avro datum does not decode: {type(e).__name__}: {e}") from e
    consumed = buf.tell()
    if consumed != len(payload):
        raise DecodeError(
            f"trailing bytes: the datum ended after {consumed} of {len(payload)} payload bytes"
        )
    return value


class RegistrySchemas:
    def __init__(self, base_url: str):
        self.base_url = base_url.rstrip("/")
        self.cache: dict[int, Any] = {}

    def get(self, schema_id: int) -> Any:
        if schema_id in self.cache:
            return self.cache[schema_id]
        url = f"{self.base_url}/schemas/ids/{schema_id}"
        request = urllib.request.Request(
            url, headers={"Accept": "application/vnd.schemaregistry.v1+json, application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                body = json.load(response)
        except urllib.error.HTTPError as e:
            detail = e.read().decode("utf-8", "replace")
            raise DecodeError(f"GET {url} answered HTTP {e.code}: {detail}") from e
        except (urllib.error.URLError, OSError, ValueError) as e:
            raise DecodeError(f"GET {url} failed: {e}") from e
        schema_type = body.get("schemaType", "AVRO")
        if schema_type != "AVRO":
            raise DecodeError(f"schema id {schema_id} is {schema_type}, not AVRO")
        if body.get("references"):
            raise DecodeError(f"schema id {schema_id} has references, which this decoder does not resolve")
        if not isinstance(body.get("schema"), str):
            raise DecodeError(f"GET {url} returned no 'schema' string: {body!r}")
        try:
            parsed = parse_for_decoding(json.loads(body["schema"]))
        except Exception as e:
            raise DecodeError(f"schema id {schema_id} does not parse: {e}") from e
        self.cache[schema_id] = parsed
        return parsed


class FileSchema:
    """The writer schema from --schema for every schema id (confluent framing)."""

    def __init__(self, parsed: Any):
        self.parsed = parsed

    def get(self, schema_id: int) -> Any:
        return self.parsed


def decode_confluent(raw: bytes, registry: RegistrySchemas) -> dict:
    if len(raw) < 5:
        raise DecodeError(f"value is {len(raw)} bytes, shorter than the 5-byte Confluent header")
    if raw[0] != 0:
        raise DecodeError(f"magic byte is 0x{raw[0]:02x}, expected 0x00")
    schema_id = int.from_bytes(raw[1:5], "big")
    value = decode_datum(raw[5:], registry.get(schema_id))
    return {"value": to_plain_json(value), "schema_id": schema_id}


def decode_single_object(raw: bytes, parsed: Any, expected_fp: str) -> dict:
    if len(raw) < 10:
        raise DecodeError(f"value is {len(raw)} bytes, shorter than the 10-byte single-object header")
    if raw[:2] != SINGLE_OBJECT_MAGIC:
        raise DecodeError(f"marker is {raw[:2].hex()}, expected c301")
    wire_fp = raw[2:10].hex()
    if wire_fp != expected_fp:
        raise DecodeError(
            f"fingerprint on the wire {wire_fp} differs from fastavro's CRC-64-AVRO of the schema {expected_fp}"
        )
    value = decode_datum(raw[10:], parsed)
    return {"value": to_plain_json(value), "fingerprint": wire_fp}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--framing", required=True, choices=["confluent", "single-object"])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--registry", help="Confluent-compatible registry base URL (confluent framing)")
    source.add_argument("--schema", help="writer schema file, .avsc JSON (single-object framing)")
    args = parser.parse_args()

    if args.framing == "confluent" and not (args.registry or args.schema):
        parser.error("--framing confluent takes the writer schema from the registry or a file: pass --registry URL or --schema FILE")
    if args.framing == "single-object" and not args.schema:
        parser.error("--framing single-object needs the writer schema: pass --schema FILE")

    registry = None
    parsed = None
    expected_fp = ""
    if args.framing == "confluent" and args.registry:
        registry = RegistrySchemas(args.registry)
    elif args.framing == "confluent":
        try:
            with open(args.schema, encoding="utf-8") as f:
                parsed = parse_for_decoding(json.load(f))
        except Exception as e:
            print(f"fastavro_decode: cannot use schema {args.schema}: {e}", file=sys.stderr)
            return 2
        registry = FileSchema(parsed)
    else:
        try:
            with open(args.schema, encoding="utf-8") as f:
                schema_json = json.load(f)
            canonical = to_parsing_canonical_form(parse_schema(copy.deepcopy(schema_json)))
            expected_fp = fingerprint(canonical, "CRC-64-AVRO")
            parsed = parse_for_decoding(schema_json)
        except Exception as e:
            print(f"fastavro_decode: cannot use schema {args.schema}: {e}", file=sys.stderr)
            return 2

    # All input is read before anything is written, so a caller that writes every value and
    # only then reads the output can never deadlock on full pipes.
    lines = sys.stdin.buffer.read().splitlines()
    out = io.TextIOWrapper(sys.stdout.buffer, encoding="utf-8", newline="\n")
    for lineno, line in enumerate(lines, start=1):
        text = line.decode("ascii", "replace").strip()
        try:
            if not text:
                raise DecodeError("empty line (no record value)")
            if not HEX_LINE.match(text):
                raise DecodeError("not an even-length hex string")
            raw = bytes.fromhex(text)
            if registry is not None:
                result = decode_confluent(raw, registry)
            else:
                result = decode_single_object(raw, parsed, expected_fp)
            out.write(json.dumps(result, ensure_ascii=False, allow_nan=False, separators=(",", ":")) + "\n")
        except DecodeError as e:
            out.flush()
            print(f"fastavro_decode: line {lineno}: {e}", file=sys.stderr)
            return 1
        except Exception as e:  # never exit 0 on anything unexpected
            out.flush()
            print(f"fastavro_decode: line {lineno}: {type(e).__name__}: {e}", file=sys.stderr)
            return 1
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
