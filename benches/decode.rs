//! Decoding only the allowlist (issue 25): Kubernetes JSON → minimized observation, the
//! path before (whole k8s-openapi objects, then minimization) and now (the allowlisted
//! types of `kubefacts::trace::minimal`, then minimization) side by side, one core.
//!
//! 1. Kubernetes Job JSON → minimized Job record, per object: what the watcher does with
//!    each Job kube-rs receives. The same for Pods, the most frequent kind.
//! 2. A trace file → observations (`publish`'s work before Kafka): the trace reader alone,
//!    and with admission, minimization, keying and Avro encoding, entries per second;
//!    beside them the old reader's decoding (JSON value → k8s-openapi object →
//!    minimization, no admission, no encoding), a lower bound on what that path cost.
//!
//! Inputs are the simulator's real-shaped objects (`--profile`, default medium, `--hours`,
//! default 1, seed 1), as `kubefacts simulate` writes them. Run with
//! `cargo bench --bench decode [-- --profile medium --hours 1]`; under `cargo test` it runs
//! one hour of the small fleet briefly and checks the counts and that both paths agree.

use std::{
    io::Write,
    time::{Duration, Instant},
};

use k8s_openapi::api::{batch::v1 as batch, core::v1 as core};
use kubefacts::{
    codec::{Codec, Framing, RecordWriter},
    config::PipelineConfig,
    observe::{InputTopic, Observer, minimize, model::Source},
    simulate,
    trace::{self, KeptKeys, minimal},
};
use serde_json::Value;

// The binary's allocator (src/main.rs), so the figures are the ones `watch` and `publish` get.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Runs `f` over `inputs` round after round for at least `min`; objects per second.
fn rate<T>(inputs: &[T], min: Duration, mut f: impl FnMut(&T) -> usize) -> (f64, usize) {
    let (started, mut n, mut check) = (Instant::now(), 0usize, 0usize);
    while started.elapsed() < min || n == 0 {
        for i in inputs {
            check += f(i);
        }
        n += inputs.len();
    }
    (n as f64 / started.elapsed().as_secs_f64(), check)
}

/// The objects of `kind` in the trace, as JSON text (kube-rs and the trace reader decode
/// from text, which serde_json need not check for UTF-8 again).
fn objects(lines: &[Vec<u8>], kind: &str) -> Vec<String> {
    lines
        .iter()
        .filter_map(|l| {
            let v: Value = serde_json::from_slice(l).ok()?;
            let o = v.get("object")?;
            (o["kind"] == kind).then(|| serde_json::to_string(o).unwrap())
        })
        .collect()
}

fn main() {
    let argv: Vec<String> = std::env::args().collect();
    let value = |flag: &str| argv.iter().position(|a| a == flag).and_then(|i| argv.get(i + 1)).cloned();
    let benching = argv.iter().any(|a| a == "--bench");
    let (profile, hours) = if benching {
        let p = simulate::profile(&value("--profile").unwrap_or_else(|| "medium".into())).unwrap();
        (p, value("--hours").map_or(1, |h| h.parse().unwrap()))
    } else {
        (simulate::profile("small").unwrap(), 1)
    };
    let min = Duration::from_millis(if benching { 3_000 } else { 50 });
    let config = PipelineConfig::embedded_default().unwrap();
    let cfg = &config.minimize;
    let keys: std::sync::Arc<KeptKeys> = cfg.kept_keys(&config.admission);

    let mut trace = Vec::new();
    let mut lines = Vec::new();
    for e in simulate::simulate(&profile, hours, 1) {
        let mut line = Vec::new();
        e.write_line(&mut line).unwrap();
        trace.extend_from_slice(&line);
        lines.push(line);
    }
    println!(
        "decode bench: {} fleet, {hours} h, seed 1: {} trace entries, {:.1} MB; pid {}\n",
        profile.name,
        lines.len(),
        trace.len() as f64 / 1e6,
        std::process::id()
    );

    // 1. Per object.
    for kind in ["Job", "Pod"] {
        let inputs = objects(&lines, kind);
        assert!(inputs.len() > 10, "{} {kind}s in the trace", inputs.len());
        let bytes = inputs.iter().map(String::len).sum::<usize>() / inputs.len();
        let (old, old_check, new, new_check) = if kind == "Job" {
            let (old, oc) = rate(&inputs, min, |j| {
                let job: batch::Job = serde_json::from_str(j).unwrap();
                minimize::openapi::job(&job, cfg).unwrap().status.conditions.len()
            });
            let (new, nc) = rate(&inputs, min, |j| {
                let job: minimal::Job = minimal::keeping(&keys, || serde_json::from_str(j)).unwrap();
                minimize::job(job, cfg).unwrap().status.conditions.len()
            });
            for j in &inputs {
                let old: batch::Job = serde_json::from_str(j).unwrap();
                let new: minimal::Job = minimal::keeping(&keys, || serde_json::from_str(j)).unwrap();
                assert_eq!(minimize::openapi::job(&old, cfg), minimize::job(new, cfg), "both paths agree");
            }
            (old, oc, new, nc)
        } else {
            let (old, oc) = rate(&inputs, min, |p| {
                let pod: core::Pod = serde_json::from_str(p).unwrap();
                minimize::openapi::pod(&pod, cfg).unwrap().containers.len()
            });
            let (new, nc) = rate(&inputs, min, |p| {
                let pod: minimal::Pod = minimal::keeping(&keys, || serde_json::from_str(p)).unwrap();
                minimize::pod(pod, cfg).unwrap().containers.len()
            });
            for p in &inputs {
                let old: core::Pod = serde_json::from_str(p).unwrap();
                let new: minimal::Pod = minimal::keeping(&keys, || serde_json::from_str(p)).unwrap();
                assert_eq!(minimize::openapi::pod(&old, cfg), minimize::pod(new, cfg), "both paths agree");
            }
            (old, oc, new, nc)
        };
        assert!(old_check > 0 && new_check > 0, "the work is not optimized away");
        println!(
            "1. Kubernetes {kind} JSON → minimized observation, one core ({} objects, {bytes} B avg)\n   \
             k8s-openapi then minimize {old:>10.0} objects/s\n   \
             allowlist types           {new:>10.0} objects/s   ({:.2}×)",
            inputs.len(),
            new / old
        );
    }

    // 2. A trace file → observations, as `publish` reads it.
    let writers: Vec<(InputTopic, RecordWriter)> = {
        let codec = Codec::new(None).unwrap();
        InputTopic::ALL
            .iter()
            .map(|t| {
                let known = codec.schemas().current(t.full_name()).unwrap();
                (
                    *t,
                    RecordWriter::new(known, Framing::SingleObject { fingerprint: known.fingerprint })
                        .unwrap(),
                )
            })
            .collect()
    };
    let source = Source { cluster: config.cluster.clone(), instance: "bench".into(), epoch: 1 };
    let rounds = if benching { 3 } else { 1 };
    let (mut best_new, mut best_old, mut best_read) = (0f64, 0f64, 0f64);
    let (mut entries, mut records) = (0usize, 0usize);
    for _ in 0..rounds {
        let started = Instant::now();
        let read = trace::read(trace.as_slice()).keeping(keys.clone()).filter(Result::is_ok).count();
        best_read = best_read.max(read as f64 / started.elapsed().as_secs_f64());
        assert_eq!(read, lines.len(), "every entry read");

        let started = Instant::now();
        let mut observer =
            Observer::new(source.clone(), cfg.clone()).with_admission(config.admission.clone());
        (entries, records) = (0, 0);
        for e in trace::read(trace.as_slice()).keeping(observer.kept_keys()) {
            entries += 1;
            for released in observer.admit(e.unwrap()) {
                for obs in released.unwrap() {
                    let w = &writers.iter().find(|(t, _)| *t == obs.topic).unwrap().1;
                    std::hint::black_box(obs.record.encode(w).unwrap());
                    records += 1;
                }
            }
        }
        best_new = best_new.max(entries as f64 / started.elapsed().as_secs_f64());

        // The old reader: every value parsed whole, every object into k8s-openapi.
        let started = Instant::now();
        let mut minimized = 0usize;
        for v in serde_json::Deserializer::from_slice(&trace).into_iter::<Value>() {
            let mut v = v.unwrap();
            let Some(o) = v.get_mut("object").map(Value::take) else { continue };
            let ok = match o["kind"].as_str() {
                Some("Job") => minimize::openapi::job(&serde_json::from_value(o).unwrap(), cfg).is_ok(),
                Some("Pod") => minimize::openapi::pod(&serde_json::from_value(o).unwrap(), cfg).is_ok(),
                Some("CronJob") => {
                    minimize::openapi::cronjob(&serde_json::from_value(o).unwrap(), cfg).is_ok()
                }
                Some("Lease") => minimize::openapi::lease(&serde_json::from_value(o).unwrap(), cfg).is_ok(),
                _ => serde_json::from_value::<core::Namespace>(o).is_ok(),
            };
            minimized += usize::from(ok);
        }
        best_old = best_old.max(lines.len() as f64 / started.elapsed().as_secs_f64());
        assert!(minimized > 0);
    }
    assert_eq!(entries, lines.len(), "every entry read");
    assert!(records > entries / 2, "{records} records from {entries} entries");
    let objects = lines.iter().filter(|l| l.windows(9).any(|w| w == b"\"object\":")).count();
    println!(
        "2. trace file → observations (publish before Kafka), one core, best of {rounds}\n   \
         old reader + k8s-openapi + minimize only  {best_old:>10.0} entries/s\n   \
         reader alone (allowlist types)            {best_read:>10.0} entries/s   ({:.2}×)\n   \
         reader + admission + minimize + Avro      {best_new:>10.0} entries/s   ({:.2}×; {records} records, {objects} objects)",
        best_read / best_old,
        best_new / best_old
    );
    std::io::stdout().flush().unwrap();
}
