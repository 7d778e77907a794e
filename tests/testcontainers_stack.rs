//! The `testcontainers` feature used the way a downstream crate uses it: only the public
//! `kubefacts::testcontainers` API and the fact types. A stack in Docker is fed the bundled
//! demo trace and its job-run facts and cleanup decisions equal `kubefacts replay` of that
//! trace — single-object encoding without a registry, Confluent framing with one.

use std::{collections::BTreeMap, time::Duration};

use kubefacts::{
    cleanup::CleanupDecision,
    journal::JobRun,
    testcontainers::{FactRecord, KubefactsStack},
};

const TRACE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/traces/demo.jsonl");

/// Records per key, as multisets: a CronJob's runs are written by the `[runs]` tasks of
/// their Jobs, whose commits interleave in any order (docs/RUNTIME.md), on Kafka as in memory.
fn by_key(records: Vec<FactRecord>) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for r in records {
        out.entry(r.key.to_string()).or_default().push(r.value.to_string());
    }
    out.values_mut().for_each(|v| v.sort());
    out
}

async fn the_demo_trace_gives_what_replay_gives(registry: bool) {
    let stack = KubefactsStack::builder()
        .with_registry(registry)
        .start()
        .await
        .unwrap_or_else(|e| panic!("the stack did not start: {e}"));
    assert_eq!(stack.registry_url().is_some(), registry);
    let replayed = stack.replay_trace(TRACE).await.unwrap();
    stack.publish_trace(TRACE).await.unwrap();

    for topic in ["job-run-facts.v1", "cleanup-decisions.v1"] {
        let want = replayed.records(topic).unwrap();
        assert!(!want.is_empty(), "the replay wrote no {topic}");
        let got = stack
            .fact_records(topic)
            .wait_for(want.len(), Duration::from_secs(120))
            .await
            .unwrap_or_else(|e| panic!("{e}\n{}", stack.log_tails(30)));
        assert_eq!(by_key(got), by_key(want), "{topic} on Kafka differs from the replay");
    }
    // The bytes a consumer under test reads: Confluent framing (magic byte 0, then the
    // registry's schema id) with a registry, single-object encoding (C3 01) without.
    let raw = stack.facts::<JobRun>("job-run-facts.v1").raw().await.unwrap();
    let framed = |r: &kubefacts::testcontainers::RawRecord| {
        if registry { r.value[0] == 0 } else { r.value.starts_with(&[0xC3, 0x01]) }
    };
    assert!(
        !raw.is_empty() && raw.iter().all(framed),
        "job-run-facts.v1 is not framed as expected (registry: {registry})"
    );
    // Typed, as a consumer reads them.
    let runs: Vec<JobRun> = stack.facts("job-run-facts.v1").all().await.unwrap();
    let decisions: Vec<CleanupDecision> = stack.facts("cleanup-decisions.v1").all().await.unwrap();
    assert!(!runs.is_empty() && !decisions.is_empty());
    assert!(
        decisions.iter().all(|d| runs.iter().any(|r| r.run_uid == d.job.uid)),
        "a decision for an unknown run"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stack_without_a_registry_gives_the_replays_facts() {
    the_demo_trace_gives_what_replay_gives(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stack_with_a_registry_gives_the_replays_facts_confluent_framed() {
    the_demo_trace_gives_what_replay_gives(true).await;
}
