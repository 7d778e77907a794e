//! The summary for people: what `kubefacts demo` prints after its own figures, and what
//! `kubefacts report` prints by default. Lists are cut to their first few; `--format json`
//! carries them whole.

use super::summary::{CleanupSummary, CoverageSummary, RunsSummary, SessionsSummary, Summary, Window};

/// Failing owners shown.
const FAILING_SHOWN: usize = 5;
/// Decisions shown.
const DECISIONS_SHOWN: usize = 5;
/// RETAINED sessions shown.
const RETAINED_SHOWN: usize = 8;
/// Excused CronJobs named as examples.
const EXCUSED_NAMED: usize = 3;

/// Prints every section of `summary`.
pub(crate) fn print(summary: &Summary) {
    print_runs(&summary.runs);
    print_decisions(&summary.cleanup);
    print_coverage(&summary.coverage);
    print_sessions(&summary.sessions);
}

/// Runs per journal window, the CronJobs that fail most with their exit breakdown, and —
/// for a short hand-written trace — every run.
fn print_runs(runs: &RunsSummary) {
    println!("\nfinished runs per journal window (job-runs; summary + pages, rebuilt as a consumer does):");
    println!(
        "  {:<22} {:>7} {:>9} {:>7} {:>6}  state",
        "window start", "runs", "succeeded", "failed", "pages"
    );
    for w in &runs.windows {
        match w {
            Window::Incomplete { error } => println!("  cannot rebuild: {error}"),
            Window::Rebuilt(w) => println!(
                "  {:<22} {:>7} {:>9} {:>7} {:>6}  {}, revision {}",
                w.window_start,
                w.runs,
                w.succeeded,
                w.failed,
                w.pages,
                if w.is_final { "final" } else { "open" },
                w.revision
            ),
        }
    }
    println!("{} runs filed (job-run-facts), {} failed", runs.filed, runs.failed);

    println!("\ntop failing CronJobs and Jobs (failed runs, reasons, non-zero container exits):");
    if runs.failing.is_empty() {
        println!("  none failed");
    }
    for f in runs.failing.iter().take(FAILING_SHOWN) {
        let reasons: Vec<String> = f.reasons.iter().map(|(r, n)| format!("{n}×{r}")).collect();
        let exits: Vec<String> =
            f.exits.iter().map(|e| format!("{}×{}/{}", e.count, e.exit_code, e.reason)).collect();
        println!(
            "  {:<36} {:>4}/{:<4} runs failed  {:<40} exits {}",
            format!("{}/{}", f.namespace, f.name),
            f.failed,
            f.runs,
            if reasons.is_empty() { "-".to_owned() } else { reasons.join(", ") },
            if exits.is_empty() { "none".to_owned() } else { exits.join(", ") }
        );
    }
    if let Some(every) = &runs.every_run {
        println!("\nevery run:");
        for r in every {
            let exits: Vec<String> =
                r.exits.iter().map(|e| format!("{}×{}/{}", e.count, e.exit_code, e.reason)).collect();
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
fn print_decisions(cleanup: &CleanupSummary) {
    println!(
        "\ncleanup decisions (retention {} s unless the Job's TTL is shorter; `kubefacts cleaner --apply` deletes): {} decided, {} by the Job's own TTL, {} by the default retention",
        cleanup.job_retention_secs, cleanup.decided, cleanup.by_job_ttl, cleanup.by_default_retention
    );
    if cleanup.decisions.is_empty() {
        println!("  none: no finished Job outlived its retention in this trace");
    }
    for d in cleanup.decisions.iter().take(DECISIONS_SHOWN) {
        println!(
            "  {:<36} finished {}, retention {} s ({:?}), decided at {} (sweep {})",
            format!("{}/{}", d.namespace, d.name),
            d.finished_at,
            d.retention_secs,
            d.retention_source,
            d.decided_at,
            d.sweep
        );
    }
    if cleanup.decisions.len() > DECISIONS_SHOWN {
        println!("  … and {} more in cleanup-decisions.v1", cleanup.decisions.len() - DECISIONS_SHOWN);
    }
}

/// Lease coverage: the manager's gaps, the state changes, what fired and what a stopped
/// control plane excused.
fn print_coverage(coverage: &CoverageSummary) {
    let counts: Vec<String> = coverage.entered.iter().map(|(s, n)| format!("{n} {s}")).collect();
    println!(
        "\nlease coverage (coverage-alerts.v1, docs/COVERAGE.md): {} state changes of {} CronJobs ({})",
        coverage.state_changes,
        coverage.cronjobs,
        if counts.is_empty() { "none".to_owned() } else { counts.join(", ") }
    );
    for g in &coverage.gaps {
        println!("  {} not covered {} → {} ({} s)", g.lease, g.started_at, g.ended_at, g.secs);
    }
    for f in &coverage.fired {
        println!(
            "  FIRED  {:<36} expected by {}, pending since {}, firing at {}, now {}",
            format!("{}/{}", f.subject.namespace, f.subject.name),
            f.expected_by.as_deref().unwrap_or_default(),
            f.pending_since.as_deref().unwrap_or_default(),
            f.fired_at,
            f.state_now.as_str(),
        );
    }
    if !coverage.excused.is_empty() {
        let examples: Vec<String> = coverage
            .excused
            .iter()
            .take(EXCUSED_NAMED)
            .map(|s| format!("{}/{}", s.namespace, s.name))
            .collect();
        println!(
            "  {} CronJobs were overdue only while the manager was stopped: MANAGER_STOPPED, never fired (e.g. {})",
            coverage.excused.len(),
            examples.join(", ")
        );
    }
}

/// Session projections: the latest projection of each session by retention state, the
/// sessions that still hold compute, and what each owner's stopped sessions hold.
fn print_sessions(sessions: &SessionsSummary) {
    let counts: Vec<String> =
        sessions.by_retention_state.iter().map(|(s, n)| format!("{n} {}", s.as_str())).collect();
    println!(
        "\nsession projections (session-projections.v1, docs/SESSIONS.md): {} sessions ({}); {} projections; {} foreign Pod(s) carried a session's label and supplied nothing",
        sessions.sessions,
        if counts.is_empty() { "none".to_owned() } else { counts.join(", ") },
        sessions.projections,
        sessions.foreign_pods_seen,
    );
    let requests = |cpu: Option<i64>, mem: Option<i64>| {
        let cpu = cpu.map_or("cpu not set".to_owned(), |m| format!("{m}m cpu"));
        let mem = mem.map_or("memory not set".to_owned(), |b| format!("{} MiB", b >> 20));
        format!("{cpu}, {mem}")
    };
    for s in sessions.retained.iter().take(RETAINED_SHOWN) {
        println!(
            "  RETAINED {:<22} owner {:<12} {:?} session, Pod {} {:?}: {}",
            s.session_id,
            s.owner,
            s.session_state,
            s.pod.as_deref().unwrap_or_default(),
            s.pod_phase.unwrap_or_default(),
            requests(s.cpu_millicores, s.memory_bytes),
        );
    }
    if sessions.retained.len() > RETAINED_SHOWN {
        println!("  … and {} more RETAINED", sessions.retained.len() - RETAINED_SHOWN);
    }
    println!(
        "retained compute per owner (retained-compute-by-owner.v1): {} owner(s) hold compute in stopped sessions",
        sessions.owners_holding_compute.len()
    );
    for t in &sessions.owners_holding_compute {
        println!(
            "  {:<14} {} session(s): {}m cpu, {} MiB{}",
            t.owner,
            t.retained_sessions,
            t.cpu_millicores,
            t.memory_bytes >> 20,
            if t.sessions_without_request > 0 {
                format!(" (at least: {} without a request)", t.sessions_without_request)
            } else {
                String::new()
            },
        );
    }
}
