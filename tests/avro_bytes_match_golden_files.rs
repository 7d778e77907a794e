//! Golden files: the exact single-object bytes of sample records for every schema and
//! every frozen revision. An encoder, library or schema change that alters a single byte
//! of what we write fails here; `UPDATE_GOLDEN=1 cargo test --test
//! avro_bytes_match_golden_files` rewrites them (then review the diff).

mod support;

use std::{fs, path::PathBuf};

use kubefacts::codec::{
    Codec, Framing, KnownSchema, RecordWriter,
    json::{Timestamps, to_json},
};
use support::sample::sample;

fn golden_path(known: &KnownSchema) -> PathBuf {
    let rev = known.revision.map_or("current".to_owned(), |r| format!("r{r}"));
    PathBuf::from(support::repo_path(&format!("tests/golden/avro/{}.{rev}.json", known.stem)))
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[tokio::test]
async fn written_bytes_match_the_golden_files_and_decode_back() {
    let codec = Codec::new(None).unwrap();
    let set = codec.schemas();
    let update = std::env::var_os("UPDATE_GOLDEN").is_some();
    let mut checked = 0;
    for current in set.all_current() {
        for known in set.revisions(&current.stem).iter() {
            let writer =
                RecordWriter::new(known, Framing::SingleObject { fingerprint: known.fingerprint }).unwrap();
            let records: Vec<_> = [1, 3]
                .iter()
                .map(|seed| {
                    let value = sample(&known.schema, *seed);
                    let bytes = writer.encode_value(&value).unwrap();
                    serde_json::json!({"value": to_json(&value, Timestamps::EpochMillis), "single_object_hex": hex(&bytes)})
                })
                .collect();
            let golden = serde_json::json!({
                "schema": known.full_name,
                "fingerprint": format!("{:016x}", known.fingerprint),
                "records": records,
            });
            let path = golden_path(known);
            if update {
                fs::create_dir_all(path.parent().unwrap()).unwrap();
                fs::write(&path, serde_json::to_string_pretty(&golden).unwrap() + "\n").unwrap();
            }
            let stored: serde_json::Value = serde_json::from_str(
                &fs::read_to_string(&path)
                    .unwrap_or_else(|e| panic!("{}: {e} (UPDATE_GOLDEN=1 writes it)", path.display())),
            )
            .unwrap();
            assert_eq!(
                stored,
                golden,
                "{} changed: the bytes we write are not what they were",
                path.display()
            );

            // The stored bytes still decode (resolved to the current schema) to the stored value.
            for rec in stored["records"].as_array().unwrap() {
                let text = rec["single_object_hex"].as_str().unwrap();
                let bytes: Vec<u8> = (0..text.len())
                    .step_by(2)
                    .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
                    .collect();
                let decoded = codec.decode(&bytes).await.unwrap();
                assert_eq!(decoded.schema_name, known.full_name);
                if known.fingerprint == current.fingerprint {
                    assert_eq!(to_json(&decoded.value, Timestamps::EpochMillis), rec["value"]);
                }
                checked += 1;
            }
        }
    }
    let frozen = fs::read_dir(support::repo_path("schemas/revisions"))
        .unwrap()
        .map(|d| fs::read_dir(d.unwrap().path()).unwrap().count())
        .sum::<usize>();
    assert_eq!(checked, 2 * frozen, "two records for every frozen revision on disk");
}
