use std::collections::{BTreeMap, BTreeSet};

use super::*;
use crate::trace::KubeObject;
use crate::watch::PublishCounts;

/// Stats of `stage` in `metrics` whose processor has counted one kind of event (zero so
/// far), with an input and an output topic, a dead-letter reason (zero so far), an
/// assigned partition, a task with a stream time and a store, so every family has a series.
fn stats(metrics: &Metrics, stage: &str) -> Arc<RuntimeStats> {
    let stats = metrics.stage(stage);
    stats.add_events(BTreeMap::from([("runs_filed", 0)]));
    stats.declare_topics(["kubefacts.jobs.v1"], ["kubefacts.runs.v1"]);
    stats.count_dead_letters("null_value", 0);
    stats.set_lag(vec![("kubefacts.jobs.v1".to_owned(), 0, Some(0))]);
    stats.set_task_gauges(Some(now_ms()), BTreeMap::from([("runs".to_owned(), 0)]));
    stats
}

#[test]
fn processor_events_follow_committed_counts_per_stage_and_event() {
    let metrics = Metrics::new();
    let runs = stats(&metrics, "runs");
    runs.add_events(BTreeMap::from([("runs_filed", 3), ("runs_late", 1)]));
    runs.add_events(BTreeMap::from([("runs_filed", 2)]));
    let out = metrics.encode();
    let filed = sample(&out, "kubefacts_processor_events_total", "stage=\"runs\",event=\"runs_filed\"");
    assert_eq!(filed.as_deref(), Some("5"), "{out}");
    let late = sample(&out, "kubefacts_processor_events_total", "stage=\"runs\",event=\"runs_late\"");
    assert_eq!(late.as_deref(), Some("1"), "{out}");
}

/// The value of the sample `name{labels}` (`name` alone when `labels` is empty), if present.
fn sample(out: &str, name: &str, labels: &str) -> Option<String> {
    let prefix = if labels.is_empty() { format!("{name} ") } else { format!("{name}{{{labels}}} ") };
    out.lines().find_map(|l| l.strip_prefix(&prefix)).map(str::to_owned)
}

/// Counts `n` into one field of a stage's stats.
type Count<'a> = dyn Fn(u64) + 'a;

#[test]
fn every_metric_follows_its_atomic_per_stage() {
    let metrics = Metrics::new();
    let (runs, _probe) = (stats(&metrics, "runs"), stats(&metrics, "probe"));
    // Each field counts `n` (the restore in milliseconds, as the runtime times it).
    let fields: [(&str, &str, &Count); 5] = [
        ("kubefacts_transactions_total", ",outcome=\"committed\"", &|n| {
            runs.commits.inc_by(n);
        }),
        ("kubefacts_transactions_total", ",outcome=\"aborted\"", &|n| {
            runs.aborts.inc_by(n);
        }),
        ("kubefacts_restored_records_total", "", &|n| {
            runs.restored.inc_by(n);
        }),
        ("kubefacts_restore_seconds_total", "", &|n| runs.count_restore_ms(n)),
        ("kubefacts_restoring_tasks", "", &|n| {
            runs.restoring_tasks.fetch_add(n, Ordering::Relaxed);
        }),
    ];
    for (_, _, count) in &fields {
        count(3000);
    }
    let before = metrics.encode();
    for (_, _, count) in &fields {
        count(1500);
    }
    let after = metrics.encode();
    for (name, extra, _) in fields {
        let labels = format!("stage=\"runs\"{extra}");
        let (b, a) = (sample(&before, name, &labels), sample(&after, name, &labels));
        let expected = if name == "kubefacts_restore_seconds_total" {
            (Some("3.0".to_owned()), Some("4.5".to_owned()))
        } else {
            (Some("3000".to_owned()), Some("4500".to_owned()))
        };
        assert_eq!((b, a), expected, "{name}{{{labels}}} in\n{after}");
        // The other stage's series exists and did not move.
        let probe_labels = format!("stage=\"probe\"{extra}");
        assert!(sample(&after, name, &probe_labels).is_some_and(|v| v.starts_with('0')), "{name}");
    }
}

/// The value of `name{labels}` as a number, if present.
fn value(out: &str, name: &str, labels: &str) -> Option<f64> {
    sample(out, name, labels).map(|v| v.parse().expect("a number"))
}

#[test]
fn records_in_and_out_are_counted_per_topic() {
    let metrics = Metrics::new();
    let (runs, _probe) = (stats(&metrics, "runs"), stats(&metrics, "probe"));
    let jobs = "stage=\"runs\",topic=\"kubefacts.jobs.v1\"";
    let pods = "stage=\"runs\",topic=\"kubefacts.pods.v1\"";
    let runs_out = "stage=\"runs\",topic=\"kubefacts.runs.v1\"";
    let out = metrics.encode();
    // Declared topics have a series at 0 before the first record.
    assert_eq!(value(&out, "kubefacts_records_in_total", jobs), Some(0.0), "{out}");
    assert_eq!(value(&out, "kubefacts_records_out_total", runs_out), Some(0.0), "{out}");
    assert_eq!(value(&out, "kubefacts_records_in_total", pods), None, "{out}");
    runs.count_in("kubefacts.jobs.v1", 3);
    runs.count_in("kubefacts.pods.v1", 2);
    runs.count_in("kubefacts.jobs.v1", 1);
    runs.count_out("kubefacts.runs.v1", 5);
    let out = metrics.encode();
    assert_eq!(value(&out, "kubefacts_records_in_total", jobs), Some(4.0), "{out}");
    assert_eq!(value(&out, "kubefacts_records_in_total", pods), Some(2.0), "{out}");
    assert_eq!(value(&out, "kubefacts_records_out_total", runs_out), Some(5.0), "{out}");
    assert_eq!((load(&runs.records_in), load(&runs.records_out)), (6, 5), "the totals follow");
    // The other stage did not move.
    let probe_jobs = "stage=\"probe\",topic=\"kubefacts.jobs.v1\"";
    assert_eq!(value(&out, "kubefacts_records_in_total", probe_jobs), Some(0.0), "{out}");
    assert_eq!(out.matches("kubefacts_records_in_total{").count(), 3, "{out}");
}

#[test]
fn dead_letters_are_counted_per_reason() {
    let metrics = Metrics::new();
    let runs = stats(&metrics, "runs");
    let null = "stage=\"runs\",reason=\"null_value\"";
    let unknown = "stage=\"runs\",reason=\"unknown_event\"";
    let out = metrics.encode();
    assert_eq!(value(&out, "kubefacts_dead_letters_total", null), Some(0.0), "{out}");
    assert_eq!(value(&out, "kubefacts_dead_letters_total", unknown), None, "{out}");
    runs.count_dead_letters("unknown_event", 2);
    runs.count_dead_letters("null_value", 1);
    runs.count_dead_letters("unknown_event", 1);
    let out = metrics.encode();
    assert_eq!(value(&out, "kubefacts_dead_letters_total", null), Some(1.0), "{out}");
    assert_eq!(value(&out, "kubefacts_dead_letters_total", unknown), Some(3.0), "{out}");
    assert_eq!(load(&runs.dead_lettered), 4, "the total follows");
}

#[test]
fn lag_is_per_assigned_partition_and_a_revoked_one_disappears() {
    let jobs = |p: i32, lag: Option<u64>| ("kubefacts.jobs.v1".to_owned(), p, lag);
    let labels = |p: i32| format!("stage=\"runs\",topic=\"kubefacts.jobs.v1\",partition=\"{p}\"");
    let metrics = Metrics::new();
    let runs = metrics.stage("runs");
    assert_eq!(metrics.encode().matches("kubefacts_consumer_lag_records{").count(), 0);
    runs.set_lag(vec![jobs(0, Some(5)), jobs(1, Some(7))]);
    let out = metrics.encode();
    assert_eq!(value(&out, "kubefacts_consumer_lag_records", &labels(0)), Some(5.0), "{out}");
    assert_eq!(value(&out, "kubefacts_consumer_lag_records", &labels(1)), Some(7.0), "{out}");
    assert_eq!(load(&runs.lag), 12, "the sum follows");
    // Partition 1 moved away, 2 arrived; 0's watermark could not be read: its last lag stays.
    runs.set_lag(vec![jobs(0, None), jobs(2, Some(1))]);
    let out = metrics.encode();
    assert_eq!(value(&out, "kubefacts_consumer_lag_records", &labels(0)), Some(5.0), "{out}");
    assert_eq!(value(&out, "kubefacts_consumer_lag_records", &labels(1)), None, "{out}");
    assert_eq!(value(&out, "kubefacts_consumer_lag_records", &labels(2)), Some(1.0), "{out}");
    // A revocation removes the partition at once, before the next refresh.
    runs.retain_lag(|p| p != 0);
    let out = metrics.encode();
    assert_eq!(value(&out, "kubefacts_consumer_lag_records", &labels(0)), None, "{out}");
    assert_eq!(out.matches("kubefacts_consumer_lag_records{").count(), 1, "{out}");
    assert_eq!(load(&runs.lag), 1);
}

#[test]
fn stream_time_delay_is_now_minus_the_lowest_stream_time() {
    let metrics = Metrics::new();
    let runs = metrics.stage("runs");
    let delay =
        |metrics: &Metrics| value(&metrics.encode(), "kubefacts_stream_time_delay_seconds", "stage=\"runs\"");
    assert_eq!(delay(&metrics), None, "no task has a stream time");
    runs.set_task_gauges(Some(now_ms() - 90_000), BTreeMap::new());
    let d = delay(&metrics).expect("a delay");
    assert!((90.0..95.0).contains(&d), "{d}");
    runs.set_task_gauges(Some(now_ms() - 5_000), BTreeMap::new());
    let d = delay(&metrics).expect("a delay");
    assert!((5.0..10.0).contains(&d), "{d}");
    runs.set_task_gauges(None, BTreeMap::new());
    assert_eq!(delay(&metrics), None, "the tasks were revoked");
}

#[test]
fn state_entries_follow_the_stores_and_a_store_no_task_holds_reads_zero() {
    let metrics = Metrics::new();
    let runs = metrics.stage("runs");
    let entries = |metrics: &Metrics, store: &str| {
        value(&metrics.encode(), "kubefacts_state_entries", &format!("stage=\"runs\",store=\"{store}\""))
    };
    runs.set_task_gauges(None, BTreeMap::from([("runs".to_owned(), 3), ("owners".to_owned(), 4)]));
    assert_eq!((entries(&metrics, "runs"), entries(&metrics, "owners")), (Some(3.0), Some(4.0)));
    runs.set_task_gauges(None, BTreeMap::from([("runs".to_owned(), 10)]));
    assert_eq!((entries(&metrics, "runs"), entries(&metrics, "owners")), (Some(10.0), Some(0.0)));
}

#[test]
fn each_family_is_described_once_with_several_stages() {
    let metrics = Metrics::new();
    for stage in ["runs", "journal", "probe"] {
        stats(&metrics, stage);
    }
    stats(&metrics, "runs"); // replaces, does not duplicate
    let out = metrics.encode();
    let types: Vec<&str> = out.lines().filter(|l| l.starts_with("# TYPE ")).collect();
    assert_eq!(types.len(), 14, "{out}");
    assert_eq!(types.iter().collect::<BTreeSet<_>>().len(), types.len(), "{out}");
    assert!(out.lines().all(|l| l.starts_with('#') || !l.is_empty()));
    assert_eq!(out.matches("kubefacts_records_in_total{").count(), 3, "{out}");
    assert!(out.ends_with("# EOF\n"), "{out}");
    assert!(Metrics::new().encode().lines().all(|l| l.starts_with('#')));
}

/// Metric name → (type, label names).
type Table = BTreeMap<String, (String, BTreeSet<String>)>;

/// The rows of every metrics table in docs/METRICS.md, by the `## ` heading above them.
fn documented() -> BTreeMap<String, Table> {
    let cell = |c: &str| c.trim().trim_matches('`').to_owned();
    let mut tables: BTreeMap<String, Table> = BTreeMap::new();
    let mut heading = String::new();
    for line in include_str!("../../docs/METRICS.md").lines() {
        if let Some(h) = line.strip_prefix("## ") {
            h.clone_into(&mut heading);
        } else if line.starts_with("| `kubefacts_") {
            let cells: Vec<&str> = line.trim_matches('|').split('|').collect();
            let labels = cells[2].split(',').map(cell).filter(|c| !c.is_empty()).collect();
            let row = (cell(cells[1]), labels);
            let previous = tables.entry(heading.clone()).or_default().insert(cell(cells[0]), row);
            assert!(previous.is_none(), "{} documented twice", cells[0]);
        }
    }
    tables
}

/// The rows under the heading `## <heading>`.
fn table(tables: &BTreeMap<String, Table>, heading: &str) -> Table {
    tables.get(heading).cloned().unwrap_or_else(|| panic!("no `## {heading}` table in docs/METRICS.md"))
}

/// Sample name → (type, label names), from the exposition.
fn exposed(out: &str) -> Table {
    let types: BTreeMap<&str, &str> =
        out.lines().filter_map(|l| l.strip_prefix("# TYPE ")).filter_map(|l| l.split_once(' ')).collect();
    let mut exposed = BTreeMap::new();
    for line in out.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, _value)) = line.rsplit_once(' ') else { continue };
        let (name, rest) = series.split_once('{').unwrap_or((series, ""));
        let labels = rest.split(',').filter_map(|kv| kv.split_once('=')).map(|(k, _)| k.to_owned());
        let family = name.strip_suffix("_total").filter(|f| types.contains_key(f)).unwrap_or(name);
        let kind = types.get(family).copied().unwrap_or("missing TYPE").to_owned();
        let entry = exposed.entry(name.to_owned()).or_insert((kind, BTreeSet::new()));
        entry.1.extend(labels);
    }
    exposed
}

#[test]
fn docs_metrics_table_matches_the_endpoint() {
    const PROCESSOR: &str = "Processor (`kubefacts process --metrics-addr`)";
    const WATCHER: &str = "Watcher (`kubefacts watch --metrics-addr`)";
    let tables = documented();
    let unknown: Vec<&String> =
        tables.keys().filter(|h| ![PROCESSOR, WATCHER].contains(&h.as_str())).collect();
    assert!(unknown.is_empty(), "`kubefacts_` rows under unexpected headings: {unknown:?}");
    let (processor, watcher) = (table(&tables, PROCESSOR), table(&tables, WATCHER));
    assert!(!processor.is_empty() && !watcher.is_empty());

    let stage_only = Metrics::new();
    stats(&stage_only, "runs");
    let out = stage_only.encode();
    assert_eq!(processor, exposed(&out), "processor table (left) vs encode() with a stage (right)");

    let mut watcher_only = Metrics::new();
    watcher_only.add_watcher(watch_stats());
    let out = watcher_only.encode();
    assert_eq!(watcher, exposed(&out), "watcher table (left) vs encode() with a watcher (right)");

    let mut both = Metrics::new();
    stats(&both, "runs");
    both.add_watcher(watch_stats());
    let mut all = processor.clone();
    all.extend(watcher.clone());
    assert_eq!(all.len(), processor.len() + watcher.len(), "a metric is in both tables");
    assert_eq!(all, exposed(&both.encode()), "docs/METRICS.md (left) vs encode() with both (right)");
}

fn watch_stats() -> Arc<WatchStats> {
    Arc::new(WatchStats::default())
}

/// Sets every field of `w` to a value derived from `n`; [`expected_watch_samples`]
/// gives the samples it should produce.
fn set_watch_stats(w: &WatchStats, n: u64) {
    for kind in KubeObject::KINDS {
        let labels = crate::watch::KindLabels { kind };
        w.events.get_or_create(&labels).inner().store(n, Ordering::Relaxed);
        w.relists.get_or_create(&labels).inner().store(n + 1, Ordering::Relaxed);
    }
    let mut admission = crate::observe::AdmissionCounts::default();
    for kind in ADMISSION_KINDS {
        admission.admitted.insert(kind, n + 2);
        for (i, step) in (0..).zip(Step::ALL) {
            admission.excluded.insert((kind, step), n + 3 + i);
        }
    }
    admission.held = usize::try_from(n).expect("small");
    w.set_admission(&admission);
    w.leader.store(n % 2 == 1, Ordering::Relaxed);
    for (i, a) in (0..).zip([&w.terms, &w.published_records, &w.heartbeats, &w.acked_records]) {
        a.inner().store(n * 10 + i, Ordering::Relaxed);
    }
    for (i, a) in (4..).zip([&w.cut_conditions, &w.cut_containers, &w.cut_reasons]) {
        a.inner().store(n * 10 + i, Ordering::Relaxed);
    }
    w.set_publisher_totals(&PublishCounts {
        records: w.published_records.get(),
        acked: w.acked_records.get(),
        ack_latency_us: n * 1_500_000,
        oversized: n * 10 + 7,
        ..PublishCounts::default()
    });
}

/// What `set_watch_stats(_, n)` should expose: (name, labels) → value.
fn expected_watch_samples(n: u64) -> BTreeMap<(String, String), String> {
    let mut expected = BTreeMap::new();
    let mut put =
        |name: &str, labels: String, value: String| expected.insert((name.to_owned(), labels), value);
    for kind in KubeObject::KINDS {
        put("kubefacts_watch_events_total", format!("kind=\"{kind}\""), n.to_string());
        put("kubefacts_watch_relists_total", format!("kind=\"{kind}\""), (n + 1).to_string());
    }
    for kind in ADMISSION_KINDS {
        put("kubefacts_admission_admitted_total", format!("kind=\"{kind}\""), (n + 2).to_string());
        for (i, step) in (0..).zip(Step::ALL) {
            let labels = format!("kind=\"{kind}\",step=\"{}\"", step.as_str());
            put("kubefacts_admission_excluded_total", labels, (n + 3 + i).to_string());
        }
    }
    put("kubefacts_admission_held_objects", String::new(), n.to_string());
    put("kubefacts_watch_leader", String::new(), (n % 2).to_string());
    let counters = [
        "kubefacts_watch_terms_total",
        "kubefacts_watch_published_records_total",
        "kubefacts_watch_heartbeats_total",
        "kubefacts_watch_acked_records_total",
        "kubefacts_watch_cut_conditions_total",
        "kubefacts_watch_cut_containers_total",
        "kubefacts_watch_cut_reasons_total",
        "kubefacts_watch_oversized_total",
    ];
    for (i, name) in (0..).zip(counters) {
        put(name, String::new(), (n * 10 + i).to_string());
    }
    put("kubefacts_watch_ack_latency_seconds_total", String::new(), format!("{:.1}", n as f64 * 1.5));
    expected
}

/// Every watcher sample of an exposition: (name, labels) → value.
fn watch_samples(out: &str) -> BTreeMap<(String, String), String> {
    out.lines()
        .filter(|l| l.starts_with("kubefacts_watch_") || l.starts_with("kubefacts_admission_"))
        .filter_map(|l| l.rsplit_once(' '))
        .map(|(series, value)| {
            let (name, labels) = series.split_once('{').unwrap_or((series, "}"));
            ((name.to_owned(), labels.trim_end_matches('}').to_owned()), value.to_owned())
        })
        .collect()
}

#[test]
fn every_watcher_metric_follows_its_stats() {
    let watcher = watch_stats();
    let mut metrics = Metrics::new();
    stats(&metrics, "runs");
    metrics.add_watcher(Arc::clone(&watcher));
    set_watch_stats(&watcher, 3);
    let before = watch_samples(&metrics.encode());
    set_watch_stats(&watcher, 6);
    let after = watch_samples(&metrics.encode());
    assert_eq!(before, expected_watch_samples(3));
    assert_eq!(after, expected_watch_samples(6));
    for (series, value) in &after {
        assert_ne!(before.get(series), Some(value), "{series:?} did not move");
    }
    // 6 acknowledgements in 9 s: the documented ratio is the mean latency.
    watcher.acked_records.inner().store(6, Ordering::Relaxed);
    let out = metrics.encode();
    let mean = sample(&out, "kubefacts_watch_ack_latency_seconds_total", "")
        .map(|s| s.parse::<f64>())
        .expect("latency")
        .expect("a number")
        / 6.0;
    assert!((mean - 1.5).abs() < 1e-9, "{mean}");
}

#[test]
fn watcher_series_exist_at_zero_before_any_event() {
    let mut metrics = Metrics::new();
    metrics.add_watcher(watch_stats());
    let out = metrics.encode();
    let zeros: BTreeMap<_, _> = expected_watch_samples(0)
        .into_iter()
        .map(|(series, v)| (series, if v == "0.0" { v } else { "0".to_owned() }))
        .collect();
    assert_eq!(watch_samples(&out), zeros, "{out}");
    let kinds = KubeObject::KINDS.len();
    let steps = Step::ALL.len();
    assert_eq!(zeros.len(), 2 * kinds + ADMISSION_KINDS.len() * (1 + steps) + 11);
}

#[test]
fn a_kind_outside_the_known_ones_still_gets_its_series() {
    let watcher = watch_stats();
    watcher.event("Other");
    let mut metrics = Metrics::new();
    metrics.add_watcher(Arc::clone(&watcher));
    let out = metrics.encode();
    assert_eq!(sample(&out, "kubefacts_watch_events_total", "kind=\"Other\"").as_deref(), Some("1"), "{out}");
    assert_eq!(sample(&out, "kubefacts_watch_events_total", "kind=\"Pod\"").as_deref(), Some("0"), "{out}");
}

#[test]
fn watcher_families_appear_only_with_a_watcher() {
    let is_watcher = |l: &&str| l.contains("kubefacts_watch_") || l.contains("kubefacts_admission_");
    let mut metrics = Metrics::new();
    stats(&metrics, "runs");
    let out = metrics.encode();
    assert_eq!(out.lines().filter(is_watcher).count(), 0, "{out}");

    let (first, second) = (watch_stats(), watch_stats());
    first.terms.inc_by(1);
    second.terms.inc_by(2);
    metrics.add_watcher(first);
    metrics.add_watcher(second); // replaces, does not duplicate
    let out = metrics.encode();
    assert_eq!(sample(&out, "kubefacts_watch_terms_total", "").as_deref(), Some("2"), "{out}");
    assert_eq!(out.matches("kubefacts_watch_terms_total ").count(), 1, "{out}");
    let types: Vec<&str> = out.lines().filter(|l| l.starts_with("# TYPE ")).collect();
    assert_eq!(types.len(), 14 + 15, "{out}");
    assert_eq!(types.iter().collect::<BTreeSet<_>>().len(), types.len(), "{out}");
    assert!(out.ends_with("# EOF\n"), "{out}");
}

/// `metrics` served on a free loopback port: its base URL, the shutdown sender, the task.
async fn serving(
    metrics: Metrics,
) -> (String, tokio::sync::oneshot::Sender<()>, tokio::task::JoinHandle<()>) {
    let server = MetricsServer::bind("127.0.0.1:0".parse().expect("addr")).await.expect("bind");
    let base = format!("http://{}", server.local_addr());
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(server.serve(Arc::new(metrics), async {
        let _ = rx.await;
    }));
    (base, tx, task)
}

#[tokio::test]
async fn serves_metrics_over_http_until_shutdown() {
    let metrics = Metrics::new();
    let runs = stats(&metrics, "runs");
    runs.count_in("kubefacts.jobs.v1", 42);
    let (base, tx, task) = serving(metrics).await;
    let client = crate::http::client_builder().build().unwrap();

    let ok = client.get(format!("{base}/metrics")).send().await.expect("GET /metrics");
    assert_eq!(ok.status(), 200);
    assert_eq!(ok.headers()[CONTENT_TYPE], CONTENT_TYPE_OPENMETRICS);
    let body = ok.text().await.expect("body");
    let jobs = "kubefacts_records_in_total{stage=\"runs\",topic=\"kubefacts.jobs.v1\"} 42";
    assert!(body.contains(jobs), "{body}");
    assert!(body.contains("# TYPE kubefacts_consumer_lag_records gauge"), "{body}");

    let missing = client.get(format!("{base}/other")).send().await.expect("GET /other");
    assert_eq!(missing.status(), 404);
    let post = client.post(format!("{base}/metrics")).send().await.expect("POST /metrics");
    assert_eq!(post.status(), 405);
    assert_eq!(post.headers()[ALLOW], "GET");

    // The client keeps its connection alive: shutdown must close it, not wait for it.
    tx.send(()).expect("server running");
    tokio::time::timeout(Duration::from_secs(2), task).await.expect("serve returned").expect("no panic");
    assert!(client.get(format!("{base}/metrics")).send().await.is_err(), "still serving");
}

#[tokio::test]
async fn bind_failure_names_the_address() {
    let taken = MetricsServer::bind("127.0.0.1:0".parse().expect("addr")).await.expect("bind");
    let addr = taken.local_addr();
    let error = MetricsServer::bind(addr).await.expect_err("port is taken");
    assert!(matches!(error, MetricsError::Bind { .. }));
    assert!(error.to_string().contains(&addr.to_string()), "{error}");
}

#[tokio::test]
async fn healthz_fails_while_a_loop_is_stalled_and_readyz_names_what_it_waits_for() {
    let metrics = Metrics::new();
    let health = Arc::clone(metrics.health());
    let stalling = health.heartbeat("stream thread 0", Duration::from_secs(1));
    let turning = health.heartbeat("stream thread 1", Duration::from_secs(60));
    let condition = health.condition("cleaner", "not polling its consumer group yet");
    let (base, tx, task) = serving(metrics).await;
    let client = crate::http::client_builder().build().unwrap();
    let get = |path: &str| {
        let request = client.get(format!("{base}{path}"));
        async move {
            let response = request.send().await.expect("GET");
            (response.status().as_u16(), response.text().await.expect("body"))
        }
    };

    assert_eq!(get("/healthz").await, (200, "alive\n".to_owned()));
    assert_eq!(
        get("/readyz").await,
        (503, "not ready: cleaner: not polling its consumer group yet\n".to_owned())
    );
    tokio::time::sleep(Duration::from_millis(1_600)).await;
    turning.beat();
    let (status, body) = get("/healthz").await;
    assert_eq!(status, 503, "{body}");
    assert!(body.starts_with("stalled: stream thread 0 has not turned for"), "{body}");
    assert!(!body.contains("stream thread 1"), "{body}");
    stalling.beat();
    assert_eq!(get("/healthz").await.0, 200);
    condition.met();
    assert_eq!(get("/readyz").await, (200, "ready\n".to_owned()));

    tx.send(()).expect("server running");
    tokio::time::timeout(Duration::from_secs(2), task).await.expect("serve returned").expect("no panic");
}
