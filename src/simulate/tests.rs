use std::collections::BTreeMap;

use super::*;
use crate::trace::KubeObject;
use fleet::Concurrency;

fn run(name: &str, hours: u32, seed: u64) -> (Vec<TraceEntry>, SimulationStats) {
    let p = profile(name).unwrap();
    let mut sim = simulate(&p, hours, seed);
    let entries: Vec<TraceEntry> = sim.by_ref().collect();
    (entries, sim.stats().clone())
}

#[test]
fn simulate_is_deterministic_and_ordered() {
    let (a, sa) = run("small", 3, 11);
    let (b, sb) = run("small", 3, 11);
    assert_eq!(a, b);
    assert_eq!(sa, sb);
    assert_eq!(sa.entries, a.len() as u64);
    assert!(a.windows(2).all(|w| w[0].observed_at_ms <= w[1].observed_at_ms));
    let (c, _) = run("small", 3, 12);
    assert_ne!(a, c);
}

#[test]
fn simulate_unknown_profile_is_an_error() {
    assert_eq!(profile("huge").unwrap_err().reason(), "unknown_profile");
    assert!(check_hours(0).is_err());
    for name in PROFILES {
        assert_eq!(profile(name).unwrap().name, name);
    }
}

#[test]
fn simulate_every_profile_plans_the_coverage_scenario() {
    for name in PROFILES {
        let p = profile(name).unwrap();
        for hours in [24, 6] {
            let plan = Plan::new(&p, hours, 1, START_MS);
            let s = plan.scenario();
            let n = plan.cronjobs.len();
            assert_eq!((s.stopped.index, s.outage_only.index), (n - 2, n - 1), "{name}");
            for (c, want) in [(&s.stopped, fleet::STOPPED_NAME), (&s.outage_only, fleet::OUTAGE_ONLY_NAME)] {
                let cj = &plan.cronjobs[c.index];
                assert_eq!((c.namespace.as_str(), c.name.as_str()), ("batch-ops", want));
                assert_eq!((&cj.name, &cj.namespace, &cj.uid), (&c.name, &c.namespace, &c.uid));
                assert_eq!(cj.concurrency, Concurrency::Forbid);
                assert!(!cj.suspend && cj.active_deadline_secs.is_none());
            }
            assert_eq!(plan.cronjobs[s.outage_only.index].starting_deadline_secs, Some(200));
            assert_eq!(s.outages, plan.outages);
            assert_eq!((s.lease_renew_ms, s.lease_duration_secs), (p.lease_renew_ms, 15));
            // Lease history exists before the first outage.
            assert!(plan.outages.iter().all(|(a, _)| *a >= START_MS + 2 * 3_600_000), "{name} {hours} h");
            let stop = s.stops_at_ms.unwrap_or_else(|| panic!("{name} {hours} h: no stop time"));
            stop_constraints_hold(&plan, stop);
        }
    }
    // The scenario has its own random stream: the fleet's plan is what it was before the
    // scenario existed (values printed by the code without it, seed 1, 24 h).
    let before = [
        (
            "small",
            "e30f71bd-8ce4-41be-b663-486018af8966",
            "manual-rollup-q8nw2",
            1_793_518_172_658,
            1_793_547_576_193,
        ),
        (
            "medium",
            "cce9ae0a-b10a-408b-9104-ee28cada912f",
            "backfill-s92l-39",
            1_793_504_258_144,
            1_793_563_513_579,
        ),
        (
            "large",
            "eb1c96de-1e51-473b-8ab6-59c66216be11",
            "backfill-t4zt-399",
            1_793_507_340_790,
            1_793_566_780_424,
        ),
    ];
    for (name, last_uid, last_bare, outage, last_session) in before {
        let p = profile(name).unwrap();
        let plan = Plan::new(&p, 24, 1, START_MS);
        assert_eq!(plan.cronjobs.len(), p.cronjobs as usize + 2);
        assert_eq!(plan.cronjobs[0].uid, "416f5dbc-3f5a-4e6d-af38-3a4a7bd47fe6");
        assert_eq!(plan.cronjobs[p.cronjobs as usize - 1].uid, last_uid, "{name}");
        assert_eq!(plan.bare_jobs.last().unwrap().name, last_bare, "{name}");
        assert_eq!(plan.outages[0].0, outage, "{name}");
        assert_eq!(*plan.sessions.last().unwrap(), last_session, "{name}");
    }
    let p = profile("small").unwrap();
    // Too short for every constraint: the CronJob just keeps running.
    for hours in [2, 3] {
        assert_eq!(Plan::new(&p, hours, 1, START_MS).scenario().stops_at_ms, None, "{hours} h");
    }
}

/// (a) ≥ 1 h after the start, (b) ≥ 45 min clear of every outage, (c) ≥ 1 h before the end;
/// on the CronJob's schedule.
fn stop_constraints_hold(plan: &Plan, stop: i64) {
    assert!(stop >= plan.start_ms + 3_600_000, "(a) {stop}");
    for (a, b) in &plan.outages {
        assert!(stop + 45 * 60_000 <= *a || stop >= b + 45 * 60_000, "(b) {stop} vs {a}..{b}");
    }
    assert!(stop <= plan.end_ms - 3_600_000, "(c) {stop}");
    assert_eq!(stop % 600_000, 0, "a */10 fire time");
}

/// What the trace shows of one scenario CronJob's Jobs: (scheduled ms, created ms, finished
/// ms) per Job UID, last state wins.
type Runs = BTreeMap<String, (i64, i64, Option<i64>, i32)>;

fn runs_of(entries: &[TraceEntry], cronjob_uid: &str) -> Runs {
    let mut runs = Runs::new();
    for e in entries {
        let TraceEvent::Applied(KubeObject::Job(j)) = &e.event else { continue };
        let owned = j.metadata.owner_references.iter().flatten().any(|o| o.uid == cronjob_uid);
        if !owned {
            continue;
        }
        let name = j.metadata.name.as_deref().unwrap();
        let minutes: i64 = name.rsplit('-').next().unwrap().parse().unwrap();
        let created = j.metadata.creation_timestamp.as_ref().unwrap().0.as_millisecond();
        let status = j.status.as_ref();
        let finished = status.and_then(|s| s.completion_time.as_ref()).map(|t| t.0.as_millisecond());
        let active = status.and_then(|s| s.active).unwrap_or(0);
        runs.insert(j.metadata.uid.clone().unwrap(), (minutes * 60_000, created, finished, active));
    }
    runs
}

#[test]
fn simulate_small_trace_plays_the_coverage_scenario() {
    // Half a day: the whole scenario in about half the 8 CPU s a debug day takes.
    let (entries, _) = run("small", 12, 1);
    let plan = Plan::new(&profile("small").unwrap(), 12, 1, START_MS);
    let s = plan.scenario();
    let stop = s.stops_at_ms.expect("12 h have a stop time");
    stop_constraints_hold(&plan, stop);
    let (from, to) = s.outages[0];

    // report-export: finished runs up to the stop, then one run that never ends.
    let runs = runs_of(&entries, &s.stopped.uid);
    let before = runs.values().filter(|r| r.0 < stop && r.2.is_some_and(|f| f < stop)).count();
    assert!(before >= 20, "{before} finished runs before the stop");
    assert!(runs.values().all(|r| r.2.is_none_or(|f| f < stop)), "a run finished after the stop");
    assert!(runs.values().all(|r| r.0 <= stop), "a run was scheduled after the stop");
    let hanging: Vec<_> = runs.values().filter(|r| r.2.is_none()).collect();
    assert_eq!(hanging.len(), 1, "{hanging:?}");
    assert_eq!((hanging[0].0, hanging[0].3), (stop, 1), "the hanging run, active to the end");
    let last_cronjob = entries
        .iter()
        .rev()
        .find_map(|e| match &e.event {
            TraceEvent::Applied(KubeObject::CronJob(c))
                if c.metadata.uid.as_deref() == Some(&s.stopped.uid) =>
            {
                Some(c.status.clone().unwrap_or_default())
            }
            _ => None,
        })
        .unwrap();
    assert_eq!(last_cronjob.active.map(|a| a.len()), Some(1));
    assert_eq!(last_cronjob.last_schedule_time.map(|t| t.0.as_millisecond()), Some(stop));

    // frequent-sync: no Job created during an outage; finished runs on both sides of it.
    let runs = runs_of(&entries, &s.outage_only.uid);
    for (a, b) in &s.outages {
        assert!(runs.values().all(|r| r.1 < *a || r.1 >= *b), "a Job created in {a}..{b}");
    }
    assert!(runs.values().any(|r| r.2.is_some_and(|f| f < from)), "no run finished before the outage");
    assert!(runs.values().any(|r| r.0 >= to && r.2.is_some()), "no run finished after the outage");
    assert!(runs.values().all(|r| r.2.is_some() || r.0 > plan.end_ms - 600_000), "a run hangs");

    // The controller-manager Lease: renewed until the outage, a new holder at its end.
    let kcm: Vec<_> = entries
        .iter()
        .filter_map(|e| match &e.event {
            TraceEvent::Applied(KubeObject::Lease(l))
                if l.metadata.name.as_deref() == Some("kube-controller-manager") =>
            {
                l.spec.clone()
            }
            _ => None,
        })
        .collect();
    let ms = |t: &Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime>| {
        t.as_ref().unwrap().0.as_millisecond()
    };
    assert!(kcm.iter().all(|l| l.lease_duration_seconds == Some(15) && l.holder_identity.is_some()));
    assert!(kcm.iter().all(|l| !(from..to).contains(&ms(&l.renew_time))), "renewed during the outage");
    let i = kcm.iter().position(|l| ms(&l.renew_time) >= to).unwrap();
    let (last, next) = (&kcm[i - 1], &kcm[i]);
    assert!(ms(&last.renew_time) < from && ms(&last.renew_time) >= from - 10_100);
    assert_eq!((ms(&next.acquire_time), ms(&next.renew_time)), (to, to));
    assert_ne!(next.holder_identity, last.holder_identity);
    assert_eq!(next.lease_transitions, last.lease_transitions.map(|t| t + 1));
}

#[test]
fn a_sessions_changes_never_go_back_in_time() {
    // `[sessions]` drops an update older than the one it holds (two writers raced); the
    // simulated host application must not look like a race.
    let (entries, stats) = run("small", 6, 1);
    let mut last: std::collections::BTreeMap<String, i64> = std::collections::BTreeMap::new();
    let mut lines = 0;
    for e in &entries {
        if let crate::trace::TraceEvent::Session(s) = &e.event {
            let at = s.updated_at_ms.expect("the simulator writes updated_at");
            assert!(at <= e.observed_at_ms, "{s:?} changed after it was published");
            if let Some(before) = last.insert(s.session_id.clone(), at) {
                assert!(at > before, "{}: updated_at {at} after {before}", s.session_id);
            }
            lines += 1;
        }
    }
    assert_eq!(lines, stats.session_updates, "every session line checked");
    assert!(lines > 20, "{lines}");
}
