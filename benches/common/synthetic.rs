//! A synthetic recorded cluster for the benchmarks: namespaces, CronJobs, and per Job three
//! Job updates and two Pods with three updates each, real-shaped (env, args, messages
//! included) — what the API sends a watcher.

use kubefacts::trace::{self, MinimalEntry};
use serde_json::{Value, json};

/// Namespaces in the synthetic cluster.
pub const NAMESPACES: usize = 10;
/// CronJobs in the synthetic cluster (Jobs are spread over them).
pub const CRONJOBS: usize = 500;

pub fn uid(kind: u32, n: usize) -> String {
    format!("{kind:08x}-0000-4000-8000-{n:012}")
}

pub fn entry(at: i64, ty: &str, object: Value) -> MinimalEntry {
    trace::parse_value(0, json!({"type": ty, "observed_at": at, "object": object}))
        .remove(0)
        .expect("valid entry")
}

/// A cluster's watch events: namespaces, CronJobs, and per Job three Job updates and two
/// Pods with three updates each — the shapes (env, args, messages included) the API sends.
pub fn synthetic_trace(jobs: usize) -> Vec<MinimalEntry> {
    let t0 = 1_795_946_400_000i64;
    let mut out = Vec::with_capacity(jobs * 9 + NAMESPACES + CRONJOBS);
    for n in 0..NAMESPACES {
        let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": format!("ns-{n}"), "uid": uid(1, n)}});
        out.push(entry(t0, "ADDED", ns));
    }
    for c in 0..CRONJOBS {
        let cj = json!({"apiVersion": "batch/v1", "kind": "CronJob",
            "metadata": {"name": format!("cron-{c}"), "namespace": format!("ns-{}", c % NAMESPACES), "uid": uid(2, c)},
            "spec": {"schedule": "*/5 * * * *", "jobTemplate": {"spec": {"template": {"spec": {"containers": []}}}}}});
        out.push(entry(t0, "ADDED", cj));
    }
    for j in 0..jobs {
        let (c, at) = (j % CRONJOBS, t0 + 1_000 + j as i64 * 10);
        let ns = format!("ns-{}", c % NAMESPACES);
        let container = json!({"name": "main", "image": "registry.example.com/etl:1.2.3",
            "command": ["/bin/sh", "-c", "run-etl --all"], "args": ["--token=abcdef0123456789"],
            "env": [{"name": "DB_PASSWORD", "value": "hunter2"}, {"name": "MODE", "value": "batch"}],
            "resources": {"requests": {"cpu": "500m", "memory": "256Mi"}, "limits": {"memory": "512Mi"}}});
        let job = |status: Value| {
            json!({"apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"name": format!("cron-{c}-{j}"), "namespace": ns, "uid": uid(3, j),
                    "labels": {"app": "etl"}, "ownerReferences": [{"apiVersion": "batch/v1", "kind": "CronJob",
                    "name": format!("cron-{c}"), "uid": uid(2, c), "controller": true}]},
                "spec": {"parallelism": 1, "completions": 1, "backoffLimit": 3,
                    "template": {"spec": {"restartPolicy": "Never", "containers": [container]}}},
                "status": status})
        };
        out.push(entry(at, "ADDED", job(json!({}))));
        out.push(entry(at + 1, "MODIFIED", job(json!({"startTime": "2026-11-29T10:00:00Z", "active": 1}))));
        for p in 0..2 {
            let pod = |phase: &str, state: Value| {
                json!({"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": format!("cron-{c}-{j}-{p}"), "namespace": ns, "uid": uid(4, j * 2 + p),
                        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": format!("cron-{c}-{j}"),
                        "uid": uid(3, j), "controller": true}]},
                    "spec": {"restartPolicy": "Never", "containers": [container]},
                    "status": {"phase": phase, "message": "free text never shipped",
                        "containerStatuses": [{"name": "main", "ready": false, "restartCount": p, "image": "x",
                        "imageID": "", "state": state}]}})
            };
            out.push(entry(
                at + 2,
                "ADDED",
                pod("Pending", json!({"waiting": {"reason": "ContainerCreating"}})),
            ));
            out.push(entry(
                at + 3,
                "MODIFIED",
                pod("Running", json!({"running": {"startedAt": "2026-11-29T10:00:01Z"}})),
            ));
            let done = json!({"terminated": {"exitCode": p, "reason": if p == 0 { "Completed" } else { "Error" },
                "message": "stack trace never shipped", "startedAt": "2026-11-29T10:00:01Z", "finishedAt": "2026-11-29T10:00:59Z"}});
            out.push(entry(at + 4, "MODIFIED", pod(if p == 0 { "Succeeded" } else { "Failed" }, done)));
        }
        out.push(entry(
            at + 5,
            "MODIFIED",
            job(json!({"startTime": "2026-11-29T10:00:00Z",
            "completionTime": "2026-11-29T10:01:00Z", "succeeded": 1, "failed": 1,
            "conditions": [{"type": "Complete", "status": "True", "reason": "Completed",
                "lastTransitionTime": "2026-11-29T10:01:00Z", "message": "never shipped"}]})),
        ));
    }
    out
}
