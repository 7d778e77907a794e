//! Corrupt and foreign bytes fed to the decoder and to `kubefacts tail` produce clear
//! errors, never panics, and tailing goes on past them.

mod support;

use std::process::Command;

use kubefacts::codec::{Codec, CodecError, Framing};
use proptest::prelude::*;
use support::sample::sample;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

/// A valid single-object record of every schema, to corrupt.
fn valid_records(codec: &Codec) -> Vec<Vec<u8>> {
    let rt = runtime();
    codec
        .schemas()
        .all_current()
        .into_iter()
        .map(|k| {
            let w = rt.block_on(codec.value_writer("t", &k.full_name)).unwrap();
            w.encode_value(&sample(&k.schema, 1)).unwrap()
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        let codec = Codec::new(None).unwrap();
        let rt = runtime();
        let _ = rt.block_on(codec.decode_as::<serde_json::Value>(&bytes));
        let result = rt.block_on(codec.decode(&bytes));
        if let Err(e) = result {
            prop_assert!(!e.to_string().is_empty());
            prop_assert!(!e.reason().is_empty());
        }
    }

    #[test]
    fn corrupted_valid_records_never_panic(
        which in 0usize..11,
        cut in any::<prop::sample::Index>(),
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
        extra in proptest::collection::vec(any::<u8>(), 0..3),
    ) {
        let codec = Codec::new(None).unwrap();
        let records = valid_records(&codec);
        let mut bytes = records[which % records.len()].clone();
        for (at, b) in flips {
            let i = at.index(bytes.len());
            bytes[i] ^= b;
        }
        bytes.truncate(cut.index(bytes.len() + 1));
        bytes.extend(extra);
        let rt = runtime();
        let _ = rt.block_on(codec.decode(&bytes));
        let _ = rt.block_on(codec.decode_as::<serde_json::Value>(&bytes));
    }
}

#[test]
fn truncated_datums_and_trailing_bytes_are_named() {
    let codec = Codec::new(None).unwrap();
    let rt = runtime();
    let (mut truncated, mut truncated_as_such) = (0, 0);
    for record in valid_records(&codec) {
        let datum_len = record.len() - kubefacts::codec::SINGLE_OBJECT_HEADER_LEN;
        // Every strict prefix of the datum fails; none panics.
        for cut in 0..datum_len {
            let short = &record[..kubefacts::codec::SINGLE_OBJECT_HEADER_LEN + cut];
            let err = match rt.block_on(codec.decode(short)) {
                Ok(v) => panic!("cut {cut} of {datum_len} decoded: {v:?}"),
                Err(e) => e,
            };
            assert!(matches!(err, CodecError::Datum { .. } | CodecError::TruncatedDatum { .. }), "{err}");
            truncated_as_such += usize::from(matches!(err, CodecError::TruncatedDatum { .. }));
            // The typed fast path (schema-aware serde) refuses it too.
            let typed = rt.block_on(codec.decode_as::<serde_json::Value>(short));
            assert!(typed.is_err(), "cut {cut} of {datum_len} decoded as {typed:?}");
            truncated += 1;
        }
        let mut long = record.clone();
        long.push(0);
        let err = rt.block_on(codec.decode(&long)).unwrap_err();
        assert!(matches!(err, CodecError::TrailingBytes { trailing: 1, .. }), "{err}");
    }
    assert!(truncated > 100);
    // apache-avro alone would read a cut before a trailing optional field as null; the
    // guard in read_datum turns those into errors (remove it and this count drops to 0
    // while the loop above panics on a "valid" truncated record).
    assert!(truncated_as_such > 0);

    let mut foreign = Framing::SingleObject { fingerprint: 0x1234 }.header();
    foreign.push(0);
    let err = rt.block_on(codec.decode(&foreign)).unwrap_err();
    assert_eq!(err.reason(), "unknown_fingerprint");
    assert!(err.to_string().contains("0000000000001234"), "{err}");
    let err = rt.block_on(codec.decode(br#"{"kind":"Job"}"#)).unwrap_err();
    assert_eq!(
        err.to_string(),
        "unknown framing: first byte 0x7b is neither Confluent (0x00) nor Avro single-object (0xC3 0x01)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tail_prints_good_records_and_names_every_bad_one() {
    let infra = support::infra();
    let topic = infra.topic("tail", 1).await;
    let confluent = Codec::new(Some(
        kubefacts::codec::RegistryClient::new(&infra.registry, std::time::Duration::from_secs(10)).unwrap(),
    ))
    .unwrap();
    let plain = Codec::new(None).unwrap();
    let name = "io.kubefacts.v1.CleanupDecision";
    let schema = &plain.schemas().current(name).unwrap().schema;
    let good_confluent =
        confluent.value_writer(&topic, name).await.unwrap().encode_value(&sample(schema, 1)).unwrap();
    let good_single =
        plain.value_writer(&topic, name).await.unwrap().encode_value(&sample(schema, 2)).unwrap();
    let mut unknown_id = Framing::Confluent { schema_id: 999_999_999 }.header();
    unknown_id.push(2);
    let records = vec![
        (Some("a"), good_confluent.clone()),
        (Some("b"), b"{\"not\":\"avro\"}".to_vec()),
        (Some("c"), unknown_id),
        (Some("d"), good_confluent[..good_confluent.len() - 3].to_vec()),
        (Some("e"), vec![]),
        (Some("f"), good_single),
    ];
    infra.produce(&topic, &records).await;

    let out = Command::new(env!("CARGO_BIN_EXE_kubefacts"))
        .args(["tail", "--topic", &topic, "--from-beginning", "--until-idle", "--idle-ms", "3000"])
        .args(["--bootstrap", &infra.bootstrap, "--registry", &infra.registry, "--timestamps", "millis"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let lines: Vec<serde_json::Value> =
        String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let summary: Vec<(&str, Option<&str>, Option<&str>)> = lines
        .iter()
        .map(|l| (l["key"].as_str().unwrap(), l["framing"].as_str(), l["reason"].as_str()))
        .collect();
    assert_eq!(
        summary,
        [
            ("a", Some("confluent"), None),
            ("b", None, Some("unknown_framing")),
            ("c", None, Some("unknown_schema_id")),
            ("d", None, Some("truncated_datum")),
            ("e", None, Some("empty")),
            ("f", Some("single-object"), None),
        ]
    );
    assert_eq!(lines[0]["schema"], name);
    assert_eq!(lines[0]["value"]["decided_at"], sample_json(schema, 1)["decided_at"]);
    assert!(lines[2]["error"].as_str().unwrap().contains("999999999"));
    assert!(stderr.contains("6 record(s)") && stderr.contains("4 undecodable"), "{stderr}");
}

fn sample_json(schema: &apache_avro::Schema, seed: u64) -> serde_json::Value {
    kubefacts::codec::json::to_json(&sample(schema, seed), kubefacts::codec::json::Timestamps::EpochMillis)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tail_of_a_missing_topic_fails_saying_so() {
    let infra = support::infra();
    let topic = support::unique_name("missing");
    let out = Command::new(env!("CARGO_BIN_EXE_kubefacts"))
        .args(["tail", "--topic", &topic, "--until-idle", "--bootstrap", &infra.bootstrap])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains(&format!("topic {topic} does not exist")), "{stderr}");
}
