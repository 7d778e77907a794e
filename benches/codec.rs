//! Codec throughput: apache-avro (what kubefacts uses) against serde_avro_fast, side by
//! side in one run on the same records, single-threaded, as records/s and ratios.
//!
//! Records are the Job observations of the bundled demo trace — real-shaped, minimized,
//! 100–300 bytes each. Run with `cargo bench --bench codec` (optionally `-- SECONDS` per
//! variant, default 1.5). Both libraries must produce the same bytes and values: the bench
//! checks that before it times anything.

use std::{
    hint::black_box,
    time::{Duration, Instant},
};

use apache_avro::{reader::datum::GenericDatumReader, types::Value};
use kubefacts::{
    codec::{Codec, read_datum},
    observe::{
        InputTopic, MinimizeConfig, ObservationRecord, Observer,
        model::{JobObservation, Source},
    },
    trace,
};

const TRACE: &str = include_str!("../tests/fixtures/traces/demo.jsonl");

fn job_records() -> Vec<JobObservation> {
    let source = Source { cluster: "bench".into(), instance: "bench".into(), epoch: 1 };
    let mut observer = Observer::new(source, MinimizeConfig::default());
    trace::read(TRACE.as_bytes())
        .flat_map(|e| observer.observe(e.expect("bundled trace parses")).expect("bundled trace observes"))
        .filter_map(|o| match o.record {
            ObservationRecord::Job(j) if j.job.is_some() => Some(j),
            _ => None,
        })
        .collect()
}

/// Runs `f` over all records repeatedly for about `budget`; returns records/s.
fn rate(budget: Duration, n_records: usize, mut f: impl FnMut()) -> f64 {
    for _ in 0..20 {
        f(); // warm up
    }
    let start = Instant::now();
    let mut rounds = 0u64;
    while start.elapsed() < budget {
        f();
        rounds += 1;
    }
    (rounds * n_records as u64) as f64 / start.elapsed().as_secs_f64()
}

fn main() {
    // `cargo bench` passes --bench; under `cargo test --all-targets` this runs as a quick
    // check that both libraries agree and every variant works.
    let benching = std::env::args().any(|a| a == "--bench");
    let secs: f64 =
        std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(if benching { 1.5 } else { 0.02 });
    let budget = Duration::from_secs_f64(secs);
    let records = job_records();
    assert!(records.len() >= 10, "need records to measure");
    let n = records.len();

    let codec = Codec::new(None).unwrap();
    let known = codec.schemas().current(InputTopic::Jobs.full_name()).unwrap();
    let writer = futures::executor::block_on(codec.value_writer("bench", &known.full_name)).unwrap();
    let fast_schema: serde_avro_fast::Schema = known.text.parse().unwrap();
    let mut fast_config = serde_avro_fast::ser::SerializerConfig::new(&fast_schema);

    // Same bytes and values from both libraries, or the comparison means nothing.
    let framed: Vec<Vec<u8>> = records.iter().map(|r| writer.encode(r).unwrap()).collect();
    let header = framed[0].len() - apache_avro_datum_len(&framed[0], &known.schema);
    for (r, f) in records.iter().zip(&framed) {
        let fast = serde_avro_fast::to_datum_vec(r, &mut fast_config).unwrap();
        assert_eq!(fast, f[header..], "serde_avro_fast and apache-avro disagree on the bytes");
        let back: JobObservation = serde_avro_fast::from_datum_slice(&f[header..], &fast_schema).unwrap();
        assert_eq!(&back, r);
    }
    let bytes_per_record = framed.iter().map(Vec::len).sum::<usize>() as f64 / n as f64;
    println!(
        "codec bench: {n} JobObservation records, {bytes_per_record:.0} B each on average (incl. {header} B single-object header), {secs} s per variant, 1 thread\n"
    );

    let mut results: Vec<(&str, &str, f64)> = Vec::new();
    results.push((
        "encode",
        "apache-avro schema-aware serde (RecordWriter::encode, used)",
        rate(budget, n, || {
            for r in &records {
                black_box(writer.encode(black_box(r)).unwrap());
            }
        }),
    ));
    results.push((
        "encode",
        "apache-avro to_value + write_value",
        rate(budget, n, || {
            for r in &records {
                let v = apache_avro::to_value(black_box(r)).unwrap();
                black_box(writer.encode_value(&v).unwrap());
            }
        }),
    ));
    let mut buf = Vec::with_capacity(512);
    results.push((
        "encode",
        "serde_avro_fast to_datum (reused buffers)",
        rate(budget, n, || {
            for r in &records {
                buf.clear();
                buf.extend_from_slice(&framed[0][..header]);
                buf = serde_avro_fast::to_datum(black_box(r), std::mem::take(&mut buf), &mut fast_config)
                    .unwrap();
                black_box(&buf);
            }
        }),
    ));
    for (r, f) in records.iter().zip(&framed) {
        assert_eq!(&futures::executor::block_on(codec.decode_as::<JobObservation>(f)).unwrap(), r);
    }
    results.push((
        "decode",
        "kubefacts Codec::decode_as (used: any framing, serde fast path)",
        rate(budget, n, || {
            for f in &framed {
                black_box(
                    futures::executor::block_on(codec.decode_as::<JobObservation>(black_box(f))).unwrap(),
                );
            }
        }),
    ));
    results.push((
        "decode",
        "kubefacts Codec::decode + from_value (Value path, resolves revisions)",
        rate(budget, n, || {
            for f in &framed {
                let d = futures::executor::block_on(codec.decode(black_box(f))).unwrap();
                black_box(apache_avro::from_value::<JobObservation>(&d.value).unwrap());
            }
        }),
    ));
    results.push((
        "decode",
        "apache-avro read_datum + from_value (no framing)",
        rate(budget, n, || {
            for f in &framed {
                let v = read_datum("bench", &known.schema, None, black_box(&f[header..])).unwrap();
                black_box(apache_avro::from_value::<JobObservation>(&v).unwrap());
            }
        }),
    ));
    results.push((
        "decode",
        "apache-avro read_deser (schema-aware serde, no resolution)",
        rate(budget, n, || {
            let reader = GenericDatumReader::builder(&known.schema).build().unwrap();
            for f in &framed {
                let mut slice = black_box(&f[header..]);
                black_box(reader.read_deser::<JobObservation>(&mut slice).unwrap());
            }
        }),
    ));
    results.push((
        "decode",
        "serde_avro_fast from_datum_slice",
        rate(budget, n, || {
            for f in &framed {
                black_box(
                    serde_avro_fast::from_datum_slice::<JobObservation>(
                        black_box(&f[header..]),
                        &fast_schema,
                    )
                    .unwrap(),
                );
            }
        }),
    ));

    for op in ["encode", "decode"] {
        let base = results.iter().find(|r| r.0 == op).map(|r| r.2).unwrap();
        println!("{op:<7} {:<72} {:>12} {:>8} {:>9}", "variant", "records/s", "MB/s", "vs used");
        for (_, name, r) in results.iter().filter(|r| r.0 == op) {
            println!("        {name:<72} {r:>12.0} {:>8.1} {:>8.2}x", r * bytes_per_record / 1e6, r / base);
        }
        println!();
    }
}

/// Length of the datum inside a framed record (the frame header is the rest).
fn apache_avro_datum_len(framed: &[u8], schema: &apache_avro::Schema) -> usize {
    let (_, datum) = kubefacts::codec::Framing::parse(framed).unwrap();
    let v: Value = read_datum("bench", schema, None, datum).unwrap();
    drop(v);
    datum.len()
}
