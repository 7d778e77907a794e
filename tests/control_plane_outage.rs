//! Scenario 5 of issue 11, in a test binary of its own because it stops the shared
//! control plane's kube-controller-manager (cargo runs test binaries one after another):
//! a CronJob that misses its schedule because the controller manager is down goes
//! MANAGER_STOPPED, not FIRING, and coverage resumes once the manager is back.

mod support;

use kubefacts::coverage::{CoverageAlert, CoverageState};
use support::k8s::{Pipeline, cluster, cronjob, wait_for};

/// Starts kube-controller-manager when dropped (without panicking: it may run while a
/// failed assertion unwinds).
struct StartOnDrop<'a>(&'a support::k8s::Cluster);

impl Drop for StartOnDrop<'_> {
    fn drop(&mut self) {
        let started =
            std::process::Command::new(&self.0.ctl).args(["start", "kube-controller-manager"]).status();
        if !started.as_ref().is_ok_and(|s| s.success()) {
            eprintln!("could not start kube-controller-manager again: {started:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cronjob_overdue_while_the_controller_manager_is_stopped_is_manager_stopped_not_firing() {
    let c = cluster();
    let ns = c.namespace("outage", &[]);
    c.apply(&cronjob(&ns, "every-minute", None, &[], &[]));
    // Overdue 20 s after a missed fire time, FIRING 60 s later: the 130 s outage below (plus
    // the ~18 s the restarted manager waits for its old Lease) is long enough to fire if the
    // stopped manager were not told apart.
    let rules = "[coverage]\nevaluate_interval_ms = 2000\n\n[[coverage.rules]]\n\
                 manager_lease = \"kube-system/kube-controller-manager\"\nfor_ms = 60000\nslack_ms = 20000\n";
    let mut p = Pipeline::new(&[&ns], rules);
    p.start_watcher("w", None);
    p.start_processor();
    let alerts = async |p: &Pipeline| -> Vec<CoverageAlert> { p.decoded("coverage-alerts.v1").await };
    wait_for(&p, 150, "the CronJob's first run journaled and judged OK", async || {
        let ran = !p.runs().await.is_empty();
        let ok = alerts(&p).await.iter().any(|a| a.state == CoverageState::Ok);
        (ran && ok).then_some(())
    })
    .await;

    c.ctl("stop", "kube-controller-manager");
    // Started again however this test ends: a failure must not leave the shared control
    // plane without its controllers.
    let mut down = Some(StartOnDrop(&c));
    let stopped = std::time::Instant::now();
    let manager_stopped =
        wait_for(&p, 150, "MANAGER_STOPPED while the controller manager is down", async || {
            alerts(&p).await.into_iter().find(|a| a.state == CoverageState::ManagerStopped)
        })
        .await;
    assert_eq!(manager_stopped.manager_lease, "kube-system/kube-controller-manager");
    let remaining = std::time::Duration::from_secs(130).saturating_sub(stopped.elapsed());
    tokio::time::sleep(remaining).await;
    drop(down.take()); // starts it again

    // The manager takes its Lease back and starts the missed run: coverage resumes.
    let history = wait_for(&p, 180, "coverage OK again after the restart", async || {
        let all = alerts(&p).await;
        let after = all.iter().position(|a| a.state == CoverageState::ManagerStopped)?;
        all[after..].iter().any(|a| a.state == CoverageState::Ok).then_some(all)
    })
    .await;
    let states: Vec<CoverageState> = history.iter().map(|a| a.state).collect();
    assert!(
        !states.contains(&CoverageState::Firing),
        "a stopped manager must not fire: {states:?}\n{}",
        p.logs()
    );
}
