//! What `kubefacts demo` prints: the summary, the stages' figures, and a readable look at
//! each output (runs and windows, cleanup decisions, coverage alerts, sessions).

use std::{
    collections::{BTreeMap, BTreeSet},
    path::Path,
};

use super::{LIST_RUNS_UP_TO, TopicTally};
use crate::cli::progress::thousands;
use kubefacts::{
    cleanup::{CleanupDecision, RetentionSource},
    codec::json::rfc3339_millis,
    config::PipelineConfig,
    coverage::CoverageAlert,
    journal::{JobRun, JobRunWindowPart, RunResult, WindowReader},
    observe::{AdmissionCounts, InputTopic},
    pipeline::StageReport,
    sessions::{OwnerRetainedCompute, RetentionState, SessionProjection},
};

#[allow(clippy::too_many_arguments)]
pub(super) fn print_summary(
    trace_name: &str,
    entries: u64,
    stream_span_ms: i64,
    tallies: &BTreeMap<InputTopic, TopicTally>,
    round_trips: u64,
    rejected: &BTreeMap<String, u64>,
    admission: &AdmissionCounts,
    output: &Path,
    config: &PipelineConfig,
) {
    println!(
        "kubefacts demo — {trace_name}\n{} trace entries over {:.1} h of cluster time",
        thousands(entries),
        stream_span_ms as f64 / 3_600_000.0
    );
    println!("\nobservations, as the watcher would publish them (minimized, keyed, Avro single-object):");
    println!(
        "  {:<30} {:>9} {:>8} {:>8} {:>12} {:>6}",
        "topic", "records", "markers", "keys", "bytes", "avg B"
    );
    for (topic, t) in tallies {
        println!(
            "  {:<30} {:>9} {:>8} {:>8} {:>12} {:>6.0}",
            topic.topic_name(&config.topics),
            t.records,
            t.markers,
            t.keys.len(),
            t.bytes,
            t.bytes as f64 / t.records.max(1) as f64
        );
    }
    println!(
        "{round_trips} records encoded and decoded back identical (env, args, commands, volumes, images and messages never leave the watcher)"
    );
    let admitted: u64 = admission.admitted.values().sum();
    let excluded: Vec<String> = admission
        .excluded
        .iter()
        .map(|((kind, step), n)| format!("{n} {kind} at {}", step.as_str()))
        .collect();
    println!(
        "admission ({}: \"true\" opts out): {admitted} objects admitted, {}",
        config.admission.opt_out_annotation,
        if excluded.is_empty() {
            "none excluded".to_owned()
        } else {
            format!("excluded: {}", excluded.join(", "))
        }
    );
    if rejected.is_empty() {
        println!("no trace entry was rejected");
    } else {
        println!("rejected (each reported above):");
        for (reason, n) in rejected {
            println!("  {reason}: {n}");
        }
    }
    println!(
        "outputs in {}/: <topic>.jsonl (decoded, one record per line) and <topic>.avro (Avro object container files)",
        output.display()
    );
}

/// What each stage wrote.
pub(super) fn print_processors(
    reports: &[StageReport],
    processed: &[(String, usize, bool)],
    dead_letters: usize,
    rate: f64,
) {
    // Each stage with what it read (global inputs once per task) and its time.
    let stages: Vec<String> = reports
        .iter()
        .map(|r| format!("{} ({} in, {:.2} s)", r.stage, thousands(r.records_in), r.secs))
        .collect();
    println!(
        "\nprocessors, in memory as on Kafka (stages: {}; {} observations/s on one core):",
        stages.join(" → "),
        thousands(rate as u64)
    );
    let width = processed.iter().map(|(t, ..)| t.len()).max().unwrap_or(0);
    for (topic, n, internal) in processed {
        println!(
            "  {topic:<width$} {n:>8} records{}",
            if *internal { " (internal: not written out)" } else { "" }
        );
    }
    if dead_letters == 0 {
        println!("no record was dead-lettered");
    }
}

/// Runs per journal window, the CronJobs that fail most with their exit breakdown, and —
/// for a short hand-written trace — every run.
pub(super) fn print_runs(runs: &[JobRun], parts: Vec<JobRunWindowPart>) {
    // A window is its latest summary plus its pages, as any consumer rebuilds it.
    let mut reader = WindowReader::new();
    parts.into_iter().for_each(|p| reader.add(p));
    println!("\nfinished runs per journal window (job-runs; summary + pages, rebuilt as a consumer does):");
    println!(
        "  {:<22} {:>7} {:>9} {:>7} {:>6}  state",
        "window start", "runs", "succeeded", "failed", "pages"
    );
    for w in reader.windows() {
        let w = match w {
            Ok(w) => w,
            Err(e) => {
                println!("  cannot rebuild: {e}");
                continue;
            }
        };
        let failed = w.runs.iter().filter(|r| r.result == RunResult::Failed).count();
        println!(
            "  {:<22} {:>7} {:>9} {:>7} {:>6}  {}",
            rfc3339_millis(w.window_start).unwrap_or_default(),
            w.runs.len(),
            w.runs.len() - failed,
            failed,
            w.summary.pages,
            if w.summary.is_final {
                format!("final, revision {}", w.revision)
            } else {
                format!("open, revision {}", w.revision)
            }
        );
    }
    let total_failed = runs.iter().filter(|r| r.result == RunResult::Failed).count();
    println!("{} runs filed (job-run-facts), {} failed", runs.len(), total_failed);

    // Per owner: failed runs, why, and how their containers exited.
    #[derive(Default)]
    struct Failing<'a> {
        namespace: &'a str,
        runs: usize,
        failed: usize,
        reasons: BTreeMap<&'a str, usize>,
        exits: BTreeMap<(i32, &'a str), i64>,
    }
    let mut owners: BTreeMap<(&str, &str), Failing> = BTreeMap::new();
    for r in runs {
        let f = owners.entry((&r.namespace, &r.owner.name)).or_default();
        f.namespace = &r.namespace;
        f.runs += 1;
        if r.result == RunResult::Failed {
            f.failed += 1;
            *f.reasons.entry(r.failure_reason.as_deref().unwrap_or("-")).or_default() += 1;
        }
        for e in r.exits.iter().filter(|e| e.exit_code != 0) {
            *f.exits.entry((e.exit_code, e.reason.as_deref().unwrap_or("-"))).or_default() += e.count;
        }
    }
    let mut failing: Vec<(&(&str, &str), &Failing)> =
        owners.iter().filter(|(_, f)| f.failed > 0 || !f.exits.is_empty()).collect();
    failing.sort_by(|a, b| {
        (b.1.failed, b.1.exits.values().sum::<i64>()).cmp(&(a.1.failed, a.1.exits.values().sum()))
    });
    println!("\ntop failing CronJobs and Jobs (failed runs, reasons, non-zero container exits):");
    if failing.is_empty() {
        println!("  none failed");
    }
    for ((_, name), f) in failing.iter().take(5) {
        let reasons: Vec<String> = f.reasons.iter().map(|(r, n)| format!("{n}×{r}")).collect();
        let exits: Vec<String> =
            f.exits.iter().map(|((code, reason), n)| format!("{n}×{code}/{reason}")).collect();
        println!(
            "  {:<36} {:>4}/{:<4} runs failed  {:<40} exits {}",
            format!("{}/{name}", f.namespace),
            f.failed,
            f.runs,
            if reasons.is_empty() { "-".to_owned() } else { reasons.join(", ") },
            if exits.is_empty() { "none".to_owned() } else { exits.join(", ") }
        );
    }
    if runs.len() <= LIST_RUNS_UP_TO {
        println!("\nevery run:");
        let mut sorted: Vec<&JobRun> = runs.iter().collect();
        sorted.sort_by(|a, b| (a.finished_at, &a.run_name).cmp(&(b.finished_at, &b.run_name)));
        for r in sorted {
            let exits: Vec<String> = r
                .exits
                .iter()
                .map(|e| format!("{}×{}/{}", e.count, e.exit_code, e.reason.as_deref().unwrap_or("-")))
                .collect();
            println!(
                "  {:<28} {:?}{} — pods {} ok, {} failed; exits {}",
                r.run_name,
                r.result,
                r.failure_reason.as_deref().map(|f| format!(" ({f})")).unwrap_or_default(),
                r.succeeded_pods,
                r.failed_pods,
                if exits.is_empty() { "none".to_owned() } else { exits.join(", ") }
            );
        }
    }
}

/// The cleanup decisions: how many, why, and the first few.
pub(super) fn print_decisions(config: &PipelineConfig, decisions: &[CleanupDecision]) {
    let by_ttl = decisions.iter().filter(|d| d.retention_source == RetentionSource::JobTtl).count();
    println!(
        "\ncleanup decisions (retention {} s unless the Job's TTL is shorter; `kubefacts cleaner --apply` deletes): {} decided, {} by the Job's own TTL, {} by the default retention",
        config.cleanup.job_retention_secs,
        decisions.len(),
        by_ttl,
        decisions.len() - by_ttl
    );
    if decisions.is_empty() {
        println!("  none: no finished Job outlived its retention in this trace");
    }
    for d in decisions.iter().take(5) {
        println!(
            "  {:<36} finished {}, retention {} s ({:?}), decided at {} (sweep {})",
            format!("{}/{}", d.job.namespace, d.job.name),
            rfc3339_millis(d.finished_at).unwrap_or_default(),
            d.retention_secs,
            d.retention_source,
            rfc3339_millis(d.decided_at).unwrap_or_default(),
            d.sweep
        );
    }
    if decisions.len() > 5 {
        println!("  … and {} more in cleanup-decisions.v1", decisions.len() - 5);
    }
}

/// Lease coverage: the manager's gaps, the state changes, what fired and what a stopped
/// control plane excused.
pub(super) fn print_coverage(alerts: &[CoverageAlert]) {
    use kubefacts::coverage::CoverageState as S;
    let time = |ms: i64| rfc3339_millis(ms).unwrap_or_default();
    let mut entered: BTreeMap<&'static str, usize> = BTreeMap::new();
    let mut last: BTreeMap<&str, &CoverageAlert> = BTreeMap::new();
    let mut fired: BTreeSet<&str> = BTreeSet::new();
    let mut stopped: BTreeSet<&str> = BTreeSet::new();
    let mut gaps: BTreeMap<(&str, i64), i64> = BTreeMap::new();
    for a in alerts {
        *entered.entry(a.state.as_str()).or_default() += 1;
        last.insert(&a.subject.uid, a);
        match a.state {
            S::Firing => {
                fired.insert(&a.subject.uid);
            }
            S::ManagerStopped => {
                stopped.insert(&a.subject.uid);
            }
            _ => {}
        }
        for g in &a.coverage_gaps {
            let to = gaps.entry((&a.manager_lease, g.started_at)).or_insert(g.ended_at);
            *to = (*to).max(g.ended_at);
        }
    }
    let counts: Vec<String> = entered.iter().map(|(s, n)| format!("{n} {s}")).collect();
    println!(
        "\nlease coverage (coverage-alerts.v1, docs/COVERAGE.md): {} state changes of {} CronJobs ({})",
        alerts.len(),
        last.len(),
        if counts.is_empty() { "none".to_owned() } else { counts.join(", ") }
    );
    for ((lease, from), to) in &gaps {
        println!("  {lease} not covered {} → {} ({} s)", time(*from), time(*to), (to - from) / 1000);
    }
    let name = |a: &CoverageAlert| format!("{}/{}", a.subject.namespace, a.subject.name);
    for uid in &fired {
        let a = last[uid];
        let first_fire = alerts.iter().find(|x| x.subject.uid == *uid && x.state == S::Firing);
        println!(
            "  FIRED  {:<36} expected by {}, pending since {}, firing at {}, now {}",
            name(a),
            first_fire.and_then(|f| f.expected_by).map(time).unwrap_or_default(),
            first_fire.and_then(|f| f.pending_since).map(time).unwrap_or_default(),
            first_fire.map(|f| time(f.stream_time)).unwrap_or_default(),
            a.state.as_str(),
        );
    }
    let excused: Vec<&str> = stopped.difference(&fired).copied().collect();
    if !excused.is_empty() {
        let examples: Vec<String> = excused.iter().take(3).map(|uid| name(last[uid])).collect();
        println!(
            "  {} CronJobs were overdue only while the manager was stopped: MANAGER_STOPPED, never fired (e.g. {})",
            excused.len(),
            examples.join(", ")
        );
    }
}

/// Session projections: the latest projection of each session by retention state, the
/// sessions that still hold compute, and what each owner's stopped sessions hold.
pub(super) fn print_sessions(projections: &[SessionProjection], totals: &[OwnerRetainedCompute]) {
    // Highest revision per key (records of one key are in revision order).
    let mut latest: BTreeMap<&str, &SessionProjection> = BTreeMap::new();
    for p in projections {
        latest.insert(&p.session_id, p);
    }
    let mut by_state: BTreeMap<RetentionState, usize> = BTreeMap::new();
    for p in latest.values() {
        *by_state.entry(p.retention_state).or_default() += 1;
    }
    let counts: Vec<String> = by_state.iter().map(|(s, n)| format!("{n} {}", s.as_str())).collect();
    let foreign: i64 = latest.values().map(|p| p.foreign_pods_seen).sum();
    println!(
        "\nsession projections (session-projections.v1, docs/SESSIONS.md): {} sessions ({}); {} projections; {foreign} foreign Pod(s) carried a session's label and supplied nothing",
        latest.len(),
        if counts.is_empty() { "none".to_owned() } else { counts.join(", ") },
        projections.len(),
    );
    let requests = |cpu: Option<i64>, mem: Option<i64>| {
        let cpu = cpu.map_or("cpu not set".to_owned(), |m| format!("{m}m cpu"));
        let mem = mem.map_or("memory not set".to_owned(), |b| format!("{} MiB", b >> 20));
        format!("{cpu}, {mem}")
    };
    let retained: Vec<&&SessionProjection> =
        latest.values().filter(|p| p.retention_state == RetentionState::Retained).collect();
    for p in retained.iter().take(8) {
        let pod = p.pod.as_ref().map_or(String::new(), |i| format!("{}/{}", i.namespace, i.name));
        println!(
            "  RETAINED {:<22} owner {:<12} {:?} session, Pod {pod} {:?}: {}",
            p.session_id,
            p.owner,
            p.session_state,
            p.pod_phase.unwrap_or_default(),
            requests(p.main_container_requests.cpu_millicores, p.main_container_requests.memory_bytes),
        );
    }
    if retained.len() > 8 {
        println!("  … and {} more RETAINED", retained.len() - 8);
    }
    let mut owners: BTreeMap<&str, &OwnerRetainedCompute> = BTreeMap::new();
    for t in totals {
        owners.insert(&t.owner, t);
    }
    let holding: Vec<&&OwnerRetainedCompute> = owners.values().filter(|t| t.retained_sessions > 0).collect();
    println!(
        "retained compute per owner (retained-compute-by-owner.v1): {} owner(s) hold compute in stopped sessions",
        holding.len()
    );
    for t in holding {
        let unset = t.sessions_without_cpu_request.max(t.sessions_without_memory_request);
        println!(
            "  {:<14} {} session(s): {}m cpu, {} MiB{}",
            t.owner,
            t.retained_sessions,
            t.cpu_millicores,
            t.memory_bytes >> 20,
            if unset > 0 { format!(" (at least: {unset} without a request)") } else { String::new() },
        );
    }
}
