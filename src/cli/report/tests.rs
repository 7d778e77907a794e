//! Unit tests of the report: filters, ordering, tombstones, the JSON shape, `--since`, and
//! reading `replay`'s JSON lines back as the records they were.

use std::collections::BTreeSet;

use kubefacts::{
    cleanup::{CleanupDecision, JobRef, RetentionSource},
    codec::Codec,
    coverage::{CoverageAlert, CoverageState, CoverageSubject},
    journal::{ContainerExitCount, JobRun, OwnerKind, RunOwner, RunResult},
    observe::model::{PodIdentity, SessionState},
    sessions::{ContainerRequests, RetentionState, SessionProjection},
};

use super::{
    parse_since,
    source::{Collector, FactTopic},
    summary::{Facts, Filter, Summary},
};

const T0: i64 = 1_793_491_200_000; // 2026-11-01T00:00:00Z
const MIN: i64 = 60_000;

/// A UUID made from `s` (UIDs are Avro `uuid`s).
fn uid(s: &str) -> String {
    let h = s.bytes().fold(0u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)));
    format!("00000000-0000-4000-8000-{:012x}", h & 0xffff_ffff_ffff)
}

/// A run of CronJob `owner` in `ns`, finished at `T0 + minute` minutes.
fn run(ns: &str, owner: &str, minute: i64) -> JobRun {
    JobRun {
        namespace: ns.into(),
        owner: RunOwner { kind: OwnerKind::Cronjob, name: owner.into(), uid: uid(owner) },
        run_name: format!("{owner}-{minute}"),
        run_uid: uid(&format!("run-{ns}-{owner}-{minute}")),
        started_at: Some(T0 + minute * MIN - MIN),
        finished_at: T0 + minute * MIN,
        result: RunResult::Succeeded,
        failure_reason: None,
        succeeded_pods: 1,
        failed_pods: 0,
        parallelism: Some(1),
        completions: Some(1),
        backoff_limit: Some(2),
        exits: vec![],
    }
}

fn failed(mut r: JobRun, reason: &str, exit_code: i32, count: i64) -> JobRun {
    r.result = RunResult::Failed;
    r.failure_reason = Some(reason.into());
    r.failed_pods = count as i32;
    r.exits =
        vec![ContainerExitCount { container: "main".into(), exit_code, reason: Some("Error".into()), count }];
    r
}

fn decision(ns: &str, name: &str, minute: i64) -> CleanupDecision {
    CleanupDecision {
        job: JobRef { namespace: ns.into(), name: name.into(), uid: uid(name) },
        owner: None,
        result: Some(RunResult::Succeeded),
        finished_at: T0,
        retention_secs: 3600,
        retention_source: RetentionSource::Default,
        decided_at: T0 + minute * MIN,
        sweep: minute,
    }
}

fn alert(ns: &str, name: &str, state: CoverageState, minute: i64) -> CoverageAlert {
    CoverageAlert {
        subject: CoverageSubject {
            kind: "CronJob".into(),
            namespace: ns.into(),
            name: name.into(),
            uid: uid(&format!("cj-{ns}-{name}")),
        },
        state,
        previous_state: None,
        stream_time: T0 + minute * MIN,
        last_progress: None,
        last_progress_source: None,
        expected_by: Some(T0),
        pending_since: Some(T0),
        manager_lease: "kube-system/kube-controller-manager".into(),
        manager_covered_until: None,
        coverage_gaps: vec![],
    }
}

fn projection(id: &str, ns: &str, state: RetentionState, revision: i64) -> SessionProjection {
    SessionProjection {
        session_id: id.into(),
        owner: "tenant-1".into(),
        session_state: SessionState::Completed,
        retention_state: state,
        pod: Some(PodIdentity { namespace: ns.into(), name: format!("agent-{id}"), uid: Some(uid(id)) }),
        pod_phase: None,
        main_container_requests: ContainerRequests { cpu_millicores: Some(500), memory_bytes: Some(1 << 29) },
        foreign_pods_seen: 0,
        stream_time: T0 + revision * MIN,
        revision,
    }
}

fn facts() -> Facts {
    Facts {
        runs: vec![
            run("etl", "nightly", 10),
            failed(run("etl", "nightly", 70), "BackoffLimitExceeded", 1, 3),
            failed(run("ml", "train", 20), "DeadlineExceeded", 137, 1),
            failed(run("ml", "train", 80), "BackoffLimitExceeded", 137, 2),
            run("ml", "train", 90),
        ],
        windows: vec![],
        decisions: vec![decision("ml", "train-20", 90), decision("etl", "nightly-10", 75)],
        alerts: vec![
            alert("etl", "nightly", CoverageState::Pending, 30),
            alert("etl", "nightly", CoverageState::Firing, 45),
            alert("ml", "train", CoverageState::ManagerStopped, 50),
        ],
        projections: vec![
            ("s1".into(), Some(projection("s1", "agents", RetentionState::Active, 1))),
            ("s2".into(), Some(projection("s2", "agents", RetentionState::Retained, 2))),
            ("s1".into(), Some(projection("s1", "agents", RetentionState::Retained, 3))),
        ],
        totals: vec![],
    }
}

#[test]
fn failing_owners_come_most_failed_first_with_their_exits() {
    let s = Summary::build(facts(), &Filter::default(), 3600);
    assert_eq!((s.runs.filed, s.runs.failed), (5, 3));
    let failing: Vec<(&str, u64, u64)> =
        s.runs.failing.iter().map(|f| (f.name.as_str(), f.failed, f.runs)).collect();
    assert_eq!(failing, [("train", 2, 3), ("nightly", 1, 2)]);
    let train = &s.runs.failing[0];
    assert_eq!(train.reasons.get("BackoffLimitExceeded"), Some(&1));
    assert_eq!(train.reasons.get("DeadlineExceeded"), Some(&1));
    assert_eq!((train.exits[0].exit_code, train.exits[0].count), (137, 3));
    // Five runs: listed one by one, by finish time.
    let every: Vec<&str> = s.runs.every_run.as_ref().unwrap().iter().map(|r| r.run_name.as_str()).collect();
    assert_eq!(every, ["nightly-10", "train-20", "nightly-70", "train-80", "train-90"]);
}

#[test]
fn namespace_and_since_narrow_every_section() {
    let filter = Filter { since_ms: None, namespaces: BTreeSet::from(["etl".to_owned()]) };
    let s = Summary::build(facts(), &filter, 3600);
    assert_eq!((s.runs.filed, s.runs.failed), (2, 1));
    assert!(s.runs.failing.iter().all(|f| f.namespace == "etl"));
    assert_eq!(s.cleanup.decided, 1);
    assert_eq!(s.coverage.state_changes, 2);
    assert_eq!(s.coverage.fired.len(), 1);
    assert!(s.coverage.excused.is_empty(), "ml's CronJob is left out");
    assert_eq!(s.sessions.sessions, 0, "no session Pod in etl");

    let filter = Filter { since_ms: Some(T0 + 60 * MIN), namespaces: BTreeSet::new() };
    let s = Summary::build(facts(), &filter, 3600);
    assert_eq!((s.runs.filed, s.runs.failed), (3, 2));
    assert_eq!(s.cleanup.decided, 2);
    assert_eq!(s.coverage.state_changes, 0);
    assert_eq!(s.filters.since.as_deref(), Some("2026-11-01T01:00:00.000Z"));
}

#[test]
fn the_summary_does_not_depend_on_the_order_keys_arrive_in() {
    let mut shuffled = facts();
    shuffled.runs.reverse();
    shuffled.decisions.reverse();
    shuffled.alerts.swap(0, 2);
    // Another key's record may come first; one key's records keep their order.
    shuffled.projections.swap(0, 1);
    assert_eq!(
        Summary::build(facts(), &Filter::default(), 3600),
        Summary::build(shuffled, &Filter::default(), 3600)
    );
}

#[test]
fn a_tombstone_removes_its_session() {
    let mut f = facts();
    f.projections.push(("s2".into(), None));
    let s = Summary::build(f, &Filter::default(), 3600);
    assert_eq!(s.sessions.sessions, 1);
    let retained: Vec<&str> = s.sessions.retained.iter().map(|r| r.session_id.as_str()).collect();
    assert_eq!(retained, ["s1"]);
    assert_eq!(s.sessions.by_retention_state.get(&RetentionState::Retained), Some(&1));
}

#[test]
fn json_names_every_section_with_readable_times_and_states() {
    let s = Summary::build(facts(), &Filter::default(), 3600);
    let json = serde_json::to_value(&s).unwrap();
    for key in ["filters", "runs", "cleanup", "coverage", "sessions"] {
        assert!(json[key].is_object(), "{key}: {json}");
    }
    assert_eq!(json["runs"]["failing"][0]["namespace"], "ml");
    assert_eq!(json["runs"]["every_run"][1]["result"], "FAILED");
    assert_eq!(json["cleanup"]["decisions"][0]["decided_at"], "2026-11-01T01:15:00.000Z");
    assert_eq!(json["coverage"]["entered"]["FIRING"], 1);
    assert_eq!(json["coverage"]["fired"][0]["name"], "nightly", "the subject is flattened: {json}");
    assert_eq!(json["sessions"]["by_retention_state"]["RETAINED"], 2);
}

#[tokio::test]
async fn replay_lines_read_back_as_the_facts_they_were() {
    // Encode a run and a decision, write them as `replay` does, read the lines back.
    let codec = Codec::new(None).unwrap();
    let r = failed(run("etl", "nightly", 70), "BackoffLimitExceeded", 1, 3);
    let d = decision("etl", "nightly-10", 75);
    let line = |value: &apache_avro::types::Value| {
        let v = kubefacts::codec::json::to_json(value, kubefacts::codec::json::Timestamps::Rfc3339);
        serde_json::json!({"partition": 1, "offset": 0, "key": "k", "value": v}).to_string()
    };
    let writer = |name: &str| kubefacts::codec::single_object_writer(&codec, name).unwrap();
    let run_bytes = writer(JobRun::FULL_NAME).encode(&r).unwrap();
    let decision_bytes = writer(CleanupDecision::FULL_NAME).encode(&d).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let topics = kubefacts::config::PipelineConfig::embedded_default().unwrap().topics;
    let write = |topic: FactTopic, lines: &[String]| {
        std::fs::write(dir.path().join(format!("{}.jsonl", topic.name(&topics))), lines.join("\n")).unwrap();
    };
    write(FactTopic::JobRunFacts, &[line(&codec.decode(&run_bytes).await.unwrap().value)]);
    write(
        FactTopic::CleanupDecisions,
        &[line(&codec.decode(&decision_bytes).await.unwrap().value), "{".into()],
    );
    let (facts, read) = super::source::from_dir(&codec, &topics, dir.path()).unwrap().into_facts();
    assert_eq!(facts.runs, [r]);
    assert_eq!(facts.decisions, [d]);
    assert_eq!(read.bad_total(), 1, "the broken line is counted, not dropped: {read:?}");
    assert_eq!(read.missing.len(), 4, "{read:?}");

    // The same bytes through the Kafka path give the same facts.
    let mut c = Collector::default();
    let name = "runs";
    c.add_bytes(&codec, FactTopic::JobRunFacts, name, (0, 0), Some(b"k"), Some(&run_bytes)).await;
    c.add_bytes(&codec, FactTopic::JobRunFacts, name, (0, 1), None, Some(b"\x00garbage")).await;
    let (from_bytes, read) = c.into_facts();
    assert_eq!(from_bytes.runs, facts.runs);
    assert_eq!(read.bad_total(), 1);
}

#[test]
fn since_takes_a_time_or_a_span_back_from_now() {
    assert_eq!(parse_since("2026-11-01T00:00:00Z").unwrap().as_millisecond(), T0);
    let six_hours_ago = parse_since("6h").unwrap();
    let age = jiff::Timestamp::now().as_millisecond() - six_hours_ago.as_millisecond();
    assert!((6 * 3_600_000..6 * 3_600_000 + 60_000).contains(&age), "{age}");
    assert!(parse_since("2d").is_ok());
    assert!(parse_since("yesterday").unwrap_err().contains("neither an RFC 3339 time nor a span"));
}
