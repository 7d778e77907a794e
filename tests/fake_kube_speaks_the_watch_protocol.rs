//! `FakeKube` speaks the apiserver's list/watch protocol well enough for kube 5: `Api` lists
//! (paginated, consistent), `watcher` init/apply/delete, relists after `410 Expired`,
//! resumes after a closed watch, streaming lists, selectors, lease optimistic concurrency,
//! and `503` while down. No Kafka needed.

mod support;

use std::{fmt::Debug, pin::pin, time::Duration};

use futures::{Stream, StreamExt};
use k8s_openapi::api::{
    batch::v1::{CronJob, Job},
    coordination::v1::Lease,
    core::v1::{ConfigMap, Namespace, Pod},
};
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, ListParams, PostParams, WatchEvent, WatchParams},
    runtime::watcher::{self, Event},
};
use serde_json::{Value, json};
use support::fake_kube::FakeKube;

/// How long any single step may take before the test fails instead of hanging.
const STEP: Duration = Duration::from_secs(5);

// ---------------------------------------------------------------------------------------
// Real-shaped objects

fn job(namespace: &str, name: &str, app: &str) -> Value {
    json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": { "app": app },
            "annotations": { "batch.kubernetes.io/job-tracking": "" }
        },
        "spec": {
            "parallelism": 1,
            "completions": 1,
            "backoffLimit": 6,
            "completionMode": "NonIndexed",
            "suspend": false,
            "podReplacementPolicy": "TerminatingOrFailed",
            "template": {
                "metadata": { "labels": { "app": app, "job-name": name } },
                "spec": {
                    "containers": [{
                        "name": "main",
                        "image": "busybox:1.36",
                        "command": ["sh", "-c", "exit 0"],
                        "resources": {},
                        "terminationMessagePath": "/dev/termination-log",
                        "terminationMessagePolicy": "File",
                        "imagePullPolicy": "IfNotPresent"
                    }],
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 30,
                    "dnsPolicy": "ClusterFirst",
                    "securityContext": {},
                    "schedulerName": "default-scheduler"
                }
            }
        },
        "status": {
            "startTime": "2025-06-01T02:00:00Z",
            "active": 1,
            "ready": 0,
            "terminating": 0,
            "uncountedTerminatedPods": {}
        }
    })
}

fn pod(namespace: &str, name: &str, node: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": { "name": name, "namespace": namespace, "labels": { "app": "web" } },
        "spec": {
            "nodeName": node,
            "restartPolicy": "Always",
            "schedulerName": "default-scheduler",
            "serviceAccountName": "default",
            "containers": [{ "name": "web", "image": "nginx:1.27", "resources": {} }]
        },
        "status": { "phase": "Running", "podIP": "10.244.0.7", "qosClass": "BestEffort" }
    })
}

fn cron_job(namespace: &str, name: &str) -> Value {
    json!({
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": { "name": name, "namespace": namespace },
        "spec": {
            "schedule": "0 2 * * *",
            "concurrencyPolicy": "Forbid",
            "successfulJobsHistoryLimit": 3,
            "failedJobsHistoryLimit": 1,
            "suspend": false,
            "jobTemplate": { "spec": { "template": { "spec": {
                "containers": [{ "name": "main", "image": "busybox:1.36" }],
                "restartPolicy": "OnFailure"
            } } } }
        },
        "status": {}
    })
}

fn namespace(name: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": { "name": name, "labels": { "kubernetes.io/metadata.name": name } },
        "spec": { "finalizers": ["kubernetes"] },
        "status": { "phase": "Active" }
    })
}

fn lease(namespace: &str, name: &str, holder: &str) -> Lease {
    serde_json::from_value(json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": { "name": name, "namespace": namespace },
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": 15,
            "acquireTime": "2025-06-01T02:00:00.000000Z",
            "renewTime": "2025-06-01T02:00:00.000000Z",
            "leaseTransitions": 0
        }
    }))
    .expect("a valid Lease")
}

// ---------------------------------------------------------------------------------------
// Helpers

/// The next watcher item, failing the test after [`STEP`] or if the stream ends.
async fn next<K, S>(stream: &mut S) -> Result<Event<K>, watcher::Error>
where
    S: Stream<Item = Result<Event<K>, watcher::Error>> + Unpin,
{
    tokio::time::timeout(STEP, stream.next())
        .await
        .expect("no watcher event within 5 s")
        .expect("the watcher stream ended")
}

/// The next `n` watcher events, described as `"Init"`, `"InitApply ns/name"`, ….
async fn events<K, S>(stream: &mut S, n: usize) -> Vec<String>
where
    K: kube::Resource + Debug,
    S: Stream<Item = Result<Event<K>, watcher::Error>> + Unpin,
{
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        match next(stream).await {
            Ok(event) => out.push(describe(&event)),
            Err(e) => panic!("watcher error after {out:?}: {e}"),
        }
    }
    out
}

fn describe<K: kube::Resource>(event: &Event<K>) -> String {
    let id = |k: &K| format!("{}/{}", k.namespace().unwrap_or_default(), k.name_any());
    match event {
        Event::Init => "Init".to_string(),
        Event::InitApply(k) => format!("InitApply {}", id(k)),
        Event::InitDone => "InitDone".to_string(),
        Event::Apply(k) => format!("Apply {}", id(k)),
        Event::Delete(k) => format!("Delete {}", id(k)),
    }
}

fn api_error_code<T: Debug>(result: Result<T, kube::Error>) -> (u16, String) {
    match result {
        Err(kube::Error::Api(status)) => (status.code, status.reason.clone()),
        other => panic!("expected an API error Status, got {other:?}"),
    }
}

async fn with_timeout<F: Future>(what: &str, fut: F) -> F::Output {
    tokio::time::timeout(STEP, fut).await.unwrap_or_else(|_| panic!("{what} took more than 5 s"))
}

fn is_uuid_v4(s: &str) -> bool {
    let groups: Vec<&str> = s.split('-').collect();
    groups.iter().map(|g| g.len()).collect::<Vec<_>>() == [8, 4, 4, 4, 12]
        && s.chars().all(|c| c == '-' || c.is_ascii_digit() || ('a'..='f').contains(&c))
        && groups[2].starts_with('4')
        && groups[3].starts_with(['8', '9', 'a', 'b'])
}

fn names<K: ResourceExt>(items: &[K]) -> Vec<String> {
    items.iter().map(ResourceExt::name_any).collect()
}

// ---------------------------------------------------------------------------------------
// Lists

#[tokio::test]
async fn list_returns_applied_objects_and_pages_through_a_consistent_snapshot() {
    let fake = FakeKube::start().await;
    for name in ["e", "a", "d", "b", "c"] {
        fake.apply(job("team-a", name, "nightly"));
    }
    fake.apply(job("team-b", "other", "nightly"));
    let client = fake.client();
    let jobs: Api<Job> = Api::namespaced(client.clone(), "team-a");

    let all = with_timeout("list", jobs.list(&ListParams::default())).await.expect("list");
    assert_eq!(names(&all.items), ["a", "b", "c", "d", "e"], "sorted by name, only team-a");
    assert_eq!(all.metadata.resource_version.as_deref(), Some(fake.resource_version().as_str()));
    assert!(all.metadata.continue_.is_none());
    for j in &all.items {
        assert!(is_uuid_v4(j.metadata.uid.as_deref().unwrap_or("")), "uid {:?}", j.metadata.uid);
        assert!(j.metadata.resource_version.as_deref().is_some_and(|rv| rv.parse::<u64>().is_ok()));
        assert!(j.metadata.creation_timestamp.is_some());
        assert_eq!(j.metadata.generation, Some(1));
    }
    let uids: std::collections::BTreeSet<_> = all.items.iter().map(|j| j.metadata.uid.clone()).collect();
    assert_eq!(uids.len(), 5, "uids are unique");

    let everywhere: Api<Job> = Api::all(client);
    let every = with_timeout("list all", everywhere.list(&ListParams::default())).await.expect("list all");
    assert_eq!(names(&every.items), ["a", "b", "c", "d", "e", "other"]);

    // Pages of two; writes between pages must not show (the token pins the snapshot).
    let lists_before = fake.lists("jobs");
    let mut paged = Vec::new();
    let mut pages = 0;
    let mut lp = ListParams::default().limit(2);
    loop {
        let page = with_timeout("list page", jobs.list(&lp)).await.expect("list page");
        pages += 1;
        assert!(page.items.len() <= 2, "page of {} items", page.items.len());
        assert_eq!(page.metadata.resource_version, all.metadata.resource_version, "one snapshot");
        paged.extend(names(&page.items));
        if pages == 1 {
            assert_eq!(page.metadata.remaining_item_count, Some(3));
            fake.apply(job("team-a", "cc-late", "nightly"));
            let _ = fake.delete("Job", Some("team-a"), "e").expect("e existed");
        }
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => lp = ListParams::default().limit(2).continue_token(&token),
            _ => break,
        }
    }
    assert_eq!(pages, 3);
    assert_eq!(paged, ["a", "b", "c", "d", "e"]);
    assert_eq!(fake.lists("jobs") - lists_before, 3, "one LIST request per page");

    let fresh = with_timeout("list", jobs.list(&ListParams::default())).await.expect("list");
    assert_eq!(names(&fresh.items), ["a", "b", "c", "cc-late", "d"]);
}

#[tokio::test]
async fn every_resource_is_served_at_its_real_paths() {
    let fake = FakeKube::start().await;
    fake.apply(namespace("team-a"));
    fake.apply(pod("team-a", "web-0", "node-1"));
    fake.apply(job("team-a", "nightly", "nightly"));
    fake.apply(cron_job("team-a", "nightly"));
    let client = fake.client();

    let ns =
        with_timeout("get ns", Api::<Namespace>::all(client.clone()).get("team-a")).await.expect("get ns");
    assert_eq!(ns.metadata.namespace, None, "namespaces are cluster-scoped");
    assert_eq!(ns.status.and_then(|s| s.phase).as_deref(), Some("Active"));

    let pods =
        with_timeout("pods", Api::<Pod>::all(client.clone()).list(&ListParams::default())).await.unwrap();
    assert_eq!(names(&pods.items), ["web-0"]);
    let pod = Api::<Pod>::namespaced(client.clone(), "team-a").get("web-0").await.expect("get pod");
    assert_eq!(pod.spec.and_then(|s| s.node_name).as_deref(), Some("node-1"));

    let crons =
        Api::<CronJob>::namespaced(client.clone(), "team-a").list(&ListParams::default()).await.unwrap();
    assert_eq!(names(&crons.items), ["nightly"]);
    let none =
        Api::<CronJob>::namespaced(client.clone(), "team-b").list(&ListParams::default()).await.unwrap();
    assert!(none.items.is_empty());
    let job = Api::<Job>::namespaced(client.clone(), "team-a").get("nightly").await.expect("get job");
    assert_eq!(job.spec.and_then(|s| s.backoff_limit), Some(6));

    let missing = Api::<Job>::namespaced(client.clone(), "team-a").get("nope").await;
    assert_eq!(api_error_code(missing), (404, "NotFound".to_string()));
    let unserved = Api::<ConfigMap>::all(client.clone()).list(&ListParams::default()).await;
    assert_eq!(api_error_code(unserved), (404, "NotFound".to_string()));

    let version = with_timeout("version", client.apiserver_version()).await.expect("version");
    assert_eq!((version.major.as_str(), version.minor.as_str()), ("1", "34"));

    assert_eq!(fake.lists("pods"), 1);
    assert_eq!(fake.lists("cronjobs"), 2);
    assert_eq!(fake.watches("pods"), 0);
}

#[tokio::test]
async fn selectors_filter_lists_and_watches() {
    let fake = FakeKube::start().await;
    fake.apply(job("team-a", "n1", "nightly"));
    fake.apply(job("team-a", "n2", "nightly"));
    fake.apply(job("team-a", "h1", "hourly"));
    let jobs: Api<Job> = Api::namespaced(fake.client(), "team-a");

    let nightly = jobs.list(&ListParams::default().labels("app=nightly")).await.expect("label list");
    assert_eq!(names(&nightly.items), ["n1", "n2"]);
    let not_nightly = jobs.list(&ListParams::default().labels("app!=nightly")).await.expect("label list");
    assert_eq!(names(&not_nightly.items), ["h1"]);
    let set = jobs.list(&ListParams::default().labels("app in (hourly, weekly),!missing")).await.unwrap();
    assert_eq!(names(&set.items), ["h1"]);
    let by_name = jobs.list(&ListParams::default().fields("metadata.name=n2")).await.expect("field list");
    assert_eq!(names(&by_name.items), ["n2"]);
    let unsupported = jobs.list(&ListParams::default().fields("spec.parallelism=1")).await;
    assert_eq!(api_error_code(unsupported), (400, "BadRequest".to_string()));

    let mut stream = pin!(watcher(jobs.clone(), watcher::Config::default().labels("app=nightly")));
    let init = events(&mut stream, 4).await;
    assert_eq!(init, ["Init", "InitApply team-a/n1", "InitApply team-a/n2", "InitDone"]);

    // Leaving the selection is a deletion for this watch; entering it an addition.
    fake.apply(job("team-a", "n1", "hourly"));
    fake.apply(job("team-a", "h1", "nightly"));
    fake.apply(job("team-a", "h2", "hourly"));
    fake.apply(job("team-a", "n3", "nightly"));
    assert_eq!(events(&mut stream, 3).await, ["Delete team-a/n1", "Apply team-a/h1", "Apply team-a/n3"]);
}

// ---------------------------------------------------------------------------------------
// Watches

fn watcher(api: Api<Job>, config: watcher::Config) -> impl Stream<Item = watcher::Result<Event<Job>>> + Send {
    watcher::watcher(api, config)
}

#[tokio::test]
async fn watcher_sees_the_initial_list_then_live_applies_and_deletes() {
    let fake = FakeKube::start().await;
    fake.apply(job("team-a", "b", "nightly"));
    fake.apply(job("team-a", "a", "nightly"));
    let jobs: Api<Job> = Api::namespaced(fake.client(), "team-a");
    let mut stream = pin!(watcher(jobs, watcher::Config::default()));

    assert_eq!(
        events(&mut stream, 4).await,
        ["Init", "InitApply team-a/a", "InitApply team-a/b", "InitDone"]
    );

    let mut finished = job("team-a", "a", "nightly");
    finished["status"] = json!({ "succeeded": 1, "completionTime": "2025-06-01T02:01:00Z" });
    let stored = fake.apply(finished.clone());
    assert_eq!(fake.apply(finished), stored, "an identical apply is a no-op: same version, no event");
    fake.apply(job("team-b", "elsewhere", "nightly"));
    fake.apply(job("team-a", "c", "nightly"));
    let deleted = fake.delete("Job", Some("team-a"), "b").expect("b existed");

    match next(&mut stream).await.expect("apply event") {
        Event::Apply(j) => {
            assert_eq!(j.name_any(), "a");
            assert_eq!(
                j.metadata.resource_version,
                stored["metadata"]["resourceVersion"].as_str().map(Into::into)
            );
            assert_eq!(j.status.and_then(|s| s.succeeded), Some(1));
            assert_eq!(j.metadata.generation, Some(1), "a status change keeps the generation");
        }
        other => panic!("expected Apply a, got {}", describe(&other)),
    }
    assert_eq!(events(&mut stream, 1).await, ["Apply team-a/c"], "the team-b job is not in this watch");
    match next(&mut stream).await.expect("delete event") {
        Event::Delete(j) => {
            assert_eq!(j.name_any(), "b");
            let rv = deleted["metadata"]["resourceVersion"].as_str().map(Into::into);
            assert_eq!(j.metadata.resource_version, rv, "DELETED carries the deletion's version");
            assert_eq!(rv.as_deref(), Some(fake.resource_version().as_str()));
        }
        other => panic!("expected Delete b, got {}", describe(&other)),
    }
    assert_eq!((fake.lists("jobs"), fake.watches("jobs")), (1, 1));
    assert_eq!(fake.open_watches(), 1);
}

#[tokio::test]
async fn expired_watch_makes_the_watcher_relist() {
    let fake = FakeKube::start().await;
    fake.apply(job("team-a", "a", "nightly"));
    fake.apply(job("team-a", "b", "nightly"));
    let jobs: Api<Job> = Api::namespaced(fake.client(), "team-a");
    let mut stream = pin!(watcher(jobs, watcher::Config::default()));
    assert_eq!(
        events(&mut stream, 4).await,
        ["Init", "InitApply team-a/a", "InitApply team-a/b", "InitDone"]
    );
    fake.apply(job("team-a", "c", "nightly"));
    assert_eq!(events(&mut stream, 1).await, ["Apply team-a/c"], "the watch is open");

    fake.expire_watches();
    assert_eq!(fake.open_watches(), 0);
    // Deleted while the watcher is out of its window: it must not come back from the relist.
    let _ = fake.delete("Job", Some("team-a"), "b").expect("b existed");

    match next(&mut stream).await {
        Err(watcher::Error::WatchError(status)) => {
            assert_eq!((status.code, status.reason.as_str()), (410, "Expired"));
        }
        other => panic!("expected the 410 watch error, got {other:?}"),
    }
    assert_eq!(
        events(&mut stream, 4).await,
        ["Init", "InitApply team-a/a", "InitApply team-a/c", "InitDone"]
    );
    assert_eq!(fake.lists("jobs"), 2, "one relist");

    fake.apply(job("team-a", "d", "nightly"));
    assert_eq!(events(&mut stream, 1).await, ["Apply team-a/d"], "watching again after the relist");
    assert_eq!(fake.watches("jobs"), 2);
}

#[tokio::test]
async fn closed_watch_resumes_from_its_version_without_relisting() {
    let fake = FakeKube::start().await;
    fake.apply(job("team-a", "a", "nightly"));
    let jobs: Api<Job> = Api::namespaced(fake.client(), "team-a");
    let mut stream = pin!(watcher(jobs, watcher::Config::default()));
    assert_eq!(events(&mut stream, 3).await, ["Init", "InitApply team-a/a", "InitDone"]);
    fake.apply(job("team-a", "b", "nightly"));
    assert_eq!(events(&mut stream, 1).await, ["Apply team-a/b"]);

    fake.close_watches();
    // Written while no watch is open: replayed from the history when the watcher resumes.
    fake.apply(job("team-a", "c", "nightly"));
    let _ = fake.delete("Job", Some("team-a"), "a").expect("a existed");

    assert_eq!(events(&mut stream, 2).await, ["Apply team-a/c", "Delete team-a/a"]);
    assert_eq!((fake.lists("jobs"), fake.watches("jobs")), (1, 2), "resumed, not relisted");
}

#[tokio::test]
async fn compaction_turns_a_resumed_watch_into_a_relist() {
    let fake = FakeKube::start().await;
    fake.apply(job("team-a", "a", "nightly"));
    let jobs: Api<Job> = Api::namespaced(fake.client(), "team-a");
    let mut stream = pin!(watcher(jobs.clone(), watcher::Config::default()));
    assert_eq!(events(&mut stream, 3).await, ["Init", "InitApply team-a/a", "InitDone"]);
    let listed_at = fake.resource_version();
    fake.apply(job("team-a", "b", "nightly"));
    assert_eq!(events(&mut stream, 1).await, ["Apply team-a/b"], "the watch is open");

    // The watcher will resume from b's version, which the compaction after c makes too old.
    fake.close_watches();
    fake.apply(job("team-a", "c", "nightly"));
    fake.compact();

    match next(&mut stream).await {
        Err(watcher::Error::WatchError(status)) => assert_eq!(status.code, 410),
        other => panic!("expected the 410 watch error, got {other:?}"),
    }
    assert_eq!(
        events(&mut stream, 5).await,
        ["Init", "InitApply team-a/a", "InitApply team-a/b", "InitApply team-a/c", "InitDone"]
    );
    assert_eq!((fake.lists("jobs"), fake.watches("jobs")), (2, 2), "watch, refused resume, relist");

    // The raw protocol: a watch from a compacted version is one ERROR event, then the end.
    let raw =
        with_timeout("raw watch", jobs.watch(&WatchParams::default(), &listed_at)).await.expect("watch");
    let raw: Vec<_> = with_timeout("raw events", raw.collect::<Vec<_>>()).await;
    match raw.as_slice() {
        [Ok(WatchEvent::Error(status))] => {
            assert_eq!((status.code, status.reason.as_str()), (410, "Expired"))
        }
        other => panic!("expected a single 410 ERROR event, got {other:?}"),
    }
    // So is an exact list at a compacted version.
    let exact =
        jobs.list(&ListParams::default().at(&listed_at).matching(kube::api::VersionMatch::Exact)).await;
    assert_eq!(api_error_code(exact), (410, "Expired".to_string()));
}

#[tokio::test]
async fn streaming_list_sends_initial_events_then_the_end_bookmark() {
    let fake = FakeKube::start().await;
    fake.apply(job("team-a", "b", "nightly"));
    fake.apply(job("team-a", "a", "nightly"));
    let jobs: Api<Job> = Api::namespaced(fake.client(), "team-a");
    let mut stream = pin!(watcher(jobs, watcher::Config::default().streaming_lists()));

    assert_eq!(
        events(&mut stream, 4).await,
        ["Init", "InitApply team-a/a", "InitApply team-a/b", "InitDone"]
    );
    fake.apply(job("team-a", "c", "nightly"));
    assert_eq!(events(&mut stream, 1).await, ["Apply team-a/c"]);
    assert_eq!((fake.lists("jobs"), fake.watches("jobs")), (0, 1), "no LIST at all");
}

#[tokio::test]
async fn wire_format_is_the_apiservers() {
    let fake = FakeKube::start().await;
    fake.apply(job("team-a", "a", "nightly"));
    fake.apply(job("team-a", "b", "nightly"));
    let client = fake.client();
    let get = |uri: &str| hyper::Request::get(uri).body(Vec::new()).expect("request");

    let list =
        with_timeout("raw list", client.request_text(get("/apis/batch/v1/namespaces/team-a/jobs?limit=1")))
            .await
            .expect("raw list");
    let list: Value = serde_json::from_str(&list).expect("JSON list");
    assert_eq!(list["kind"], "JobList");
    assert_eq!(list["apiVersion"], "batch/v1");
    assert_eq!(list["metadata"]["resourceVersion"], json!(fake.resource_version()));
    assert!(list["metadata"]["continue"].is_string());
    assert_eq!(list["metadata"]["remainingItemCount"], 1);
    let item = &list["items"][0];
    assert!(item.get("kind").is_none() && item.get("apiVersion").is_none(), "list items are bare: {item}");
    assert_eq!(item["metadata"]["name"], "a");
    assert!(is_uuid_v4(item["metadata"]["uid"].as_str().unwrap_or("")));

    // A watch from "0" starts with synthetic ADDED events; `timeoutSeconds` ends it.
    let raw = with_timeout(
        "raw watch",
        client.request_text(get(
            "/apis/batch/v1/namespaces/team-a/jobs?watch=true&resourceVersion=0&timeoutSeconds=1",
        )),
    )
    .await
    .expect("raw watch");
    let lines: Vec<Value> =
        raw.lines().map(|l| serde_json::from_str(l).expect("one JSON event per line")).collect();
    assert_eq!(lines.len(), 2, "{raw}");
    for (line, name) in lines.iter().zip(["a", "b"]) {
        assert_eq!(line["type"], "ADDED");
        assert_eq!(line["object"]["kind"], "Job");
        assert_eq!(line["object"]["apiVersion"], "batch/v1");
        assert_eq!(line["object"]["metadata"]["name"], name);
    }

    // Bookmarks go only to watches that asked for them.
    let jobs: Api<Job> = Api::namespaced(client.clone(), "team-a");
    let rv = fake.resource_version();
    let with = with_timeout("watch", jobs.watch(&WatchParams::default(), &rv)).await.unwrap();
    let without =
        with_timeout("watch", jobs.watch(&WatchParams::default().disable_bookmarks(), &rv)).await.unwrap();
    let (mut with, mut without) = (Box::pin(with), Box::pin(without));
    fake.send_bookmarks();
    fake.apply(job("team-a", "c", "nightly"));
    match with_timeout("bookmark", with.next()).await {
        Some(Ok(WatchEvent::Bookmark(b))) => assert_eq!(b.metadata.resource_version, rv),
        other => panic!("expected a bookmark, got {other:?}"),
    }
    match with_timeout("modified", without.next()).await {
        Some(Ok(WatchEvent::Added(j))) => assert_eq!(j.name_any(), "c"),
        other => panic!("expected ADDED c without a bookmark first, got {other:?}"),
    }

    let not_found = client.request_text(get("/apis/batch/v1/namespaces/team-a/pods")).await;
    assert_eq!(api_error_code(not_found), (404, "NotFound".to_string()));
}

// ---------------------------------------------------------------------------------------
// Leases

#[tokio::test]
async fn leases_support_create_get_replace_with_optimistic_concurrency_and_delete() {
    let fake = FakeKube::start().await;
    let leases: Api<Lease> = Api::namespaced(fake.client(), "kubefacts");
    let pp = PostParams::default();

    let created =
        with_timeout("create", leases.create(&pp, &lease("kubefacts", "leader", "pod-a"))).await.unwrap();
    let created_rv = created.resource_version().expect("created rv");
    assert!(is_uuid_v4(created.metadata.uid.as_deref().unwrap_or("")));
    let again = leases.create(&pp, &lease("kubefacts", "leader", "pod-b")).await;
    assert_eq!(api_error_code(again), (409, "AlreadyExists".to_string()));

    let got = leases.get("leader").await.expect("get");
    assert_eq!(got.metadata.resource_version.as_deref(), Some(created_rv.as_str()));
    assert_eq!(got.spec.as_ref().and_then(|s| s.holder_identity.as_deref()), Some("pod-a"));

    let mut renewed = got.clone();
    renewed.spec.as_mut().expect("spec").holder_identity = Some("pod-b".into());
    let replaced = leases.replace("leader", &pp, &renewed).await.expect("replace with the current version");
    assert_ne!(replaced.resource_version(), Some(created_rv.clone()));
    assert_eq!(replaced.metadata.uid, created.metadata.uid, "uid survives updates");
    assert_eq!(replaced.spec.as_ref().and_then(|s| s.holder_identity.as_deref()), Some("pod-b"));

    // A stale version loses: someone else renewed since we read.
    let stale = leases.replace("leader", &pp, &got).await;
    assert_eq!(api_error_code(stale), (409, "Conflict".to_string()));
    // Leases never take an unconditional update.
    let mut blind = got.clone();
    blind.metadata.resource_version = None;
    assert_eq!(api_error_code(leases.replace("leader", &pp, &blind).await), (422, "Invalid".to_string()));
    let stored = fake.get("Lease", Some("kubefacts"), "leader").expect("stored");
    assert_eq!(stored["spec"]["holderIdentity"], "pod-b", "failed replaces change nothing");

    let gone = leases.delete("leader", &DeleteParams::default()).await.expect("delete");
    assert!(gone.is_right(), "DELETE answers a Success Status");
    assert_eq!(api_error_code(leases.get("leader").await), (404, "NotFound".to_string()));
    let gone_again = leases.delete("leader", &DeleteParams::default()).await;
    assert_eq!(api_error_code(gone_again), (404, "NotFound".to_string()));
}

// ---------------------------------------------------------------------------------------
// Outages

#[tokio::test]
async fn a_down_server_answers_503_until_it_is_back() {
    let fake = FakeKube::start().await;
    fake.apply(job("team-a", "a", "nightly"));
    let jobs: Api<Job> = Api::namespaced(fake.client(), "team-a");

    fake.set_down(true);
    let down = with_timeout("list while down", jobs.list(&ListParams::default())).await;
    assert_eq!(api_error_code(down), (503, "ServiceUnavailable".to_string()));
    assert_eq!(fake.lists("jobs"), 1, "the non-retrying client asks once");

    fake.set_down(false);
    let up = with_timeout("list when up", jobs.list(&ListParams::default())).await.expect("list when up");
    assert_eq!(names(&up.items), ["a"]);

    // kube's default client retries 503 with backoff and gets through once the server is back.
    let retrying: Api<Job> = Api::namespaced(Client::try_from(fake.config()).expect("client"), "team-a");
    fake.set_down(true);
    let lists_before = fake.lists("jobs");
    let pending = tokio::spawn(async move { retrying.list(&ListParams::default()).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!pending.is_finished(), "still retrying while down");
    fake.set_down(false);
    let list = with_timeout("retried list", pending).await.expect("task").expect("retried list");
    assert_eq!(names(&list.items), ["a"]);
    assert!(
        fake.lists("jobs") - lists_before >= 2,
        "retried: {} attempts",
        fake.lists("jobs") - lists_before
    );
}

#[tokio::test]
async fn watcher_recovers_after_an_outage() {
    let fake = FakeKube::start().await;
    fake.apply(job("team-a", "a", "nightly"));
    let jobs: Api<Job> = Api::namespaced(fake.client(), "team-a");
    let mut stream = pin!(watcher(jobs, watcher::Config::default()));
    assert_eq!(events(&mut stream, 3).await, ["Init", "InitApply team-a/a", "InitDone"]);
    fake.apply(job("team-a", "b", "nightly"));
    assert_eq!(events(&mut stream, 1).await, ["Apply team-a/b"], "the watch is open");

    fake.set_down(true);
    assert_eq!(fake.open_watches(), 0, "going down ends open watches");
    match next(&mut stream).await {
        Err(watcher::Error::WatchStartFailed(kube::Error::Api(status))) => assert_eq!(status.code, 503),
        other => panic!("expected a 503 on re-watch, got {other:?}"),
    }
    fake.set_down(false);
    fake.apply(job("team-a", "c", "nightly"));
    assert_eq!(events(&mut stream, 1).await, ["Apply team-a/c"], "resumed from its version");
    assert_eq!((fake.lists("jobs"), fake.watches("jobs")), (1, 3), "no relist: watch, 503, watch");
}
