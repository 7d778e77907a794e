//! `[runs]` over real-shaped watch events, through the same path as `replay`: trace entry →
//! admission and minimization → Avro → in-memory topics → the driver.

use serde_json::{Value, json};

use super::{
    config::{JournalConfig, RunsConfig},
    model::{JobRun, JobRunWindowPart, JobRunWindowPartKey, OwnerKind, RunResult},
    runs::Runs,
    window::{Journal, JournalInputKey},
};
use crate::{
    codec::{Codec, Framing, RecordWriter},
    fixtures,
    observe::{InputTopic, MinimizeConfig, Observer, memory::MemInputs, model::Source},
    runtime::{
        OutputPort,
        driver::{self, MemTopic, OutputTopics},
    },
    trace,
};

const PARTITIONS: i32 = 2;
const T0: i64 = 1_795_946_400_000; // 2026-11-29T10:00:00Z

fn uid(n: u32) -> String {
    format!("0b000000-0000-4000-8000-{n:012}")
}

fn writer(codec: &Codec, name: &str) -> RecordWriter {
    let known = codec.schemas().current(name).unwrap();
    RecordWriter::new(known, Framing::SingleObject { fingerprint: known.fingerprint }).unwrap()
}

fn rfc(ms: i64) -> String {
    crate::codec::json::rfc3339_millis(ms).unwrap()
}

/// Watch events (each `(observed_at, type, object)`) through `[runs]`: the runs filed.
async fn runs_of(events: Vec<(i64, &str, Value)>) -> Vec<JobRun> {
    runs_with(events, RunsConfig::default()).await.0
}

/// What `[runs]` then `[journal]` made of some watch events.
struct Pipeline {
    runs: Vec<JobRun>,
    /// Every window emission (a summary, with the runs its pages give), in emission order
    /// per partition.
    windows: Vec<Emission>,
    /// Dead letters of the journal (reason codes).
    journal_dead_letters: Vec<String>,
    /// Events counted: `[runs]`'s, then `[journal]`'s.
    counts: (std::collections::BTreeMap<&'static str, u64>, std::collections::BTreeMap<&'static str, u64>),
}

/// One emission of a window: its summary, and the runs of pages 1..=its `pages`.
#[derive(Debug)]
struct Emission {
    window_start: i64,
    window_length_ms: i64,
    revision: i64,
    stream_time: i64,
    is_final: bool,
    runs: Vec<JobRun>,
}

/// The emissions the parts of `job-runs.v2` give, each rebuilt as a reader would have at it.
async fn emissions(codec: &Codec, records: &[&crate::runtime::driver::LogRecord]) -> Vec<Emission> {
    let mut parts = Vec::new();
    for rec in records {
        let part: JobRunWindowPart = codec.decode_as(rec.value.as_deref().unwrap()).await.unwrap();
        let k: JobRunWindowPartKey = codec.decode_as(rec.key.as_deref().unwrap()).await.unwrap();
        assert_eq!(k, part.key(), "keyed by its window and part");
        parts.push(part);
    }
    let pages: std::collections::HashMap<(i64, i32), &JobRunWindowPart> =
        parts.iter().filter(|p| p.part > 0).map(|p| ((p.window_start, p.part), p)).collect();
    parts
        .iter()
        .filter_map(|p| p.summary.as_ref().map(|s| (p, s)))
        .map(|(p, s)| {
            let mut reader = crate::journal::WindowReader::new();
            reader.add(p.clone());
            (1..=s.pages)
                .filter_map(|n| pages.get(&(p.window_start, n)))
                .for_each(|page| reader.add((*page).clone()));
            let rebuilt = reader.windows().pop().unwrap().expect("every page of an emission was written");
            Emission {
                window_start: p.window_start,
                window_length_ms: p.window_length_ms,
                revision: p.revision,
                stream_time: p.stream_time,
                is_final: s.is_final,
                runs: rebuilt.runs,
            }
        })
        .collect()
}

async fn journal_of(events: Vec<(i64, &str, Value)>, journal: JournalConfig) -> Pipeline {
    let (runs, _, repartition, runs_counts) =
        runs_full(events, RunsConfig::default(), Journal::input_key(&journal)).await;
    let codec = Codec::new(None).unwrap();
    let outputs = OutputTopics {
        writers: vec![writer(&codec, JobRunWindowPart::FULL_NAME)],
        topics: vec![MemTopic::new("job-runs", PARTITIONS)],
        key_writers: vec![Some(writer(&codec, JobRunWindowPartKey::FULL_NAME))],
        forward: Vec::new(),
    };
    let run =
        driver::run("journal", &codec, &[&repartition], outputs, |_| Journal::new(journal)).await.unwrap();
    let records: Vec<_> = run.outputs[0].partitions.iter().flatten().collect();
    let windows = emissions(&codec, &records).await;
    Pipeline {
        runs,
        windows,
        journal_dead_letters: run.dead_letters.iter().map(|d| d.reason.clone()).collect(),
        counts: (runs_counts, run.counts.clone()),
    }
}

async fn runs_with(events: Vec<(i64, &str, Value)>, cfg: RunsConfig) -> (Vec<JobRun>, usize) {
    let (runs, tracked, _, _) = runs_full(events, cfg, Journal::input_key(&JournalConfig::default())).await;
    (runs, tracked)
}

async fn runs_full(
    events: Vec<(i64, &str, Value)>,
    cfg: RunsConfig,
    journal_key: JournalInputKey,
) -> (Vec<JobRun>, usize, MemTopic, std::collections::BTreeMap<&'static str, u64>) {
    let codec = Codec::new(None).unwrap();
    let mut lines: Vec<Value> = vec![json!({"type": "ADDED", "observed_at": T0 - 1_000, "object":
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "etl"}}})];
    lines.extend(events.into_iter().map(|(at, ty, object)| match ty {
        "HEARTBEAT" => json!({"type": ty, "observed_at": at}),
        // A relist marker: `object` is its epoch.
        "SNAPSHOT_BEGIN" | "SNAPSHOT_END" => json!({"type": ty, "observed_at": at, "epoch": object}),
        _ => json!({"type": ty, "observed_at": at, "object": object}),
    }));
    let source = Source { cluster: "c".into(), instance: "w".into(), epoch: 1 };
    let mut observer = Observer::new(source, MinimizeConfig::default());
    let mut inputs = MemInputs::new(&codec, &Default::default(), PARTITIONS).unwrap();
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    for entry in trace::read(text.as_bytes()) {
        for released in observer.admit(entry.unwrap()) {
            for obs in released.unwrap() {
                inputs.push(&obs).unwrap();
            }
        }
    }
    let (jobs, pods) = (inputs.topic(InputTopic::Jobs), inputs.topic(InputTopic::Pods));
    let outputs = OutputTopics {
        writers: vec![
            writer(&codec, JobRun::FULL_NAME),
            writer(&codec, JobRun::FULL_NAME),
            writer(&codec, crate::cleanup::CleanupDecision::FULL_NAME),
        ],
        topics: vec![
            MemTopic::new("job-run-facts", PARTITIONS),
            MemTopic::new("journal-repartition", PARTITIONS),
            MemTopic::new("cleanup-decisions", PARTITIONS),
        ],
        key_writers: Vec::new(),
        forward: OutputPort::forwarding(&Runs::OUTPUTS),
    };
    let mut tracked = 0;
    let run = driver::run("runs", &codec, &[jobs, pods], outputs, |_| Runs::new(cfg.clone(), journal_key))
        .await
        .unwrap();
    assert!(run.dead_letters.is_empty(), "{:?}", run.dead_letters);
    let mut out = Vec::new();
    for rec in run.outputs[0].partitions.iter().flatten().filter(|r| !r.heartbeat) {
        let r: JobRun = codec.decode_as(rec.value.as_deref().unwrap()).await.unwrap();
        assert_eq!(rec.key.as_deref(), Some(r.owner.uid.as_bytes()), "keyed by the owner's UID");
        out.push(r);
    }
    for c in &run.changelogs {
        if c.name.ends_with("-jobs-changelog") {
            tracked = c.len();
        }
    }
    let counts = run.counts.clone();
    let repartition = run.outputs.into_iter().nth(1).unwrap();
    (out, tracked, repartition, counts)
}

fn job(n: u32, cronjob: Option<u32>, spec: Value, status: Value) -> Value {
    let mut spec = spec;
    spec["template"] =
        json!({"spec": {"restartPolicy": "Never", "containers": [fixtures::container("main", "x")]}});
    fixtures::job("etl", &format!("job-{n}"))
        .uid(&uid(n))
        .owners(cronjob.map(|c| fixtures::controller("CronJob", &format!("nightly-{c}"), &uid(c))))
        .spec(spec)
        .status(status)
        .value()
}

fn cronjob(n: u32) -> Value {
    fixtures::cronjob("etl", &format!("nightly-{n}"), "0 * * * *", json!([])).uid(&uid(n)).value()
}

fn condition(ty: &str, reason: &str, at: i64) -> Value {
    json!({"type": ty, "status": "True", "reason": reason, "lastTransitionTime": rfc(at), "message": "x"})
}

/// A Pod of Job `job` whose container `main` terminated with `code`/`reason` (and, when
/// `previous` is given, had terminated before with that code/reason: one restart).
fn pod(n: u32, job: u32, code: i32, reason: &str, previous: Option<(i32, &str)>) -> Value {
    let term = |code: i32, reason: &str, id: &str| {
        json!({"terminated": {"exitCode": code, "reason": reason, "containerID": id,
               "startedAt": rfc(T0), "finishedAt": rfc(T0 + 30_000)}})
    };
    let mut status = json!({"name": "main", "ready": false, "image": "x", "imageID": "",
        "restartCount": i32::from(previous.is_some()), "state": term(code, reason, &format!("containerd://{n}-b"))});
    if let Some((c, r)) = previous {
        status["lastState"] = term(c, r, &format!("containerd://{n}-a"));
    }
    fixtures::pod("etl", &format!("pod-{n}"))
        .uid(&uid(n))
        .owners([fixtures::controller("Job", &format!("job-{job}"), &uid(job))])
        .spec(json!({"containers": [fixtures::container("main", "x")]}))
        .status(
            json!({"phase": if code == 0 { "Succeeded" } else { "Failed" }, "containerStatuses": [status]}),
        )
        .value()
}

/// A watcher heartbeat: stream time reaches `ms` on every partition.
fn heartbeat_after(ms: i64) -> (i64, &'static str, Value) {
    (ms, "HEARTBEAT", Value::Null)
}

#[tokio::test]
async fn a_run_that_succeeded_after_two_failed_pods_shows_its_retries() {
    let runs = runs_of(vec![
        (T0 - 500, "ADDED", cronjob(100)),
        (T0, "ADDED", job(1, Some(100), json!({"completions": 1, "parallelism": 1, "backoffLimit": 6}), json!({"active": 1, "startTime": rfc(T0)}))),
        (T0 + 10_000, "MODIFIED", pod(11, 1, 1, "Error", None)),
        (T0 + 20_000, "MODIFIED", pod(12, 1, 1, "Error", None)),
        (T0 + 30_000, "MODIFIED", pod(13, 1, 0, "Completed", None)),
        (T0 + 31_000, "MODIFIED", job(1, Some(100), json!({"completions": 1, "parallelism": 1, "backoffLimit": 6}),
            json!({"startTime": rfc(T0), "completionTime": rfc(T0 + 31_000), "succeeded": 1, "failed": 2,
                   "conditions": [condition("SuccessCriteriaMet", "CompletionsReached", T0 + 31_000), condition("Complete", "CompletionsReached", T0 + 31_000)]}))),
        heartbeat_after(T0 + 60_000),
    ])
    .await;
    assert_eq!(runs.len(), 1, "{runs:?}");
    let r = &runs[0];
    assert_eq!((r.result, r.succeeded_pods, r.failed_pods), (RunResult::Succeeded, 1, 2));
    assert_eq!((r.started_at, r.finished_at), (Some(T0), T0 + 31_000));
    assert_eq!(
        (r.owner.kind, r.owner.uid.as_str(), r.owner.name.as_str()),
        (OwnerKind::Cronjob, uid(100).as_str(), "nightly-100")
    );
    assert_eq!((r.parallelism, r.completions, r.backoff_limit), (Some(1), Some(1), Some(6)));
    let exits: Vec<_> = r.exits.iter().map(|e| (e.exit_code, e.reason.as_deref(), e.count)).collect();
    assert_eq!(exits, [(0, Some("Completed"), 1), (1, Some("Error"), 2)]);
    assert_eq!(r.failure_reason, None);
}

#[tokio::test]
async fn a_backoff_limit_exceeded_run_is_failed_with_the_kubernetes_reason() {
    let failed = json!({"startTime": rfc(T0), "failed": 3, "conditions": [
        condition("FailureTarget", "BackoffLimitExceeded", T0 + 40_000),
        condition("Failed", "BackoffLimitExceeded", T0 + 41_000)]});
    let runs = runs_of(vec![
        (T0, "ADDED", job(2, None, json!({"backoffLimit": 2}), json!({"active": 1, "startTime": rfc(T0)}))),
        (T0 + 41_000, "MODIFIED", job(2, None, json!({"backoffLimit": 2}), failed)),
        heartbeat_after(T0 + 60_000),
    ])
    .await;
    assert_eq!(runs.len(), 1);
    let r = &runs[0];
    assert_eq!(
        (r.result, r.failure_reason.as_deref(), r.finished_at),
        (RunResult::Failed, Some("BackoffLimitExceeded"), T0 + 41_000)
    );
    assert_eq!((r.owner.kind, r.owner.uid.clone()), (OwnerKind::Job, uid(2)), "a bare Job owns its run");
}

#[tokio::test]
async fn a_failure_without_its_time_finishes_when_first_seen_finished_never_before_its_start() {
    // A Failed condition without lastTransitionTime: the creation time (before the start)
    // used to stand in. The first observation that showed it finished is the evidence.
    let timeless = |start: i64| {
        json!({"startTime": rfc(start), "failed": 1, "conditions": [
            {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "x"}]})
    };
    let runs = runs_of(vec![
        (T0, "ADDED", job(4, None, json!({}), json!({"active": 1, "startTime": rfc(T0)}))),
        (T0 + 41_000, "MODIFIED", job(4, None, json!({}), timeless(T0))),
        (T0 + 45_000, "MODIFIED", job(4, None, json!({}), timeless(T0))),
        // Seen finished at T0 + 42 s, yet its start says T0 + 50 s (a skewed clock): the run
        // ends no earlier than it began.
        (T0 + 42_000, "ADDED", job(5, None, json!({}), timeless(T0 + 50_000))),
        heartbeat_after(T0 + 60_000),
    ])
    .await;
    let by_uid = |n: u32| runs.iter().find(|r| r.run_uid == uid(n)).unwrap_or_else(|| panic!("{runs:?}"));
    assert_eq!((by_uid(4).result, by_uid(4).finished_at), (RunResult::Failed, T0 + 41_000));
    assert_eq!((by_uid(5).started_at, by_uid(5).finished_at), (Some(T0 + 50_000), T0 + 50_000));
}

#[tokio::test]
async fn a_job_that_failed_before_starting_has_no_started_at() {
    let failed = json!({"conditions": [condition("Failed", "DeadlineExceeded", T0 + 5_000)]});
    let runs = runs_of(vec![
        (T0 + 5_000, "ADDED", job(3, None, json!({"activeDeadlineSeconds": 5}), failed)),
        heartbeat_after(T0 + 60_000),
    ])
    .await;
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].started_at, None, "omitted, never the epoch");
    assert_eq!(runs[0].failure_reason.as_deref(), Some("DeadlineExceeded"));
}

#[tokio::test]
async fn a_running_job_and_failure_target_alone_are_not_runs() {
    let runs = runs_of(vec![
        (T0, "ADDED", job(4, None, json!({"completions": 9}), json!({"active": 3, "succeeded": 3, "startTime": rfc(T0)}))),
        (T0 + 1_000, "ADDED", job(5, None, json!({}), json!({"startTime": rfc(T0), "failed": 1,
            "conditions": [condition("FailureTarget", "BackoffLimitExceeded", T0 + 1_000)]}))),
        // Complete, but a terminated Pod is not counted yet: counters are not final.
        (T0 + 2_000, "ADDED", job(6, None, json!({}), json!({"startTime": rfc(T0), "uncountedTerminatedPods": {"succeeded": [uid(61)]},
            "conditions": [condition("SuccessCriteriaMet", "CompletionsReached", T0 + 2_000), condition("Complete", "CompletionsReached", T0 + 2_000)]}))),
        heartbeat_after(T0 + 60_000),
    ])
    .await;
    assert!(runs.is_empty(), "{runs:?}");
}

#[tokio::test]
async fn a_job_with_completions_9_of_which_3_succeeded_is_filed_as_it_ended() {
    let failed = json!({"startTime": rfc(T0), "succeeded": 3, "failed": 7, "conditions": [
        condition("Failed", "BackoffLimitExceeded", T0 + 50_000)]});
    let runs = runs_of(vec![
        (
            T0 + 50_000,
            "ADDED",
            job(7, None, json!({"completions": 9, "parallelism": 3, "backoffLimit": 6}), failed),
        ),
        heartbeat_after(T0 + 60_000),
    ])
    .await;
    let r = &runs[0];
    assert_eq!(
        (r.result, r.succeeded_pods, r.completions),
        (RunResult::Failed, 3, Some(9)),
        "clearly not complete"
    );
}

#[tokio::test]
async fn exits_137_oom_and_1_error_are_counted_once_each_however_often_observed() {
    let done = json!({"startTime": rfc(T0), "completionTime": rfc(T0 + 40_000), "succeeded": 1, "failed": 1,
        "conditions": [condition("Complete", "CompletionsReached", T0 + 40_000)]});
    let runs = runs_of(vec![
        (T0, "ADDED", job(8, None, json!({}), json!({"active": 1, "startTime": rfc(T0)}))),
        // One Pod OOM-killed after an earlier exit 1 (a restart), observed three times.
        (T0 + 30_000, "MODIFIED", pod(81, 8, 137, "OOMKilled", Some((1, "Error")))),
        (T0 + 31_000, "MODIFIED", pod(81, 8, 137, "OOMKilled", Some((1, "Error")))),
        (T0 + 32_000, "MODIFIED", pod(81, 8, 137, "OOMKilled", Some((1, "Error")))),
        (T0 + 35_000, "MODIFIED", pod(82, 8, 0, "Completed", None)),
        (T0 + 40_000, "MODIFIED", job(8, None, json!({}), done)),
        heartbeat_after(T0 + 60_000),
        // A Pod observed after the run was filed changes nothing.
        (T0 + 90_000, "MODIFIED", pod(83, 8, 2, "Error", None)),
        heartbeat_after(T0 + 120_000),
    ])
    .await;
    assert_eq!(runs.len(), 1);
    let exits: Vec<_> = runs[0].exits.iter().map(|e| (e.exit_code, e.reason.as_deref(), e.count)).collect();
    assert_eq!(exits, [(0, Some("Completed"), 1), (1, Some("Error"), 1), (137, Some("OOMKilled"), 1)]);
}

#[tokio::test]
async fn a_reobserved_run_is_not_filed_twice() {
    let done = json!({"startTime": rfc(T0), "completionTime": rfc(T0 + 10_000), "succeeded": 1,
        "conditions": [condition("Complete", "CompletionsReached", T0 + 10_000)]});
    let runs = runs_of(vec![
        (T0 + 10_000, "ADDED", job(9, None, json!({}), done.clone())),
        heartbeat_after(T0 + 30_000),
        (T0 + 40_000, "MODIFIED", job(9, None, json!({}), done.clone())),
        (T0 + 50_000, "MODIFIED", job(9, None, json!({}), done.clone())),
        heartbeat_after(T0 + 90_000),
        // Deleted later (TTL controller): still the one run.
        (T0 + 95_000, "DELETED", job(9, None, json!({}), done)),
        heartbeat_after(T0 + 120_000),
    ])
    .await;
    assert_eq!(runs.len(), 1, "{runs:?}");
}

#[tokio::test]
async fn a_finished_job_waits_settle_ms_of_stream_time_then_is_filed_in_a_quiet_period() {
    let done = json!({"startTime": rfc(T0), "completionTime": rfc(T0 + 10_000), "succeeded": 1,
        "conditions": [condition("Complete", "CompletionsReached", T0 + 10_000)]});
    let early = runs_of(vec![
        (T0 + 10_000, "ADDED", job(10, None, json!({}), done.clone())),
        heartbeat_after(T0 + 14_000),
    ])
    .await;
    assert!(early.is_empty(), "filed before settle_ms (5 s) of stream time passed");
    let later =
        runs_of(vec![(T0 + 10_000, "ADDED", job(10, None, json!({}), done)), heartbeat_after(T0 + 15_000)])
            .await;
    assert_eq!(later.len(), 1);
}

#[tokio::test]
async fn a_relist_forgets_the_jobs_it_did_not_list_and_keeps_those_it_did() {
    let running = |n| job(n, None, json!({}), json!({"active": 1, "startTime": rfc(T0)}));
    let runs = runs_of(vec![
        (T0, "ADDED", running(1)),
        (T0, "ADDED", running(2)),
        // Job 1 is listed again in epoch 2 (an observation of the relist's own epoch); job 2
        // is not: deleted while unobserved, so its completion later is not a new run.
        (T0 + 1_000, "SNAPSHOT_BEGIN", json!(2)),
        (T0 + 1_000, "ADDED", running(1)),
        (T0 + 2_000, "SNAPSHOT_END", json!(2)),
        (T0 + 60_000, "MODIFIED", done(1, T0 + 60_000)),
        (T0 + 60_000, "MODIFIED", done(2, T0 + 60_000)),
        heartbeat_after(T0 + 70_000),
    ])
    .await;
    let names: Vec<&str> = runs.iter().map(|r| r.run_name.as_str()).collect();
    assert_eq!(names, ["job-1"], "the re-listed Job is tracked; the unlisted one is ended");
}

fn done(n: u32, finished: i64) -> Value {
    let status = json!({"startTime": rfc(finished - 60_000), "completionTime": rfc(finished), "succeeded": 1,
        "conditions": [condition("Complete", "CompletionsReached", finished)]});
    job(n, None, json!({}), status)
}

const HOUR: i64 = 3_600_000;
const MIN: i64 = 60_000;

#[tokio::test]
async fn windows_supersede_and_finalize_on_stream_time_even_when_only_heartbeats_arrive() {
    let w0 = T0; // 10:00, a window start
    let p = journal_of(
        vec![
            (w0 + 5 * MIN, "ADDED", done(20, w0 + 5 * MIN)),
            heartbeat_after(w0 + 6 * MIN),
            (w0 + 20 * MIN, "ADDED", done(21, w0 + 20 * MIN)),
            // A quiet hour: heartbeats only. Grace (10 min) ends at 11:10.
            heartbeat_after(w0 + 30 * MIN),
            heartbeat_after(w0 + 65 * MIN),
            heartbeat_after(w0 + 71 * MIN),
            heartbeat_after(w0 + 90 * MIN),
        ],
        JournalConfig::default(),
    )
    .await;
    assert_eq!(p.runs.len(), 2);
    let revisions: Vec<(i64, bool, usize)> =
        p.windows.iter().map(|w| (w.revision, w.is_final, w.runs.len())).collect();
    assert_eq!(revisions, [(1, false, 1), (2, false, 2), (3, true, 2)], "supersede, then final once");
    let last = p.windows.last().unwrap();
    assert_eq!((last.window_start, last.window_length_ms), (w0, HOUR));
    assert!(last.stream_time >= w0 + 70 * MIN, "final only after end + grace, on stream time");
    let order: Vec<&str> = last.runs.iter().map(|r| r.run_name.as_str()).collect();
    assert_eq!(order, ["job-20", "job-21"], "sorted by finished_at");
}

#[tokio::test]
async fn every_run_of_a_window_meets_in_one_journal_task() {
    // Eight Jobs (eight UIDs, spread over the partitions of `[runs]`) finish in one window:
    // `journal_repartition` is keyed as the journal asks, so one task holds the window and
    // writes every revision of it; keyed otherwise, each task writes a window of its share.
    let w0 = T0;
    let mut events: Vec<_> = (50..58)
        .map(|n| (w0 + (n as i64 - 45) * MIN, "ADDED", done(n, w0 + (n as i64 - 45) * MIN)))
        .collect();
    events.push(heartbeat_after(w0 + 90 * MIN));
    let p = journal_of(events, JournalConfig::default()).await;
    assert_eq!(p.runs.len(), 8);
    let revisions: Vec<i64> = p.windows.iter().map(|w| w.revision).collect();
    assert!(revisions.windows(2).all(|r| r[0] < r[1]), "one writer, revisions rising: {revisions:?}");
    let last = p.windows.last().unwrap();
    assert!(last.is_final);
    assert_eq!(last.runs.len(), 8, "the final window holds every run filed in it");
}

#[tokio::test]
async fn a_late_run_reopens_its_final_window_with_a_higher_revision() {
    let w0 = T0;
    let p = journal_of(
        vec![
            (w0 + 5 * MIN, "ADDED", done(30, w0 + 5 * MIN)),
            heartbeat_after(w0 + 75 * MIN), // final
            // A run that finished at 10:40, first seen at 12:00 (a relist after an outage).
            (w0 + 120 * MIN, "ADDED", done(31, w0 + 40 * MIN)),
            heartbeat_after(w0 + 121 * MIN),
        ],
        JournalConfig::default(),
    )
    .await;
    let w: Vec<(i64, i64, bool, usize)> =
        p.windows.iter().map(|w| (w.window_start, w.revision, w.is_final, w.runs.len())).collect();
    assert_eq!(w, [(w0, 1, true, 1), (w0, 2, true, 2)], "re-opened, still final, revision 2");
    let journal = &p.counts.1;
    assert_eq!((journal["runs_filed"], journal["runs_late"], journal["windows_finalized"]), (2, 1, 1));
    // Job and Pod observations are counted apart.
    assert_eq!(p.counts.0["job_observations"], 2);
    assert!(!p.counts.0.contains_key("pod_observations"), "no Pods in this trace");
}

#[tokio::test]
async fn a_three_hour_old_run_found_by_a_relist_goes_to_its_own_window() {
    let w0 = T0;
    let p = journal_of(
        vec![
            heartbeat_after(w0 + 180 * MIN),
            (w0 + 181 * MIN, "ADDED", done(40, w0 + 5 * MIN)),
            heartbeat_after(w0 + 182 * MIN),
        ],
        JournalConfig::default(),
    )
    .await;
    let starts: Vec<i64> = p.windows.iter().map(|w| w.window_start).collect();
    assert_eq!(starts, [w0], "filed where it finished, not in the current window");
}

#[tokio::test]
async fn a_run_beyond_retention_is_dead_lettered_not_filed() {
    let w0 = T0;
    let cfg = JournalConfig { retention_ms: 24 * HOUR, ..JournalConfig::default() };
    let p = journal_of(
        vec![
            heartbeat_after(w0 + 30 * HOUR),
            (w0 + 30 * HOUR + MIN, "ADDED", done(50, w0 + 5 * MIN)),
            heartbeat_after(w0 + 30 * HOUR + 2 * MIN),
        ],
        cfg,
    )
    .await;
    assert_eq!(p.runs.len(), 1, "[runs] files it");
    assert!(p.windows.is_empty(), "{:?}", p.windows);
    assert_eq!(p.journal_dead_letters, ["beyond_retention"]);
}

#[tokio::test]
async fn the_same_run_twice_changes_no_window() {
    let codec = Codec::new(None).unwrap();
    let (_, _, mut repartition, _) = runs_full(
        vec![(T0 + 5 * MIN, "ADDED", done(60, T0 + 5 * MIN)), heartbeat_after(T0 + 6 * MIN)],
        RunsConfig::default(),
        Journal::input_key(&JournalConfig::default()),
    )
    .await;
    // Replay the repartition log once more (a reprocessing after an abort, say).
    for p in repartition.partitions.iter_mut() {
        let again = p.clone();
        p.extend(again);
        // Then stream time moves well past the emission interval.
        p.push(crate::runtime::driver::LogRecord {
            key: Some(b"kubefacts.heartbeat".to_vec()),
            value: None,
            timestamp_ms: T0 + 20 * MIN,
            heartbeat: true,
            beat: false,
            writer: crate::runtime::Writer::SOLE,
        });
    }
    let outputs = OutputTopics {
        writers: vec![writer(&codec, JobRunWindowPart::FULL_NAME)],
        topics: vec![MemTopic::new("job-runs", PARTITIONS)],
        key_writers: vec![Some(writer(&codec, JobRunWindowPartKey::FULL_NAME))],
        forward: Vec::new(),
    };
    let run =
        driver::run("journal", &codec, &[&repartition], outputs, |_| Journal::new(JournalConfig::default()))
            .await
            .unwrap();
    assert_eq!(run.outputs[0].len(), 2, "one emission (a page and a summary): the duplicate changed nothing");
}

/// The five scenarios as golden files: the trace in (`<name>.trace.jsonl`) and
/// every run out (`<name>.runs.json`: decoded JSON and the exact single-object bytes).
/// `UPDATE_GOLDEN=1 cargo test --lib journal::tests::golden` rewrites them.
#[tokio::test]
async fn golden_runs_match_their_files() {
    let succeeded_after_two_failures = vec![
        (T0 - 500, "ADDED", cronjob(100)),
        (
            T0,
            "ADDED",
            job(
                1,
                Some(100),
                json!({"completions": 1, "backoffLimit": 6}),
                json!({"active": 1, "startTime": rfc(T0)}),
            ),
        ),
        (T0 + 10_000, "MODIFIED", pod(11, 1, 1, "Error", None)),
        (T0 + 20_000, "MODIFIED", pod(12, 1, 1, "Error", None)),
        (T0 + 30_000, "MODIFIED", pod(13, 1, 0, "Completed", None)),
        (
            T0 + 31_000,
            "MODIFIED",
            job(
                1,
                Some(100),
                json!({"completions": 1, "backoffLimit": 6}),
                json!({"startTime": rfc(T0), "completionTime": rfc(T0 + 31_000), "succeeded": 1, "failed": 2,
                   "conditions": [condition("Complete", "CompletionsReached", T0 + 31_000)]}),
            ),
        ),
        heartbeat_after(T0 + 60_000),
    ];
    let backoff_limit_exceeded = vec![
        (T0, "ADDED", job(2, None, json!({"backoffLimit": 2}), json!({"active": 1, "startTime": rfc(T0)}))),
        (
            T0 + 41_000,
            "MODIFIED",
            job(
                2,
                None,
                json!({"backoffLimit": 2}),
                json!({"startTime": rfc(T0), "failed": 3,
            "conditions": [condition("Failed", "BackoffLimitExceeded", T0 + 41_000)]}),
            ),
        ),
        heartbeat_after(T0 + 60_000),
    ];
    let failed_before_starting = vec![
        (
            T0 + 5_000,
            "ADDED",
            job(
                3,
                None,
                json!({"activeDeadlineSeconds": 5}),
                json!({"conditions": [condition("Failed", "DeadlineExceeded", T0 + 5_000)]}),
            ),
        ),
        heartbeat_after(T0 + 60_000),
    ];
    let completions_9_of_which_3 = vec![
        (
            T0 + 50_000,
            "ADDED",
            job(
                7,
                None,
                json!({"completions": 9, "parallelism": 3, "backoffLimit": 6}),
                json!({"startTime": rfc(T0), "succeeded": 3, "failed": 7, "conditions": [condition("Failed", "BackoffLimitExceeded", T0 + 50_000)]}),
            ),
        ),
        heartbeat_after(T0 + 60_000),
    ];
    let oom_and_error = vec![
        (T0, "ADDED", job(8, None, json!({}), json!({"active": 1, "startTime": rfc(T0)}))),
        (T0 + 30_000, "MODIFIED", pod(81, 8, 137, "OOMKilled", Some((1, "Error")))),
        (T0 + 35_000, "MODIFIED", pod(82, 8, 0, "Completed", None)),
        (
            T0 + 40_000,
            "MODIFIED",
            job(
                8,
                None,
                json!({}),
                json!({"startTime": rfc(T0), "completionTime": rfc(T0 + 40_000),
            "succeeded": 1, "failed": 1, "conditions": [condition("Complete", "CompletionsReached", T0 + 40_000)]}),
            ),
        ),
        heartbeat_after(T0 + 60_000),
    ];
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/journal");
    let update = std::env::var_os("UPDATE_GOLDEN").is_some();
    let codec = Codec::new(None).unwrap();
    let w = writer(&codec, JobRun::FULL_NAME);
    for (name, events) in [
        ("succeeded-after-two-failed-pods", succeeded_after_two_failures),
        ("backoff-limit-exceeded", backoff_limit_exceeded),
        ("bare-job-failed-before-starting", failed_before_starting),
        ("completions-9-of-which-3-succeeded", completions_9_of_which_3),
        ("exits-137-oomkilled-and-1-error", oom_and_error),
    ] {
        let trace: String = events
            .iter()
            .map(|(at, ty, object)| match *ty {
                "HEARTBEAT" => format!("{}\n", json!({"type": ty, "observed_at": rfc(*at)})),
                _ => format!("{}\n", json!({"type": ty, "observed_at": rfc(*at), "object": object})),
            })
            .collect();
        let runs = runs_of(events).await;
        let out: Vec<Value> = runs
            .iter()
            .map(|r| {
                let bytes = w.encode(r).unwrap();
                json!({"run": serde_json::to_value(r).unwrap(),
                       "bytes": bytes.iter().map(|b| format!("{b:02x}")).collect::<String>()})
            })
            .collect();
        let expected = serde_json::to_string_pretty(&out).unwrap() + "\n";
        let (trace_path, runs_path) =
            (dir.join(format!("{name}.trace.jsonl")), dir.join(format!("{name}.runs.json")));
        if update {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(&trace_path, &trace).unwrap();
            std::fs::write(&runs_path, &expected).unwrap();
            continue;
        }
        let read = |p: &std::path::Path| {
            std::fs::read_to_string(p)
                .unwrap_or_else(|e| panic!("{}: {e} (UPDATE_GOLDEN=1 writes it)", p.display()))
        };
        assert_eq!(read(&trace_path), trace, "{name}: the scenario changed");
        assert_eq!(read(&runs_path), expected, "{name}: runs or their bytes changed");
        assert_eq!(out.len(), 1, "{name}: one run");
    }
}
