//! `kubefacts watch` and `kubefacts process` against a real Kubernetes control plane
//! (scripts/k8s/up.sh: kube-apiserver, kube-controller-manager, kube-scheduler v1.34.4, etcd,
//! kwok playing the kubelet) and the real broker. What the Job and CronJob controllers
//! record is the reference; nothing here is mocked (docs/K8S_TESTING.md).

mod support;

use std::collections::BTreeMap;

use kubefacts::{
    cleanup::{
        CleanupDecision,
        outcome::{CleanupOutcome, CleanupOutcomeKind},
    },
    journal::{ContainerExitCount, JobRun, JobRunWindowPart, OwnerKind, RunResult, WindowReader},
};
use support::k8s::{FinishedJob, Pipeline, cluster, cronjob, finished_jobs, job, wait_for};

/// The exits kwok's Stages give a pod of each kind (deploy/kwok/pod-complete*.yaml).
fn expected_exit(kind: &str) -> ContainerExitCount {
    let (code, reason) = match kind {
        "ok" => (0, "Completed"),
        "fail" => (1, "Error"),
        "oom" => (137, "OOMKilled"),
        _ => unreachable!(),
    };
    ContainerExitCount { container: "main".into(), exit_code: code, reason: Some(reason.into()), count: 1 }
}

/// Checks one fact against the Job the controller finished.
fn assert_matches(fact: &JobRun, job: &FinishedJob, kind: &str) {
    let context = format!("{job:?}\n{fact:?}");
    assert_eq!(fact.run_uid, job.uid, "{context}");
    assert_eq!(fact.run_name, job.name, "{context}");
    assert_eq!((fact.owner.kind, fact.owner.name.as_str()), (OwnerKind::Cronjob, kind), "{context}");
    let result = if job.condition == "Complete" { RunResult::Succeeded } else { RunResult::Failed };
    assert_eq!(fact.result, result, "{context}");
    if result == RunResult::Failed {
        assert_eq!(fact.failure_reason, job.reason, "the Job controller's reason: {context}");
    } else {
        assert_eq!(fact.failure_reason, None, "{context}");
    }
    assert_eq!((fact.succeeded_pods, fact.failed_pods), (job.succeeded, job.failed), "{context}");
    assert_eq!(fact.exits, [expected_exit(kind)], "{context}");
}

/// Facts by run UID; panics on a run filed twice.
fn by_uid(facts: Vec<JobRun>) -> BTreeMap<String, JobRun> {
    let mut out = BTreeMap::new();
    for f in facts {
        let uid = f.run_uid.clone();
        if let Some(before) = out.insert(uid.clone(), f) {
            panic!("run {uid} filed twice: {before:?}");
        }
    }
    out
}

/// Scenarios 1–3 of issue 11 on one cluster, in one pipeline (each CronJob tick is a minute):
/// the journal matches what the Job controller recorded, run for run, with the exit
/// breakdown; opt-out annotations on a namespace, a CronJob and a pod template exclude
/// exactly those workloads; a watcher killed while runs finish and restarted loses and
/// duplicates nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cronjob_runs_are_journaled_as_the_job_controller_recorded_them() {
    let c = cluster();
    let ns = c.namespace("runs", &[]);
    let opted_out_ns = c.namespace("optout", &[("kubefacts.io/exclude", "true")]);
    let opt_out = [("kubefacts.io/exclude", "true")];
    c.apply(&cronjob(&ns, "ok", None, &[], &[]));
    c.apply(&cronjob(&ns, "fail", Some("error"), &[], &[]));
    c.apply(&cronjob(&ns, "oom", Some("oomkilled"), &[], &[]));
    c.apply(&cronjob(&ns, "excluded-cronjob", None, &opt_out, &[]));
    c.apply(&cronjob(&ns, "excluded-template", None, &[], &opt_out));
    c.apply(&cronjob(&opted_out_ns, "excluded-namespace", None, &[], &[]));

    let mut p = Pipeline::new(&[&ns, &opted_out_ns], "");
    p.start_watcher("w1", None);
    p.start_processor();

    let kinds = ["ok", "fail", "oom"];
    let excluded = ["excluded-cronjob", "excluded-template"];
    // Every CronJob, excluded ones included, ran at least once, and every finished run of
    // the included ones has its fact.
    let journaled = async |p: &Pipeline, runs_per_kind: usize| {
        let jobs = finished_jobs(&p.cluster, &ns);
        let count = |owner: &str| jobs.iter().filter(|j| j.owner.as_deref() == Some(owner)).count();
        let others = finished_jobs(&p.cluster, &opted_out_ns);
        if kinds.iter().any(|k| count(k) < runs_per_kind)
            || excluded.iter().any(|k| count(k) == 0)
            || others.is_empty()
        {
            return None;
        }
        let facts = p.runs().await;
        let included: Vec<&FinishedJob> =
            jobs.iter().filter(|j| kinds.contains(&j.owner.as_deref().unwrap_or(""))).collect();
        included.iter().all(|j| facts.iter().any(|f| f.run_uid == j.uid)).then_some((jobs, facts))
    };
    let (jobs, facts) =
        wait_for(&p, 240, "a finished run of every CronJob, journaled", async || journaled(&p, 1).await)
            .await;
    let facts = by_uid(facts);
    for job in &jobs {
        let kind = job.owner.clone().unwrap();
        match facts.get(&job.uid) {
            Some(fact) => assert_matches(fact, job, &kind),
            None => assert!(excluded.contains(&kind.as_str()), "{job:?} has no fact\n{}", p.logs()),
        }
    }
    assert!(facts.values().all(|f| kinds.contains(&f.owner.name.as_str())), "{facts:#?}");
    // Excluded workloads never left the watcher: no observation of any topic names them.
    let inputs = ["jobs.v1", "pods.v1", "cronjobs.v1"].map(|t| tokio::task::block_in_place(|| p.read(t)));
    let mentions = |name: &str| {
        inputs.iter().flatten().filter(|(_, v)| v.windows(name.len()).any(|w| w == name.as_bytes())).count()
    };
    for name in excluded.iter().chain(&["excluded-namespace"]) {
        assert_eq!(mentions(name), 0, "{name} was published");
    }
    assert!(kinds.iter().all(|k| mentions(&format!("{k}-")) > 0), "the search finds what was published");

    // Scenario 2: SIGKILL the watcher, let runs finish while it is down, start another.
    let seen = jobs.len();
    p.kill_watcher();
    wait_for(&p, 150, "runs finishing while the watcher is down", async || {
        (finished_jobs(&p.cluster, &ns).len() >= seen + kinds.len()).then_some(())
    })
    .await;
    p.start_watcher("w2", None);
    let (jobs, facts) =
        wait_for(&p, 120, "the runs finished while down, journaled", async || journaled(&p, 2).await).await;
    let facts = by_uid(facts);
    for job in jobs.iter().filter(|j| kinds.contains(&j.owner.as_deref().unwrap_or(""))) {
        let fact = facts.get(&job.uid).unwrap_or_else(|| panic!("{job:?} lost\n{}", p.logs()));
        assert_matches(fact, job, job.owner.as_deref().unwrap());
    }

    // The windowed journal (job-runs.v2): every window rebuilt from its latest summary and
    // its pages holds exactly the runs filed, each as its fact says (CronJobs keep firing:
    // compare in a quiet moment).
    wait_for(&p, 90, "the journal's windows holding every filed run", async || {
        let mut reader = WindowReader::new();
        for part in p.decoded::<JobRunWindowPart>("job-runs.v2").await {
            reader.add(part);
        }
        let windows: Option<Vec<JobRun>> = reader
            .windows()
            .into_iter()
            .map(|w| w.ok().map(|w| w.runs))
            .collect::<Option<Vec<_>>>()
            .map(|w| w.concat());
        (by_uid(windows?) == by_uid(p.runs().await)).then_some(())
    })
    .await;
}

/// Scenario 4: `[runs]` decides finished Jobs; `kubefacts cleaner --apply` deletes them
/// through the API, except a Job deleted and re-created under the same name between the
/// decision and the apply, which the UID precondition protects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cleaner_deletes_decided_jobs_but_not_a_re_created_one() {
    let c = cluster();
    let ns = c.namespace("cleanup", &[]);
    c.apply(&job(&ns, "cleanme", None));
    c.apply(&job(&ns, "recreated", None));
    let mut p = Pipeline::new(&[&ns], "[cleanup]\njob_retention_secs = 5\ncleanup_period_secs = 5\n");
    p.start_watcher("w", None);
    p.start_processor();
    let uid_of =
        |name: &str| c.get(&["job", "-n", &ns, name])["metadata"]["uid"].as_str().unwrap().to_owned();
    let (cleanme, old) = (uid_of("cleanme"), uid_of("recreated"));
    let decisions = wait_for(&p, 120, "decisions for both Jobs", async || {
        let d: Vec<CleanupDecision> = p.decoded("cleanup-decisions.v1").await;
        [&cleanme, &old].iter().all(|u| d.iter().any(|d| &&d.job.uid == u)).then_some(d)
    })
    .await;
    assert!(decisions.iter().all(|d| d.job.namespace == ns && d.retention_secs == 5), "{decisions:#?}");

    // Between decision and apply: the same name, another Job (running, so never decided).
    c.kubectl(&["delete", "job", "-n", &ns, "recreated", "--wait=true"], None);
    c.apply(&job(&ns, "recreated", Some("600s")));
    let new = uid_of("recreated");
    assert_ne!(new, old);

    let _cleaner = p.start_cleaner(true);
    let outcomes = wait_for(&p, 90, "outcomes for both decisions", async || {
        let o: Vec<CleanupOutcome> = p.decoded("cleanup-outcomes.v1").await;
        [&cleanme, &old].iter().all(|u| o.iter().any(|o| &&o.job.uid == u)).then_some(o)
    })
    .await;
    let outcome = |uid: &str| outcomes.iter().find(|o| o.job.uid == uid).unwrap();
    assert_eq!(outcome(&cleanme).outcome, CleanupOutcomeKind::Deleted, "{outcomes:#?}");
    assert_eq!(outcome(&old).outcome, CleanupOutcomeKind::PreconditionFailed, "{outcomes:#?}");
    assert!(outcomes.iter().all(|o| !o.dry_run && o.job.uid != new), "{outcomes:#?}");
    wait_for(&p, 30, "cleanme gone from the API", async || {
        c.try_kubectl(&["get", "job", "-n", &ns, "cleanme"], None).is_err().then_some(())
    })
    .await;
    assert_eq!(uid_of("recreated"), new, "the re-created Job is left alone");
}

/// Scenario 6: the watcher under the service account `deploy/kubernetes/rbac.yaml` binds
/// (documented in docs/security.md §5) leads and publishes; the same account without the
/// `jobs` rule publishes no Job, and its log says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_rbac_is_enough_and_every_rule_of_it_is_needed() {
    let c = cluster();
    let rbac = std::fs::read_to_string(support::repo_path("deploy/kubernetes/rbac.yaml")).unwrap();
    c.apply(&rbac);
    let ns = c.namespace("rbac", &[]);
    let token =
        c.kubectl(&["create", "token", "kubefacts-watcher", "-n", "kubefacts", "--duration=1h"], None);
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: k\n  cluster:\n    server: {}\n    \
             certificate-authority: {}\nusers:\n- name: sa\n  user:\n    token: {}\ncontexts:\n- name: k\n  \
             context:\n    cluster: k\n    user: sa\ncurrent-context: k\n",
            c.server,
            c.ca.display(),
            token.trim()
        ),
    )
    .unwrap();
    // The Role for the leader Lease is in `kubefacts`: the watcher's Lease lives there.
    let mut p = Pipeline::new(&["kubefacts", &ns], "");
    let published = |p: &Pipeline, topic: &str, name: &str| {
        tokio::task::block_in_place(|| p.read(topic))
            .iter()
            .any(|(_, v)| v.windows(name.len()).any(|w| w == name.as_bytes()))
    };

    p.start_watcher("sa-1", Some(&kubeconfig));
    c.apply(&job(&ns, "allowed", None));
    wait_for(
        &p,
        90,
        "the Job and the controller manager's Lease observed under the service account",
        async || {
            (published(&p, "jobs.v1", "allowed") && published(&p, "leases.v1", "kube-controller-manager"))
                .then_some(())
        },
    )
    .await;
    let lease = c.get(&["lease", "-n", "kubefacts", "kubefacts-watcher"]);
    assert_eq!(lease["spec"]["holderIdentity"], "sa-1", "it leads: {lease}");
    p.kill_watcher();

    // Without the `jobs` rule, a new watcher sees no Job.
    let mut role = c.get(&["clusterrole", "kubefacts-watcher"]);
    let rules = role["rules"].as_array_mut().unwrap();
    let batch = rules.iter_mut().find(|r| r["apiGroups"][0] == "batch").expect("a batch rule");
    batch["resources"] = serde_json::json!(["cronjobs"]);
    c.kubectl(&["replace", "-f", "-"], Some(&role.to_string()));
    let leases_before = tokio::task::block_in_place(|| p.read("leases.v1")).len();
    p.start_watcher("sa-2", Some(&kubeconfig));
    c.apply(&job(&ns, "forbidden", None));
    let log = p.dir.path().join("watch-sa-2.log");
    wait_for(&p, 60, "the new watcher saying Jobs are forbidden, while it publishes Leases", async || {
        let said = std::fs::read_to_string(&log).unwrap_or_default().contains("forbidden");
        let leases = tokio::task::block_in_place(|| p.read("leases.v1")).len();
        (said && leases > leases_before + 5).then_some(())
    })
    .await;
    assert!(!published(&p, "jobs.v1", "forbidden"), "a Job was published without the jobs rule");
    p.kill_watcher();
    c.apply(&rbac);
}
