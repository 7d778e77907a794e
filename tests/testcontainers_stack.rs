//! The `testcontainers` feature used the way a downstream crate uses it: only the public
//! `kubefacts::testcontainers` API and the fact types. A stack in Docker is fed the bundled
//! demo trace and its job-run facts and cleanup decisions equal `kubefacts replay` of that
//! trace — single-object encoding without a registry, Confluent framing with one.

use std::{collections::BTreeMap, time::Duration};

use kubefacts::{
    cleanup::CleanupDecision,
    journal::JobRun,
    sessions::SessionProjection,
    testcontainers::{FactRecord, KubefactsStack, SessionEvent, StackError},
    trace::SessionState,
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

/// A simulated fleet (`publish_simulated`) gives what `kubefacts replay` gives for the same
/// trace, and a host application's session events (`session_event`) come back as that
/// session's projections, revision by revision.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_simulated_fleet_and_session_events_reach_their_facts() {
    let stack =
        KubefactsStack::builder().start().await.unwrap_or_else(|e| panic!("the stack did not start: {e}"));
    let trace = stack.publish_simulated("small", 2, 7).await.unwrap();
    let replayed = stack.replay_trace(&trace).await.unwrap();
    let want = replayed.records("job-run-facts.v1").unwrap();
    assert!(want.len() > 10, "the simulated fleet ran {} jobs", want.len());
    let got = stack
        .fact_records("job-run-facts.v1")
        .wait_for(want.len(), Duration::from_secs(120))
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", stack.log_tails(30)));
    assert_eq!(by_key(got), by_key(want), "the simulated fleet's runs on Kafka differ from the replay");

    let event = |state: &str| SessionEvent {
        session_id: "consumer-test-session".to_owned(),
        state: state.to_owned(),
        owner: "alice".to_owned(),
        pod_namespace: "sandboxes".to_owned(),
        pod_name: "sandbox-1".to_owned(),
        observed_at: None,
    };
    stack.session_event(&event("running")).await.unwrap();
    stack.session_event(&event("completed")).await.unwrap();
    let mine = || async {
        let all: Vec<SessionProjection> = stack.facts("session-projections.v1").all().await.unwrap();
        all.into_iter().filter(|p| p.session_id == "consumer-test-session").collect::<Vec<_>>()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let projections = loop {
        let p = mine().await;
        if p.len() >= 2 || std::time::Instant::now() > deadline {
            break p;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let seen: Vec<(i64, SessionState, &str)> =
        projections.iter().map(|p| (p.revision, p.session_state, p.owner.as_str())).collect();
    assert_eq!(
        seen,
        [(1, SessionState::Running, "alice"), (2, SessionState::Completed, "alice")],
        "the session's projections\n{}",
        stack.log_tails(30)
    );
}

/// A container that does not start fails `start` with its log tail: here "Kafka" is the
/// kubefacts image, which prints its usage and exits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_container_that_does_not_start_fails_with_its_log_tail() {
    let kubefacts = kubefacts::testcontainers::Images::from_env().kubefacts;
    let err = KubefactsStack::builder()
        .kafka_image(kubefacts.clone())
        .startup_timeout(Duration::from_secs(30))
        .start()
        .await
        .expect_err("a stack whose Kafka is not Kafka started");
    let StackError::Start { component, image, tail, log, .. } = &err else {
        panic!("not a start error: {err}");
    };
    assert_eq!((component.as_str(), image.as_str()), ("kafka", kubefacts.as_str()));
    assert!(tail.contains("Print version"), "the tail is not the container's output: {tail:?}");
    assert!(err.to_string().contains(tail.as_str()), "the message leaves the tail out: {err}");
    assert!(log.exists(), "the container's log {} was not kept", log.display());
    let _ = std::fs::remove_dir_all(log.parent().unwrap());
}

/// A pipeline the stack cannot run is refused before any container starts.
#[tokio::test]
async fn a_bad_pipeline_is_refused_before_any_container() {
    let err = KubefactsStack::builder()
        .pipeline_toml("[topics]\nprefix = 42\n")
        .start()
        .await
        .expect_err("a bad pipeline started");
    assert!(matches!(err, StackError::Config(_)), "{err}");
}
