//! `[runs]` state on a long-running cluster: 1 000 000 Jobs finishing over a simulated month
//! (≈ 23 a minute), default cleanup (1 h retention, a sweep every 5 min), driven through
//! one pure `[runs]` task with the cleaner's deletions fed back (each decided Job's DELETED
//! observation 30 s after its decision, as an applying `kubefacts cleaner` produces).
//!
//! Prints the live state (key + postcard value of the latest changelog record per key: what
//! a restore carries) at the end of every simulated week — flat when cleanup works — and,
//! side by side, the same cluster without deletions (a dry-run cleaner: tombstones stay) and
//! without cleanup (`job_retention_secs = 0`: state grows with every Job).
//!
//! `cargo bench --bench cleanup` (optionally `-- JOBS`); under `cargo test` a small instance
//! runs and checks that state stays bounded.

use std::{
    collections::{BTreeMap, HashMap, VecDeque},
    time::Instant,
};

use kubefacts::{
    cleanup::{CleanupConfig, CleanupDecision},
    codec::{Codec, Framing, RecordWriter},
    journal::{JobRun, Journal, JournalConfig, Runs, RunsConfig, glance::PodGlance, wiring::RunsInput},
    observe::model::{
        ConditionStatus, ContainerObservation, ContainerTermination, Job, JobCondition, JobObservation,
        JobSpec, JobStatus, ObjectMeta, ObservationEvent, OwnerReference, Pod, PodObservation, PodPhase,
        Source,
    },
    runtime::{Outputs, RecordMeta, Task},
};

const DAY_MS: i64 = 24 * 3_600_000;
const HEARTBEAT_MS: i64 = 10_000;
const CLEANER_DELAY_MS: i64 = 30_000;
/// 2026-11-01T00:00Z.
const T0: i64 = 1_793_491_200_000;

fn writer(codec: &Codec, name: &str) -> RecordWriter {
    let known = codec.schemas().current(name).unwrap();
    RecordWriter::new(known, Framing::SingleObject { fingerprint: known.fingerprint }).unwrap()
}

/// How the decided Jobs leave the cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cluster {
    /// An applying cleaner deletes each decided Job 30 s after its decision.
    Cleaned,
    /// A dry-run cleaner: decided Jobs stay in the cluster.
    DryRun,
    /// Cleanup off.
    Off,
}

/// One simulated run: live state bytes at each checkpoint, and the peak.
struct Outcome {
    weekly: Vec<(i64, usize, usize, usize)>,
    peak_bytes: usize,
    peak_tracked: usize,
    decisions: usize,
    runs: usize,
    observations: u64,
    seconds: f64,
}

fn uid(n: u64) -> String {
    format!("00000000-0000-4000-8000-{n:012}")
}

fn job(n: u64, created: i64, finished_at: Option<i64>) -> Job {
    let conditions = finished_at
        .map(|at| JobCondition {
            type_: "Complete".into(),
            status: ConditionStatus::True,
            reason: None,
            last_transition_time: Some(at),
        })
        .into_iter()
        .collect();
    Job {
        meta: ObjectMeta {
            namespace: format!("team-{}", n % 40),
            name: format!("etl-{}-{n}", n % 20_000),
            uid: uid(n),
            resource_version: None,
            creation_timestamp: Some(created),
            deletion_timestamp: None,
            labels: BTreeMap::new(),
            annotations: BTreeMap::new(),
        },
        owner_cronjob: Some(OwnerReference {
            kind: "CronJob".into(),
            name: format!("etl-{}", n % 20_000),
            uid: uid(10_000_000 + n % 20_000),
        }),
        spec: JobSpec {
            parallelism: Some(1),
            completions: Some(1),
            backoff_limit: Some(6),
            ..JobSpec::default()
        },
        status: JobStatus {
            start_time: Some(created),
            completion_time: finished_at,
            active: finished_at.is_none().then_some(1),
            succeeded: finished_at.map(|_| 1),
            conditions,
            ..JobStatus::default()
        },
    }
}

fn pod(n: u64, finished_at: i64) -> Pod {
    Pod {
        meta: ObjectMeta {
            namespace: format!("team-{}", n % 40),
            name: format!("etl-{}-{n}-x", n % 20_000),
            uid: uid(20_000_000 + n),
            resource_version: None,
            creation_timestamp: Some(finished_at - 60_000),
            deletion_timestamp: None,
            labels: BTreeMap::new(),
            annotations: BTreeMap::new(),
        },
        controller: Some(OwnerReference { kind: "Job".into(), name: format!("etl-{n}"), uid: uid(n) }),
        phase: PodPhase::Succeeded,
        containers: vec![ContainerObservation {
            name: "main".into(),
            restart_count: 0,
            requests_cpu: None,
            requests_memory: None,
            state: Some(ContainerTermination {
                exit_code: 0,
                reason: Some("Completed".into()),
                exit_signal: None,
                started_at: Some(finished_at - 55_000),
                finished_at: Some(finished_at),
                container_id: Some(format!("containerd://{n:064x}")),
            }),
            last_state: None,
        }],
        init_containers: Vec::new(),
    }
}

/// Events of the simulated cluster, ordered by time.
enum Event {
    Created(u64),
    Finished(u64),
    PodDone(u64),
    Deleted(u64),
    Heartbeat,
}

fn simulate(jobs: u64, days: i64, cluster: Cluster) -> Outcome {
    let codec = Codec::new(None).unwrap();
    let writers = vec![
        writer(&codec, JobRun::FULL_NAME),
        writer(&codec, JobRun::FULL_NAME),
        writer(&codec, CleanupDecision::FULL_NAME),
    ];
    let cleanup = CleanupConfig {
        job_retention_secs: if cluster == Cluster::Off { 0 } else { 3600 },
        ..CleanupConfig::default()
    };
    let mut task = Task::new(
        0,
        Runs::new(
            RunsConfig { cleanup, ..RunsConfig::default() },
            Journal::input_key(&JournalConfig::default()),
        ),
        Outputs::new(writers, vec![1, 1, 1]),
    );
    let source = Source { cluster: "c".into(), instance: "w".into(), epoch: 1 };
    let span = days * DAY_MS;
    let spacing = span / jobs as i64;
    // Each Job runs 1–10 minutes from its creation; its Pod's termination is observed just
    // after the Job's completion.
    let duration = |n: u64| 60_000 + (n.wrapping_mul(2_654_435_761) % 540_000) as i64;
    // Scheduled events beyond the next creation (finishes, deletions), by time.
    let mut pending: BTreeMap<(i64, u64, u8), Event> = BTreeMap::new();
    let mut live: HashMap<(usize, Vec<u8>), usize> = HashMap::new();
    let mut live_bytes = 0usize;
    let (mut peak_bytes, mut peak_tracked, mut decisions, mut runs, mut observations) = (0, 0, 0, 0, 0u64);
    let mut weekly = Vec::new();
    let mut next_job = 0u64;
    let mut next_heartbeat = T0;
    // Checkpoints: weekly over a month, daily over a few days.
    let every = if days >= 28 { 7 * DAY_MS } else { DAY_MS };
    let mut next_week = T0 + every;
    let mut offset = 0i64;
    let mut deletions: VecDeque<(i64, u64)> = VecDeque::new();
    let started = Instant::now();
    loop {
        let created_at = T0 + next_job as i64 * spacing;
        let (at, event) = {
            let first_pending = pending.keys().next().map(|k| k.0);
            let first_deletion = deletions.front().map(|d| d.0);
            let candidates = [
                (next_job < jobs).then_some((created_at, 0)),
                first_pending.map(|t| (t, 1)),
                first_deletion.map(|t| (t, 2)),
                // Heartbeats go on past the last creation: the last runs settle and are decided.
                (next_heartbeat <= T0 + span + 2 * 3_600_000).then_some((next_heartbeat, 3)),
            ];
            let Some((at, which)) = candidates.into_iter().flatten().min() else { break };
            match which {
                0 => {
                    next_job += 1;
                    (at, Event::Created(next_job - 1))
                }
                1 => pending.pop_first().map(|(_, e)| (at, e)).unwrap(),
                2 => (at, Event::Deleted(deletions.pop_front().unwrap().1)),
                _ => {
                    next_heartbeat += HEARTBEAT_MS;
                    (at, Event::Heartbeat)
                }
            }
        };
        if at >= next_week {
            weekly.push((
                (next_week - T0) / DAY_MS,
                live_bytes,
                task.processor().tracked_jobs(),
                task.processor().ended_jobs(),
            ));
            next_week += every;
        }
        let job_obs = |event, job| {
            RunsInput::Job(Box::new(JobObservation { source: source.clone(), observed_at: at, event, job }))
        };
        let input = match event {
            Event::Created(n) => {
                let done = at + duration(n);
                pending.insert((done, n, 0), Event::Finished(n));
                pending.insert((done + 200, n, 1), Event::PodDone(n));
                job_obs(ObservationEvent::Applied, Some(job(n, at, None)))
            }
            Event::Finished(n) => {
                job_obs(ObservationEvent::Applied, Some(job(n, at - duration(n), Some(at))))
            }
            Event::PodDone(n) => RunsInput::Pod(Box::new(PodGlance::of(&PodObservation {
                source: source.clone(),
                observed_at: at,
                event: ObservationEvent::Applied,
                pod: Some(pod(n, at - 200)),
            }))),
            Event::Deleted(n) => {
                let finished = at - CLEANER_DELAY_MS - 3_600_000;
                job_obs(ObservationEvent::Deleted, Some(job(n, finished - duration(n), Some(finished))))
            }
            Event::Heartbeat => job_obs(ObservationEvent::Heartbeat, None),
        };
        offset += 1;
        observations += 1;
        let input_index = usize::from(matches!(input, RunsInput::Pod(_)));
        let meta = RecordMeta {
            input: input_index,
            partition: 0,
            offset,
            timestamp_ms: at,
            writer: kubefacts::runtime::Writer::SOLE,
            key: None,
            traceparent: None,
        };
        task.process(input, &meta).unwrap();
        for out in task.take_outputs() {
            match out.port {
                0 => runs += 1,
                2 => {
                    decisions += 1;
                    if cluster == Cluster::Cleaned {
                        let n = String::from_utf8_lossy(&out.key)[24..].parse::<u64>().unwrap();
                        deletions.push_back((at + CLEANER_DELAY_MS, n));
                    }
                }
                _ => {}
            }
        }
        for (store, (key, value)) in task.take_changes() {
            let old = match value {
                Some(v) => {
                    live_bytes += key.len() + v.len();
                    live.insert((store, key.clone()), key.len() + v.len())
                }
                None => live.remove(&(store, key)),
            };
            live_bytes -= old.unwrap_or(0);
        }
        peak_bytes = peak_bytes.max(live_bytes);
        peak_tracked = peak_tracked.max(task.processor().tracked_jobs());
    }
    // After the last Job: everything decided and deleted.
    weekly.push((days, live_bytes, task.processor().tracked_jobs(), task.processor().ended_jobs()));
    Outcome {
        weekly,
        peak_bytes,
        peak_tracked,
        decisions,
        runs,
        observations,
        seconds: started.elapsed().as_secs_f64(),
    }
}

fn mib(bytes: usize) -> f64 {
    bytes as f64 / 1_048_576.0
}

fn main() {
    let benching = std::env::args().any(|a| a == "--bench");
    let jobs: u64 = std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(if benching {
        1_000_000
    } else {
        20_000
    });
    let days = if benching { 30 } else { 3 };
    println!(
        "cleanup bench: {jobs} Jobs finishing over {days} days, default cleanup (1 h retention, 5 min sweeps)\n"
    );

    let cleaned = simulate(jobs, days, Cluster::Cleaned);
    assert_eq!(cleaned.runs as u64, jobs, "every Job filed once");
    assert_eq!(cleaned.decisions as u64, jobs, "every Job decided once");
    println!(
        "with an applying cleaner    {:>10.0} observations/s through one task ({} observations, {:.1} s)",
        cleaned.observations as f64 / cleaned.seconds,
        cleaned.observations,
        cleaned.seconds
    );
    println!("  day   live state   tracked Jobs   tombstones   (last row: after the last Job, all drained)");
    for (day, bytes, tracked, ended) in &cleaned.weekly {
        println!("  {day:>3}   {:>7.2} MiB   {tracked:>12}   {ended:>10}", mib(*bytes));
    }
    println!(
        "  peak {:.2} MiB, {} tracked Jobs ({} decisions)\n",
        mib(cleaned.peak_bytes),
        cleaned.peak_tracked,
        cleaned.decisions
    );

    let dry = simulate(jobs, days, Cluster::DryRun);
    let (_, dry_bytes, _, dry_ended) = *dry.weekly.last().unwrap();
    println!(
        "with a dry-run cleaner      {:>7.2} MiB at the end: {} tombstones of Jobs still in the cluster, {:.0} B each",
        mib(dry_bytes),
        dry_ended,
        (dry_bytes as f64 - cleaned.weekly.last().unwrap().1 as f64) / dry_ended.max(1) as f64
    );
    // A decided Job still in the cluster costs its tombstone only, not its tracked state.
    let per_tombstone = (dry_bytes - cleaned.weekly.last().unwrap().1) / dry_ended.max(1);
    assert!(dry_ended as u64 == jobs && per_tombstone < 64, "{dry_ended} tombstones, {per_tombstone} B each");
    // Without cleanup every Job stays: a tenth of the span shows the slope.
    let off_jobs = jobs / 10;
    let off_days = (days / 10).max(1);
    let off = simulate(off_jobs, off_days, Cluster::Off);
    let (_, off_bytes, off_tracked, _) = *off.weekly.last().unwrap();
    println!(
        "with cleanup off            {:>7.2} MiB after {off_days} day(s) ({off_tracked} Jobs, {:.0} B each): {:.0} MiB after {days} days",
        mib(off_bytes),
        off_bytes as f64 / off_tracked.max(1) as f64,
        mib(off_bytes) * jobs as f64 / off_jobs as f64
    );

    // Bounded: no checkpoint holds more than the first (plus noise), far below no cleanup.
    let weeks: Vec<usize> = cleaned.weekly.iter().map(|w| w.1).collect();
    assert!(weeks.len() >= 3, "{weeks:?}");
    let first = weeks[0].max(1);
    assert!(weeks.iter().all(|&b| b <= first * 3 / 2), "state grows with cleanup on: {weeks:?}");
    assert!(
        cleaned.peak_bytes * 5 < off_bytes * jobs as usize / off_jobs as usize,
        "cleanup must bound state"
    );
}
