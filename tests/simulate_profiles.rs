//! `kubefacts simulate`: the same profile and seed give the same bytes, and the small
//! profile's trace — read back with the trace reader, not through the simulator's own
//! counters — shows every behaviour the pipeline must handle.

use std::{
    collections::{BTreeMap, BTreeSet},
    process::Command,
};

use kubefacts::trace::{
    self, MinimalObject, SessionState, TraceEvent,
    minimal::{Job, Pod},
};

fn simulate(profile: &str, seed: u64, hours: Option<u32>) -> Vec<u8> {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kubefacts"));
    cmd.args(["simulate", "--profile", profile, "--seed", &seed.to_string(), "--output", "-"]);
    if let Some(h) = hours {
        cmd.args(["--hours", &h.to_string()]);
    }
    let out = cmd.output().expect("kubefacts runs");
    assert!(out.status.success(), "simulate failed: {}", String::from_utf8_lossy(&out.stderr));
    let summary = String::from_utf8_lossy(&out.stderr);
    assert!(summary.contains("finished runs"), "no summary on stderr: {summary}");
    out.stdout
}

#[test]
fn same_seed_same_bytes_other_seed_other_bytes() {
    let a = simulate("small", 1, Some(6));
    let b = simulate("small", 1, Some(6));
    assert!(!a.is_empty());
    assert!(a == b, "two runs with seed 1 differ");
    let c = simulate("small", 2, Some(6));
    assert!(a != c, "seeds 1 and 2 gave the same trace");
}

fn job_condition(job: &Job, ty: &str) -> Option<(String, Option<String>)> {
    job.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == ty && c.status == "True")
        .map(|c| (c.type_.clone(), c.reason.clone()))
}

#[test]
fn the_small_profile_shows_every_behaviour() {
    let bytes = simulate("small", 1, None);
    let lines = bytes.iter().filter(|b| **b == b'\n').count();
    let mut entries = Vec::new();
    for (i, e) in trace::read(&bytes[..]).enumerate() {
        entries.push(e.unwrap_or_else(|err| panic!("entry {i} does not parse: {err}")));
    }
    assert_eq!(entries.len(), lines, "one entry per line");
    assert!(entries.len() <= 90_000, "small is meant to stay small: {} entries", entries.len());
    for w in entries.windows(2) {
        assert!(
            w[0].observed_at_ms <= w[1].observed_at_ms,
            "observed_at decreased at {}",
            w[1].observed_at_ms
        );
    }

    // The last state of every Job, and how it was deleted.
    let mut jobs: BTreeMap<String, Job> = BTreeMap::new();
    let mut deleted_jobs: Vec<Job> = Vec::new();
    let mut exits: BTreeSet<(i32, String)> = BTreeSet::new();
    let mut session_pods = 0;
    let mut sessions: BTreeMap<String, Vec<SessionState>> = BTreeMap::new();
    let mut heartbeats = 0;
    let mut kcm_renewals: Vec<(i64, String, i32)> = Vec::new();
    let mut opted_out_namespace = false;
    let mut opted_out_cronjob = false;
    let mut scenario_cronjobs: BTreeSet<String> = BTreeSet::new();
    // Relists: which objects existed before each, which came back.
    let mut existing: BTreeSet<(&'static str, String)> = BTreeSet::new();
    let mut relisted: Option<BTreeSet<(&'static str, String)>> = None;
    let mut relists = 0;
    let mut relists_with_absentees = 0;
    let annotated = |o: &Option<std::collections::BTreeMap<String, String>>| {
        o.as_ref().and_then(|a| a.get("kubefacts.io/exclude")).is_some_and(|v| v == "true")
    };
    for e in &entries {
        let uid_of = |o: &MinimalObject| -> (&'static str, String) {
            let meta = match o {
                MinimalObject::Pod(p) => &p.metadata,
                MinimalObject::Job(j) => &j.metadata,
                MinimalObject::CronJob(c) => &c.metadata,
                MinimalObject::Lease(l) => &l.metadata,
                MinimalObject::Namespace(n) => &n.metadata,
            };
            (o.kind(), meta.uid.clone().unwrap_or_default())
        };
        match &e.event {
            TraceEvent::SnapshotBegin { epoch, .. } => {
                if *epoch > 1 {
                    relists += 1;
                    relisted = Some(BTreeSet::new());
                }
            }
            TraceEvent::SnapshotEnd { .. } => {
                if let Some(seen) = relisted.take() {
                    let absent = existing.difference(&seen).count();
                    if absent > 0 {
                        relists_with_absentees += 1;
                    }
                    existing = seen;
                }
            }
            TraceEvent::Heartbeat => heartbeats += 1,
            TraceEvent::Session(s) => sessions.entry(s.session_id.clone()).or_default().push(s.state),
            TraceEvent::Applied(o) => {
                if let Some(seen) = relisted.as_mut() {
                    seen.insert(uid_of(o));
                } else {
                    existing.insert(uid_of(o));
                }
                match o {
                    MinimalObject::Job(j) => {
                        jobs.insert(j.metadata.uid.clone().unwrap(), (**j).clone());
                    }
                    MinimalObject::Pod(p) => {
                        record_exits(p, &mut exits);
                        if p.metadata.labels.as_ref().is_some_and(|l| l.contains_key("kubefacts.io/session"))
                        {
                            session_pods += 1;
                        }
                    }
                    MinimalObject::Lease(l)
                        if l.metadata.name.as_deref() == Some("kube-controller-manager") =>
                    {
                        let spec = l.spec.clone().unwrap_or_default();
                        kcm_renewals.push((
                            spec.renew_time.map(|t| t.0.as_millisecond()).unwrap_or_default(),
                            spec.holder_identity.unwrap_or_default(),
                            spec.lease_transitions.unwrap_or_default(),
                        ));
                    }
                    MinimalObject::Namespace(n) => opted_out_namespace |= annotated(&n.metadata.annotations),
                    MinimalObject::CronJob(c) => {
                        opted_out_cronjob |= annotated(&c.metadata.annotations);
                        if c.metadata.namespace.as_deref() == Some("batch-ops") {
                            scenario_cronjobs.insert(c.metadata.name.clone().unwrap_or_default());
                        }
                    }
                    _ => {}
                }
            }
            TraceEvent::Deleted(o) => {
                existing.remove(&uid_of(o));
                if let MinimalObject::Job(j) = o {
                    deleted_jobs.push((**j).clone());
                }
            }
        }
    }

    // Every outcome, from the Jobs' own conditions and counters.
    let mut outcomes: BTreeMap<&str, usize> = BTreeMap::new();
    for job in jobs.values() {
        let failed = job.status.as_ref().and_then(|s| s.failed).unwrap_or(0);
        let outcome = match (job_condition(job, "Complete"), job_condition(job, "Failed")) {
            (Some(_), _) if failed == 0 => "succeeded first try",
            (Some(_), _) => "succeeded after retries",
            (None, Some((_, Some(reason)))) if reason == "BackoffLimitExceeded" => "BackoffLimitExceeded",
            (None, Some((_, Some(reason)))) if reason == "DeadlineExceeded" => "DeadlineExceeded",
            _ => continue,
        };
        *outcomes.entry(outcome).or_default() += 1;
    }
    for outcome in
        ["succeeded first try", "succeeded after retries", "BackoffLimitExceeded", "DeadlineExceeded"]
    {
        assert!(outcomes.get(outcome).copied().unwrap_or(0) > 0, "no run {outcome}: {outcomes:?}");
    }
    // Interim conditions come before terminal ones.
    assert!(jobs.values().any(|j| job_condition(j, "SuccessCriteriaMet").is_some()));
    assert!(jobs.values().any(|j| job_condition(j, "FailureTarget").is_some()));

    for (code, reason) in [(0, "Completed"), (1, "Error"), (137, "OOMKilled"), (143, "Error")] {
        assert!(exits.contains(&(code, reason.to_owned())), "no exit {code}/{reason}: {exits:?}");
    }

    // Bare Jobs, and CronJob Jobs named after their schedule time in minutes.
    let owner =
        |j: &Job| j.metadata.owner_references.as_ref().and_then(|o| o.first()).map(|o| o.name.clone());
    assert!(jobs.values().any(|j| owner(j).is_none()), "no bare Job");
    for j in jobs.values() {
        if let Some(cj) = owner(j) {
            let name = j.metadata.name.as_deref().unwrap();
            let minutes = name.strip_prefix(&format!("{cj}-")).expect("named after its CronJob");
            assert!(minutes.parse::<u64>().is_ok(), "{name}");
        }
    }

    // History-limit deletions (background: no deletionTimestamp) and TTL deletions
    // (foreground: the Job shows its deletionTimestamp first).
    let history =
        deleted_jobs.iter().filter(|j| owner(j).is_some() && j.metadata.deletion_timestamp.is_none()).count();
    let ttl = deleted_jobs.iter().filter(|j| j.metadata.deletion_timestamp.is_some()).count();
    assert!(history > 0, "no history-limit deletion");
    assert!(ttl > 0, "no TTL deletion");

    assert!(relists >= 1, "no relist");
    assert!(relists_with_absentees >= 1, "no relist with objects deleted while the watcher was down");
    // A heartbeat every 10 s of a day, but for the watcher's gaps: stream time neither
    // stalls nor races ahead of the schedule.
    assert!((8_400..=8_640).contains(&heartbeats), "{heartbeats} heartbeats in 24 h");
    let span = entries.last().unwrap().observed_at_ms - entries[0].observed_at_ms;
    assert!((86_300_000..86_400_000).contains(&span), "the trace spans {span} ms");

    // The controller-manager's lease: renewals, a gap far beyond its 15 s duration, and a
    // new holder with one more transition after it.
    assert!(kcm_renewals.len() > 100, "{} renewals", kcm_renewals.len());
    let outage = kcm_renewals.windows(2).find(|w| w[1].0 - w[0].0 > 20 * 60_000 && w[1].1 != w[0].1);
    let Some(w) = outage else { panic!("no controller-manager outage with a new holder") };
    assert_eq!(w[1].2, w[0].2 + 1, "leaseTransitions after the outage");
    assert!(kcm_renewals.windows(2).any(|w| w[1].0 - w[0].0 > 15_000));

    // Sessions, their pods, every terminal state.
    assert!(sessions.len() >= 6, "{} sessions", sessions.len());
    for state in [
        SessionState::Completed,
        SessionState::Failed,
        SessionState::Cancelled,
        SessionState::WaitingForInput,
    ] {
        assert!(sessions.values().any(|s| s.contains(&state)), "no session reached {state:?}");
    }
    assert!(session_pods > 0, "no session pods");

    assert!(opted_out_namespace && opted_out_cronjob, "nothing carries the opt-out annotation");

    // The coverage scenario (its fate is checked in src/simulate/tests.rs).
    let want: BTreeSet<String> = ["frequent-sync", "report-export"].map(String::from).into();
    assert_eq!(scenario_cronjobs, want, "the coverage scenario's CronJobs in batch-ops");
}

fn record_exits(pod: &Pod, exits: &mut BTreeSet<(i32, String)>) {
    for cs in pod.status.iter().flat_map(|s| s.container_statuses.iter().flatten()) {
        if let Some(t) = cs.state.as_ref().and_then(|s| s.terminated.as_ref()) {
            exits.insert((t.exit_code, t.reason.clone().unwrap_or_default()));
        }
    }
}
