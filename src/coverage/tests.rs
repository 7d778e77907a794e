//! `[coverage]`: the Lease instance log, the verdict, and the state machine.

use std::collections::BTreeMap;

use super::{
    Coverage, CoverageAlert, CoverageConfig, CoverageInput, CoverageRule, CoverageState, Facts, SubjectSpec,
    judge, lease::LeaseBook, schedule::Schedule,
};
use crate::{
    codec::{Codec, Framing, RecordWriter},
    journal::model::{JobRun, OwnerKind, RunOwner, RunResult},
    observe::{
        CronJobObservation, LeaseObservation, ObservationEvent, Source,
        model::{CronJob, CronJobStatus, Lease, ObjectMeta},
    },
    runtime::{Outputs, Processor, RecordMeta},
};

const S: i64 = 1000;
const MIN: i64 = 60 * S;
const H: i64 = 60 * MIN;
/// 2026-11-02T00:00:00Z.
const T0: i64 = 1_793_577_600_000;
const KCM: &str = "kube-system/kube-controller-manager";

fn meta(namespace: &str, name: &str, uid: &str) -> ObjectMeta {
    ObjectMeta {
        namespace: namespace.into(),
        name: name.into(),
        uid: uid.into(),
        resource_version: None,
        creation_timestamp: Some(T0 - 30 * 24 * H),
        deletion_timestamp: None,
        labels: BTreeMap::new(),
        annotations: BTreeMap::new(),
    }
}

fn lease(holder: &str, acquire: i64, renew: i64, duration_s: i32) -> Lease {
    Lease {
        meta: meta("kube-system", "kube-controller-manager", "1e000000-0000-4000-8000-000000000001"),
        holder_identity: Some(holder.into()),
        lease_duration_seconds: Some(duration_s),
        acquire_time: Some(acquire),
        renew_time: Some(renew),
        lease_transitions: Some(0),
    }
}

fn book() -> LeaseBook {
    LeaseBook::new("i", "o", 35 * S)
}

/// `holder` acquires at `from` and renews every 2 s (15 s leases) up to `to`, observed.
fn hold(book: &mut LeaseBook, holder: &str, from: i64, to: i64) {
    let mut t = from;
    while t <= to {
        book.observed_at(t);
        book.record(KCM, &lease(holder, from, t, 15)).unwrap();
        t += 2 * S;
    }
}

/// Heartbeats of the leases topic every 10 s over `[from, to]`.
fn heartbeats(book: &mut LeaseBook, from: i64, to: i64) {
    let mut t = from;
    while t <= to {
        book.observed_at(t);
        t += 10 * S;
    }
}

#[test]
fn touching_intervals_merge_and_a_millisecond_gap_breaks() {
    let mut b = book();
    b.record(KCM, &lease("a", T0, T0, 10)).unwrap(); // [T0, T0+10s]
    b.record(KCM, &lease("b", T0 + 10 * S, T0 + 10 * S, 10)).unwrap(); // touches
    assert!(b.gaps(KCM, T0, T0 + 20 * S).is_empty(), "{:?}", b.gaps(KCM, T0, T0 + 20 * S));
    b.record(KCM, &lease("c", T0 + 20 * S + 1, T0 + 20 * S + 1, 10)).unwrap(); // 1 ms late
    let gaps = b.gaps(KCM, T0, T0 + 30 * S);
    assert_eq!(gaps.len(), 1, "{gaps:?}");
    assert_eq!((gaps[0].gap.started_at, gaps[0].gap.ended_at), (T0 + 20 * S, T0 + 20 * S + 1));
}

#[test]
fn renewals_of_one_tenure_are_one_instance() {
    let mut b = book();
    hold(&mut b, "a", T0, T0 + H);
    assert_eq!(b.instances(KCM).count(), 1, "1 800 renewals, one tenure");
    assert_eq!(b.covered_until(KCM), Some(T0 + H + 15 * S));
    // A relist repeats the current snapshot: stale, nothing changes.
    assert_eq!(b.record(KCM, &lease("a", T0, T0 + H, 15)), Err(super::lease::Ignored::Stale));
}

#[test]
fn a_replaced_holder_keeps_coverage() {
    let mut b = book();
    hold(&mut b, "a", T0, T0 + 20 * S);
    // b takes over 10 s after a's last renewal, inside a's 15 s lease.
    hold(&mut b, "b", T0 + 30 * S, T0 + 60 * S);
    assert!(b.gaps(KCM, T0, T0 + 60 * S).is_empty());
    assert_eq!(b.instances(KCM).count(), 2);
}

#[test]
fn a_graceful_release_counts_to_the_last_expiry() {
    let mut b = book();
    hold(&mut b, "a", T0, T0 + 20 * S);
    // client-go on cancel: empty holder, 1 s, acquire = renew = now.
    let release = Lease { holder_identity: Some(String::new()), ..lease("", T0 + 21 * S, T0 + 21 * S, 1) };
    b.record(KCM, &release).unwrap();
    // a's last recorded expiry (20 s + 15 s) still counts: the release does not shorten it.
    assert_eq!(b.covered_until(KCM), Some(T0 + 35 * S));
    assert!(b.covered_at(KCM, T0 + 34 * S));
    hold(&mut b, "b", T0 + 35 * S, T0 + 60 * S);
    assert!(b.gaps(KCM, T0, T0 + 60 * S).is_empty());
}

#[test]
fn a_crash_without_release_counts_to_the_last_expiry() {
    let mut b = book();
    hold(&mut b, "a", T0, T0 + 20 * S);
    heartbeats(&mut b, T0 + 20 * S, T0 + 60 * S);
    assert!(b.covered_at(KCM, T0 + 35 * S));
    assert!(!b.covered_at(KCM, T0 + 35 * S + 1));
    let gaps = b.gaps(KCM, T0, T0 + 60 * S);
    assert_eq!(gaps.len(), 1);
    assert_eq!((gaps[0].gap.started_at, gaps[0].gap.ended_at), (T0 + 35 * S, T0 + 60 * S));
    assert!(gaps[0].observed, "heartbeats show the topic was read throughout: a stop");
}

#[test]
fn a_gap_the_watcher_did_not_see_is_not_a_stop() {
    let mut b = book();
    hold(&mut b, "a", T0, T0 + 20 * S);
    // The watcher is down for 10 minutes: no records at all, then a relist.
    hold(&mut b, "a", T0 + 10 * MIN, T0 + 11 * MIN);
    let gaps = b.gaps(KCM, T0, T0 + 11 * MIN);
    assert_eq!(gaps.len(), 1);
    assert!(!gaps[0].observed);
}

#[test]
fn retention_keeps_an_interval_crossing_the_window_start() {
    let mut b = book();
    hold(&mut b, "a", T0, T0 + H); // ends at T0+1h+15s
    hold(&mut b, "b", T0 + 2 * H, T0 + 3 * H); // after a gap
    hold(&mut b, "c", T0 + 4 * H, T0 + 5 * H);
    // Window starting inside b's tenure: a ended before it (pruned), b crosses it (kept).
    b.prune(T0 + 2 * H + 30 * MIN);
    let holders: Vec<&str> = b.instances(KCM).map(|i| i.holder.as_str()).collect();
    assert_eq!(holders, ["b", "c"]);
    // A window after everything keeps the latest instance: covered_until stays known.
    b.prune(T0 + 100 * H);
    assert_eq!(b.covered_until(KCM), Some(T0 + 5 * H + 15 * S));
}

fn spec(schedule: &str) -> SubjectSpec {
    SubjectSpec {
        namespace: "batch".into(),
        name: "report".into(),
        schedule: schedule.into(),
        time_zone: None,
        suspend: false,
        starting_deadline_seconds: None,
        created_ms: Some(T0 - 30 * 24 * H),
        expected_interval: None,
        last_successful_ms: None,
    }
}

fn verdict(spec: &SubjectSpec, last_run: i64, book: &LeaseBook, now: i64) -> super::Verdict {
    let schedule = Schedule::parse(&spec.schedule, spec.time_zone.as_deref()).unwrap();
    let facts = Facts {
        spec,
        last_run_ms: Some(last_run),
        recent_run_ms: &[],
        resumed_at: None,
        schedule: Some(&schedule),
        interval_ms: None,
    };
    judge(&facts, &CoverageRule::default(), book, now)
}

#[test]
fn overdue_while_covered_goes_pending_then_firing() {
    let mut b = book();
    hold(&mut b, "a", T0, T0 + 3 * H);
    let s = spec("@hourly");
    // Last run at 00:01: due at 01:00 + 10 min slack.
    let v = verdict(&s, T0 + MIN, &b, T0 + 70 * MIN - 1);
    assert_eq!((v.state, v.expected_by), (CoverageState::Ok, Some(T0 + 70 * MIN)));
    let v = verdict(&s, T0 + MIN, &b, T0 + 80 * MIN);
    assert_eq!((v.state, v.pending_since), (CoverageState::Pending, Some(T0 + 70 * MIN)));
    let v = verdict(&s, T0 + MIN, &b, T0 + 85 * MIN);
    assert_eq!(v.state, CoverageState::Firing, "15 min pending");
}

#[test]
fn an_overnight_gap_resets_pending() {
    let mut b = book();
    hold(&mut b, "a", T0, T0 + 2 * H);
    heartbeats(&mut b, T0 + 2 * H, T0 + 10 * H);
    hold(&mut b, "b", T0 + 10 * H, T0 + 12 * H);
    let s = spec("@hourly");
    // During the outage: overdue since 01:10, but the manager is down.
    let v = verdict(&s, T0 + MIN, &b, T0 + 5 * H);
    assert_eq!(v.state, CoverageState::ManagerStopped);
    // Back at 10:00: the latest missed run (10:00) starts at once, so pending accrues from
    // 10:00 + slack, not from 01:10 — the night earns nothing.
    let v = verdict(&s, T0 + MIN, &b, T0 + 10 * H + 5 * MIN);
    assert_eq!(v.state, CoverageState::ManagerStopped, "still in the restart grace");
    let v = verdict(&s, T0 + MIN, &b, T0 + 10 * H + 20 * MIN);
    assert_eq!((v.state, v.pending_since), (CoverageState::Pending, Some(T0 + 10 * H + 10 * MIN)));
    assert_eq!(v.gaps.len(), 1, "{:?}", v.gaps);
    let v = verdict(&s, T0 + MIN, &b, T0 + 10 * H + 25 * MIN);
    assert_eq!(v.state, CoverageState::Firing, "after recovery it behaves");
}

#[test]
fn a_missed_run_beyond_its_starting_deadline_waits_for_the_next_fire() {
    let mut b = book();
    hold(&mut b, "a", T0, T0 + 2 * H);
    heartbeats(&mut b, T0 + 2 * H, T0 + 10 * H + 30 * MIN);
    hold(&mut b, "b", T0 + 10 * H + 30 * MIN, T0 + 12 * H);
    let s = SubjectSpec { starting_deadline_seconds: Some(200), ..spec("@hourly") };
    // Back at 10:30, the 10:00 run is 30 min late, past its 200 s deadline: the next
    // chance is 11:00, due by 11:10.
    let v = verdict(&s, T0 + MIN, &b, T0 + 11 * H);
    assert_eq!(v.state, CoverageState::ManagerStopped);
    let v = verdict(&s, T0 + MIN, &b, T0 + 11 * H + 11 * MIN);
    assert_eq!((v.state, v.pending_since), (CoverageState::Pending, Some(T0 + 11 * H + 10 * MIN)));
}

#[test]
fn a_gap_over_the_fire_time_excuses_the_missed_run_until_the_next_fire() {
    let mut b = book();
    hold(&mut b, "a", T0, T0 + 59 * MIN);
    // Down 00:59–01:05 over the 01:00 fire time, back before 01:10 (expected by); the 01:00
    // run is past its 60 s deadline, so the next chance is 02:00, done by 02:10.
    heartbeats(&mut b, T0 + 59 * MIN, T0 + 65 * MIN);
    hold(&mut b, "b", T0 + 65 * MIN, T0 + 3 * H);
    let s = SubjectSpec { starting_deadline_seconds: Some(60), ..spec("@hourly") };
    let v = verdict(&s, T0 + MIN, &b, T0 + 90 * MIN);
    assert_eq!(v.state, CoverageState::ManagerStopped, "overdue, excused by the gap at 01:00");
    assert_eq!(v.recheck_at, Some(T0 + 2 * H + 10 * MIN));
    let v = verdict(&s, T0 + MIN, &b, T0 + 2 * H + 11 * MIN);
    assert_eq!((v.state, v.pending_since), (CoverageState::Pending, Some(T0 + 2 * H + 10 * MIN)));
}

#[test]
fn a_short_restart_inside_the_last_lease_keeps_pending() {
    let mut b = book();
    hold(&mut b, "a", T0, T0 + 80 * MIN);
    // A new manager process takes over 10 s after the last renewal: no gap.
    hold(&mut b, "b", T0 + 80 * MIN + 10 * S, T0 + 2 * H);
    let v = verdict(&spec("@hourly"), T0 + MIN, &b, T0 + 90 * MIN);
    assert_eq!((v.state, v.pending_since), (CoverageState::Firing, Some(T0 + 70 * MIN)));
    assert!(v.gaps.is_empty());
}

#[test]
fn missing_history_is_insufficient_evidence() {
    let empty = book();
    let s = spec("@hourly");
    let v = verdict(&s, T0 + MIN, &empty, T0 + 5 * H);
    assert_eq!(v.state, CoverageState::InsufficientEvidence, "no manager lease ever observed");
    let v = verdict(&s, T0 + MIN, &empty, T0 + 30 * MIN);
    assert_eq!(v.state, CoverageState::Ok, "not due yet: progress is its own evidence");
    // History starting after the subject became overdue (just after start): the span before
    // it is unknown, so no pending time accrues for it.
    let mut b = book();
    hold(&mut b, "a", T0 + 3 * H, T0 + 4 * H);
    let v = verdict(&s, T0 + MIN, &b, T0 + 3 * H + MIN);
    assert_eq!(v.state, CoverageState::InsufficientEvidence);
    let v = verdict(&s, T0 + MIN, &b, T0 + 3 * H + 30 * MIN);
    assert_eq!(v.state, CoverageState::Firing, "then covered long enough: it fires");
}

#[test]
fn progress_sources_and_the_override_annotation() {
    let mut b = book();
    hold(&mut b, "a", T0, T0 + 6 * H);
    let s = SubjectSpec { last_successful_ms: Some(T0 + 2 * H), ..spec("@hourly") };
    let facts = Facts {
        spec: &s,
        last_run_ms: Some(T0 + MIN),
        recent_run_ms: &[20 * MIN],
        resumed_at: None,
        schedule: None,
        interval_ms: Some(3 * H),
    };
    let v = judge(&facts, &CoverageRule::default(), &b, T0 + 4 * H);
    assert_eq!(v.last_progress, Some((T0 + 2 * H, super::ProgressSource::LastSuccessfulTime)));
    assert_eq!((v.state, v.expected_by), (CoverageState::Ok, Some(T0 + 5 * H)));
    // Slow runs widen the slack: 2 × 20 min beats the 10 min default.
    let schedule = Schedule::parse("@hourly", None).unwrap();
    let facts =
        Facts { schedule: Some(&schedule), interval_ms: None, last_run_ms: Some(T0 + 3 * H), ..facts };
    assert_eq!(
        judge(&facts, &CoverageRule::default(), &b, T0 + 3 * H).expected_by,
        Some(T0 + 4 * H + 40 * MIN)
    );
}

// The processor: records in, state changes out.

fn writer(codec: &Codec) -> RecordWriter {
    let known = codec.schemas().current(CoverageAlert::FULL_NAME).unwrap();
    RecordWriter::new(known, Framing::SingleObject { fingerprint: known.fingerprint }).unwrap()
}

struct Harness {
    codec: Codec,
    p: Coverage,
    out: Outputs,
    now: i64,
    /// (key, state) of every record emitted; `None`: a tombstone.
    emitted: Vec<(String, Option<CoverageAlert>)>,
    /// Whether fed records carry a trace context (`<input>@<time>`).
    traced: bool,
    /// The links of every record emitted.
    links: Vec<Vec<String>>,
}

const UID: &str = "c0000000-0000-4000-8000-000000000001";

impl Harness {
    fn new(cfg: CoverageConfig) -> Self {
        let codec = Codec::new(None).unwrap();
        let out = Outputs::new(vec![writer(&codec)], vec![1]);
        Self {
            codec,
            p: Coverage::new(cfg),
            out,
            now: T0,
            emitted: Vec::new(),
            traced: false,
            links: Vec::new(),
        }
    }

    fn feed(&mut self, at: i64, input: CoverageInput) {
        let kind = match &input {
            CoverageInput::Run(_) => "run",
            CoverageInput::CronJob(_) => "cronjob",
            CoverageInput::Lease(_) => "lease",
        };
        let traceparent = self.traced.then(|| format!("{kind}@{at}"));
        let meta = RecordMeta {
            input: 0,
            partition: 0,
            offset: 0,
            timestamp_ms: at,
            writer: crate::runtime::Writer::SOLE,
            key: None,
            traceparent,
        };
        let advanced = at > self.now;
        self.now = self.now.max(at);
        self.out.set_now(self.now);
        self.p.process(input, &meta, self.now, &mut self.out).unwrap();
        if advanced {
            self.p.on_stream_time(self.now, &mut self.out);
        }
        for r in self.out.take() {
            self.links.push(r.links);
            let key = String::from_utf8(r.key).unwrap();
            let value = r.value.map(|v| futures::executor::block_on(self.codec.decode_as(&v)).unwrap());
            self.emitted.push((key, value));
        }
    }

    fn cronjob(&mut self, at: i64, event: ObservationEvent, schedule: &str, suspend: bool, epoch: i64) {
        let cj = CronJob {
            meta: meta("batch", "report", UID),
            schedule: schedule.into(),
            time_zone: None,
            suspend,
            starting_deadline_seconds: None,
            concurrency_policy: None,
            status: CronJobStatus { last_schedule_time: None, last_successful_time: None, active_count: 0 },
        };
        let obs = CronJobObservation { source: source(epoch), observed_at: at, event, cronjob: Some(cj) };
        self.feed(at, CoverageInput::CronJob(Box::new(obs)));
    }

    fn marker(&mut self, at: i64, event: ObservationEvent, epoch: i64) {
        let obs = CronJobObservation { source: source(epoch), observed_at: at, event, cronjob: None };
        self.feed(at, CoverageInput::CronJob(Box::new(obs)));
    }

    fn run(&mut self, at: i64) {
        let run = JobRun {
            namespace: "batch".into(),
            owner: RunOwner { kind: OwnerKind::Cronjob, name: "report".into(), uid: UID.into() },
            run_name: format!("report-{at}"),
            run_uid: "d0000000-0000-4000-8000-000000000001".into(),
            started_at: Some(at - MIN),
            finished_at: at,
            result: RunResult::Failed,
            failure_reason: None,
            succeeded_pods: 0,
            failed_pods: 1,
            parallelism: None,
            completions: None,
            backoff_limit: None,
            exits: Vec::new(),
        };
        self.feed(at, CoverageInput::Run(Box::new(run)));
    }

    /// The manager renews every 2 s over `[from, to]` (holder `holder`), and the leases
    /// topic carries heartbeats every 10 s over `[to, hb_to]`.
    fn manager(&mut self, holder: &str, from: i64, to: i64) {
        let mut t = from;
        while t <= to {
            let obs = LeaseObservation {
                source: source(1),
                observed_at: t,
                event: ObservationEvent::Applied,
                lease: Some(lease(holder, from, t, 15)),
            };
            self.feed(t, CoverageInput::Lease(Box::new(obs)));
            t += 2 * S;
        }
    }

    fn heartbeats(&mut self, from: i64, to: i64) {
        let mut t = from;
        while t <= to {
            let obs = LeaseObservation {
                source: source(1),
                observed_at: t,
                event: ObservationEvent::Heartbeat,
                lease: None,
            };
            self.feed(t, CoverageInput::Lease(Box::new(obs)));
            t += 10 * S;
        }
    }

    fn states(&self) -> Vec<Option<CoverageState>> {
        self.emitted.iter().map(|(_, v)| v.as_ref().map(|a| a.state)).collect()
    }
}

fn source(epoch: i64) -> Source {
    Source { cluster: "test".into(), instance: "w".into(), epoch }
}

use CoverageState::{Firing, ManagerStopped, Ok as OK, Pending, Resolved};

#[test]
fn a_subject_goes_ok_pending_firing_resolved_with_one_record_per_change() {
    let mut h = Harness::new(CoverageConfig::default());
    h.manager("a", T0, T0 + 10 * S);
    h.run(T0 + 20 * S);
    h.cronjob(T0 + 30 * S, ObservationEvent::Applied, "*/10 * * * *", false, 1);
    h.manager("a", T0 + 32 * S, T0 + MIN);
    h.run(T0 + MIN);
    // Due at 00:10 + 10 min; pending from 00:20, firing at 00:35.
    h.manager("a", T0 + 12 * S, T0 + 40 * MIN);
    assert_eq!(h.states(), [Some(OK), Some(Pending), Some(Firing)]);
    let firing = h.emitted[2].1.clone().unwrap();
    assert_eq!(firing.pending_since, Some(T0 + 20 * MIN));
    assert_eq!(firing.expected_by, Some(T0 + 20 * MIN));
    assert_eq!(firing.previous_state, Some(Pending));
    assert!(firing.stream_time >= T0 + 35 * MIN && firing.stream_time < T0 + 35 * MIN + 10 * S);
    assert_eq!(firing.manager_lease, "kube-system/kube-controller-manager");
    h.run(T0 + 41 * MIN);
    assert_eq!(h.states().last(), Some(&Some(Resolved)));
    // Resolved stays until it is overdue again (no extra OK record).
    h.manager("a", T0 + 41 * MIN, T0 + 50 * MIN);
    assert_eq!(h.states().len(), 4);
}

/// An alert links to the records it was judged from: the CronJob's latest observation, the
/// latest progress run and the manager Lease's latest snapshot (kept across the records
/// that changed nothing), whichever record's processing emitted it.
#[test]
fn an_alert_links_to_the_cronjob_the_last_run_and_the_manager_lease() {
    let mut h = Harness::new(CoverageConfig::default());
    h.traced = true;
    h.manager("a", T0, T0 + 10 * S);
    h.run(T0 + 20 * S);
    h.cronjob(T0 + 30 * S, ObservationEvent::Applied, "*/10 * * * *", false, 1);
    h.run(T0 + MIN);
    h.manager("a", T0 + MIN, T0 + 40 * MIN);
    assert_eq!(h.states(), [Some(OK), Some(Pending), Some(Firing)]);
    let at = |kind: &str, t: i64| format!("{kind}@{t}");
    assert_eq!(h.links[0], [at("cronjob", T0 + 30 * S), at("run", T0 + 20 * S), at("lease", T0 + 10 * S)]);
    let firing = h.emitted[2].1.clone().unwrap();
    // Emitted when a lease record advanced stream time: that record is the latest snapshot.
    assert_eq!(
        h.links[2],
        [at("cronjob", T0 + 30 * S), at("run", T0 + MIN), at("lease", firing.stream_time)]
    );
}

#[test]
fn overdue_only_during_an_outage_never_fires() {
    let mut h = Harness::new(CoverageConfig::default());
    h.manager("a", T0, T0 + 10 * S);
    h.run(T0 + 20 * S);
    h.cronjob(T0 + 30 * S, ObservationEvent::Applied, "*/5 * * * *", false, 1);
    h.manager("a", T0 + 32 * S, T0 + MIN);
    h.run(T0 + MIN);
    h.manager("a", T0 + MIN + 2 * S, T0 + 2 * MIN);
    // The manager stops at 00:02 for 25 minutes; the leases topic keeps its heartbeats.
    h.heartbeats(T0 + 2 * MIN + 10 * S, T0 + 27 * MIN);
    h.manager("b", T0 + 27 * MIN, T0 + 28 * MIN);
    h.run(T0 + 28 * MIN); // the missed run, started on recovery
    for m in (30..=60).step_by(5) {
        h.manager("b", T0 + (m - 2) * MIN, T0 + m * MIN);
        h.run(T0 + m * MIN + 30 * S);
    }
    assert_eq!(h.states(), [Some(OK), Some(ManagerStopped), Some(OK)], "{:?}", h.emitted);
    let stopped = h.emitted[1].1.clone().unwrap();
    assert_eq!(stopped.stream_time, T0 + 15 * MIN, "due at 00:05 + 10 min, the manager down since 00:02:15");
    assert_eq!(stopped.coverage_gaps.len(), 1);
    assert_eq!(stopped.coverage_gaps[0].started_at, T0 + 2 * MIN + 15 * S);
}

#[test]
fn firing_holds_through_a_manager_gap_until_progress() {
    let mut h = Harness::new(CoverageConfig::default());
    h.manager("a", T0, T0 + 10 * S);
    h.run(T0 + 20 * S);
    h.cronjob(T0 + 30 * S, ObservationEvent::Applied, "*/10 * * * *", false, 1);
    h.manager("a", T0 + 32 * S, T0 + 40 * MIN);
    h.heartbeats(T0 + 40 * MIN, T0 + 60 * MIN);
    assert_eq!(h.states(), [Some(OK), Some(Pending), Some(Firing)], "no resolve by a manager stop");
}

#[test]
fn suspension_deletion_and_unlisted_subjects_end_with_a_tombstone() {
    let mut h = Harness::new(CoverageConfig::default());
    h.manager("a", T0, T0 + 10 * S);
    h.run(T0 + 10 * S);
    h.cronjob(T0 + 10 * S, ObservationEvent::Applied, "*/10 * * * *", false, 1);
    h.cronjob(T0 + 20 * S, ObservationEvent::Applied, "*/10 * * * *", true, 1);
    assert_eq!(h.states(), [Some(OK), None], "suspended: not judged, its record ends");
    // Unsuspended long after its last progress: measured from the resumption.
    h.manager("a", T0 + 22 * S, T0 + 3 * H);
    h.cronjob(T0 + 3 * H, ObservationEvent::Applied, "*/10 * * * *", false, 1);
    assert_eq!(h.states().last(), Some(&Some(OK)));
    h.marker(T0 + 3 * H + S, ObservationEvent::SnapshotBegin, 2);
    h.marker(T0 + 3 * H + 2 * S, ObservationEvent::SnapshotEnd, 2);
    assert_eq!(h.states().last(), Some(&None), "not re-listed: deleted while unobserved");
    assert_eq!(h.p.subjects().count(), 0);
}

#[test]
fn a_subject_listed_in_the_relists_epoch_survives_its_end() {
    let mut h = Harness::new(CoverageConfig::default());
    h.manager("a", T0, T0 + 10 * S);
    h.run(T0 + 10 * S);
    h.cronjob(T0 + 10 * S, ObservationEvent::Applied, "*/10 * * * *", false, 1);
    h.marker(T0 + 20 * S, ObservationEvent::SnapshotBegin, 2);
    h.cronjob(T0 + 21 * S, ObservationEvent::Applied, "*/10 * * * *", false, 2);
    h.marker(T0 + 22 * S, ObservationEvent::SnapshotEnd, 2);
    assert_eq!(h.states(), [Some(OK)], "re-listed: still there, no tombstone");
    assert_eq!(h.p.subjects().count(), 1);
}

#[test]
fn a_bad_override_annotation_is_counted_and_the_schedule_used() {
    let mut h = Harness::new(CoverageConfig::default());
    h.manager("a", T0, T0 + 10 * S);
    let mut m = meta("batch", "report", UID);
    m.annotations.insert(super::EXPECTED_INTERVAL_ANNOTATION.into(), "soon".into());
    let cj = CronJob {
        meta: m,
        schedule: "@hourly".into(),
        time_zone: None,
        suspend: false,
        starting_deadline_seconds: None,
        concurrency_policy: None,
        status: CronJobStatus { last_schedule_time: None, last_successful_time: Some(T0), active_count: 0 },
    };
    let obs = CronJobObservation {
        source: source(1),
        observed_at: T0 + 11 * S,
        event: ObservationEvent::Applied,
        cronjob: Some(cj),
    };
    h.feed(T0 + 11 * S, CoverageInput::CronJob(Box::new(obs)));
    let alert = h.emitted[0].1.clone().unwrap();
    assert_eq!(alert.expected_by, Some(T0 + H + 10 * MIN));
    assert_eq!(h.out.take_counts().get("coverage_bad_expected_interval"), Some(&1));
}

/// Feeds the outage scenario, optionally moving to a processor restored from the
/// changelog (every store's changes so far) halfway through.
fn outage_scenario(restore_at: Option<i64>) -> Vec<(String, Option<CoverageAlert>)> {
    let mut h = Harness::new(CoverageConfig::default());
    let stores = h.p.stores().len();
    let mut changelog: Vec<Vec<crate::runtime::store::Change>> = vec![Vec::new(); stores];
    let mut checkpoint = |h: &mut Harness, at: i64| {
        for (i, store) in h.p.stores().into_iter().enumerate() {
            changelog[i].extend(store.take_changes());
        }
        if restore_at == Some(at) {
            let mut fresh = Coverage::new(CoverageConfig::default());
            for (store, changes) in fresh.stores().into_iter().zip(&changelog) {
                for (k, v) in changes {
                    store.restore(k, v.as_deref()).unwrap();
                }
            }
            h.p = fresh;
        }
    };
    h.manager("a", T0, T0 + 10 * S);
    h.run(T0 + 20 * S);
    h.cronjob(T0 + 30 * S, ObservationEvent::Applied, "*/5 * * * *", false, 1);
    checkpoint(&mut h, 1);
    h.manager("a", T0 + 32 * S, T0 + 2 * MIN);
    h.heartbeats(T0 + 2 * MIN + 10 * S, T0 + 16 * MIN);
    checkpoint(&mut h, 2);
    h.heartbeats(T0 + 16 * MIN + 10 * S, T0 + 27 * MIN);
    h.manager("b", T0 + 27 * MIN, T0 + 60 * MIN);
    h.emitted
}

#[test]
fn a_processor_restored_from_its_changelog_emits_what_the_original_would() {
    let whole = outage_scenario(None);
    assert!(whole.len() >= 3, "{whole:?}");
    for at in [1, 2] {
        assert_eq!(outage_scenario(Some(at)), whole, "restored at checkpoint {at}");
    }
}
