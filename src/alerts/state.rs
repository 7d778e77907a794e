//! The pure part of `kubefacts alerts`: the latest coverage state per subject, and which
//! Alertmanager alerts are owed at a given time. No clock and no I/O: the shell passes `now`
//! and reports what Alertmanager accepted.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::{
    codec::json::rfc3339_millis,
    coverage::{CoverageAlert, CoverageState},
};

/// `alertname` of every alert `kubefacts alerts` sends.
pub const ALERTNAME: &str = "KubefactsCronJobOverdue";

/// A firing alert's `endsAt` is `now` + this many resend intervals: it survives a few missed
/// re-sends, and still ends by itself if `kubefacts alerts` stops for good.
pub const RESEND_WINDOW_FACTOR: i64 = 4;

/// What the forwarder needs to know besides the records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForwarderConfig {
    /// Value of the `severity` label.
    pub severity: String,
    /// How often a firing alert is sent again, in milliseconds.
    pub resend_interval_ms: i64,
    /// `generatorURL` of every alert, if any.
    pub generator_url: Option<String>,
}

/// One alert in the body of Alertmanager's `POST /api/v2/alerts` (a `postableAlert`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PostableAlert {
    /// Identity of the alert: stable values only.
    pub labels: BTreeMap<String, String>,
    /// Evidence; may change from one send to the next.
    pub annotations: BTreeMap<String, String>,
    /// RFC 3339.
    #[serde(rename = "startsAt")]
    pub starts_at: String,
    /// RFC 3339; in the past (or now) for a resolved alert.
    #[serde(rename = "endsAt")]
    pub ends_at: String,
    /// Link back to the source, if configured.
    #[serde(rename = "generatorURL", skip_serializing_if = "Option::is_none")]
    pub generator_url: Option<String>,
}

/// What is owed to Alertmanager at one instant ([`Forwarder::due`]); hand it back to
/// [`Forwarder::delivered`] once Alertmanager accepted it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outbox {
    /// The alerts to post, firing ones first, each group ordered by subject key.
    pub alerts: Vec<PostableAlert>,
    /// Subjects whose firing alert is in `alerts`.
    firing: Vec<String>,
    /// Subjects whose owed resolve is in `alerts`, or is dropped because another subject
    /// with the same labels fires (a CronJob deleted and re-created under the same name).
    resolved: Vec<String>,
}

impl Outbox {
    /// Nothing to send.
    pub fn is_empty(&self) -> bool {
        self.alerts.is_empty() && self.resolved.is_empty()
    }
}

/// A resolve still owed to Alertmanager: the alert of these labels ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Resolve {
    starts_at: i64,
    ends_at: i64,
}

/// What the forwarder keeps per subject.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Subject {
    /// The subject's latest record.
    latest: CoverageAlert,
    /// While FIRING: the alert's `startsAt`.
    firing_since: Option<i64>,
    /// When Alertmanager last accepted this subject's firing alert.
    last_sent: Option<i64>,
    /// A resolve not yet accepted by Alertmanager.
    resolve: Option<Resolve>,
    /// Deleted (a tombstone): forgotten once its resolve is delivered.
    deleted: bool,
}

/// The latest state per subject (keyed by the record key, the subject UID) and the alerts
/// owed for it.
///
/// * FIRING: an active alert, sent at once, then again every resend interval, each time with
///   `endsAt` = now + [`RESEND_WINDOW_FACTOR`] intervals.
/// * Any other state after FIRING, or a tombstone: one resolved alert (`endsAt` = the
///   record's stream time, at most `now`), sent until Alertmanager accepts it.
/// * RESOLVED without a FIRING seen (the FIRING compacted away before a restart): one
///   resolved alert too; harmless if Alertmanager never had it.
#[derive(Debug, Clone)]
pub struct Forwarder {
    config: ForwarderConfig,
    subjects: BTreeMap<String, Subject>,
}

impl Forwarder {
    /// An empty forwarder.
    pub fn new(config: ForwarderConfig) -> Self {
        Self { config, subjects: BTreeMap::new() }
    }

    /// Takes the subject's next record (its latest state).
    pub fn apply(&mut self, key: &str, record: CoverageAlert) {
        let previous = self.subjects.remove(key);
        let was_firing = previous.as_ref().and_then(|s| s.firing_since);
        let mut subject = Subject {
            firing_since: None,
            last_sent: None,
            resolve: previous.as_ref().and_then(|s| s.resolve),
            deleted: false,
            latest: record,
        };
        let t = subject.latest.stream_time;
        match (subject.latest.state, was_firing) {
            (CoverageState::Firing, _) => {
                // A re-fire supersedes an undelivered resolve; new evidence goes out at once.
                subject.firing_since = Some(subject.latest.pending_since.unwrap_or(t));
                subject.resolve = None;
            }
            (_, Some(since)) => subject.resolve = Some(Resolve { starts_at: since, ends_at: t }),
            (CoverageState::Resolved, None) => subject.resolve = Some(Resolve { starts_at: t, ends_at: t }),
            _ => {}
        }
        self.subjects.insert(key.to_owned(), subject);
    }

    /// The subject was deleted (a tombstone at `at`, epoch ms): a firing alert resolves.
    pub fn remove(&mut self, key: &str, at: i64) {
        let Some(subject) = self.subjects.get_mut(key) else { return };
        match subject.firing_since.take() {
            Some(since) => {
                subject.resolve = Some(Resolve { starts_at: since, ends_at: at });
                subject.deleted = true;
            }
            None if subject.resolve.is_some() => subject.deleted = true,
            None => {
                self.subjects.remove(key);
            }
        }
    }

    /// The alerts owed at `now` (epoch ms): every firing alert not accepted within the last
    /// resend interval, and every undelivered resolve.
    pub fn due(&self, now: i64) -> Outbox {
        let mut out = Outbox::default();
        let mut firing_labels = BTreeSet::new();
        for (key, s) in &self.subjects {
            let Some(since) = s.firing_since else { continue };
            firing_labels.insert(self.labels(&s.latest));
            if s.last_sent.is_none_or(|sent| now - sent >= self.config.resend_interval_ms) {
                let ends = now + RESEND_WINDOW_FACTOR * self.config.resend_interval_ms;
                out.alerts.push(self.alert(&s.latest, since, ends.max(since)));
                out.firing.push(key.clone());
            }
        }
        for (key, s) in &self.subjects {
            let Some(r) = s.resolve else { continue };
            out.resolved.push(key.clone());
            let labels = self.labels(&s.latest);
            if !firing_labels.contains(&labels) {
                // Never in the future (it would stay active until then), never before start.
                let ends = r.ends_at.min(now).max(r.starts_at);
                out.alerts.push(self.alert(&s.latest, r.starts_at, ends));
            }
        }
        out
    }

    /// Alertmanager accepted `outbox` (or refused it for good) at `now`.
    pub fn delivered(&mut self, outbox: &Outbox, now: i64) {
        for key in &outbox.firing {
            if let Some(s) = self.subjects.get_mut(key) {
                s.last_sent = Some(now);
            }
        }
        for key in &outbox.resolved {
            let Some(s) = self.subjects.get_mut(key) else { continue };
            s.resolve = None;
            if s.deleted {
                self.subjects.remove(key);
            }
        }
    }

    /// Subjects currently firing.
    pub fn firing(&self) -> usize {
        self.subjects.values().filter(|s| s.firing_since.is_some()).count()
    }

    /// Subjects known (latest state kept).
    pub fn subjects(&self) -> usize {
        self.subjects.len()
    }

    /// The identity of a subject's alert: nothing that changes over time.
    pub fn labels(&self, record: &CoverageAlert) -> BTreeMap<String, String> {
        BTreeMap::from([
            ("alertname".to_owned(), ALERTNAME.to_owned()),
            ("namespace".to_owned(), record.subject.namespace.clone()),
            ("cronjob".to_owned(), record.subject.name.clone()),
            ("severity".to_owned(), self.config.severity.clone()),
        ])
    }

    fn alert(&self, record: &CoverageAlert, starts_at: i64, ends_at: i64) -> PostableAlert {
        PostableAlert {
            labels: self.labels(record),
            annotations: annotations(record),
            starts_at: time(starts_at),
            ends_at: time(ends_at),
            generator_url: self.config.generator_url.clone(),
        }
    }
}

/// The evidence of a record, as annotations (times in RFC 3339).
pub fn annotations(r: &CoverageAlert) -> BTreeMap<String, String> {
    let s = &r.subject;
    let opt_time = |t: Option<i64>| t.map_or_else(|| "unknown".to_owned(), time);
    let summary = match r.state {
        CoverageState::Firing => format!(
            "CronJob {}/{} has made no progress since {} (expected by {}) while manager lease {} was held",
            s.namespace,
            s.name,
            opt_time(r.last_progress),
            opt_time(r.expected_by),
            r.manager_lease
        ),
        state => format!("CronJob {}/{} is {}", s.namespace, s.name, state.as_str()),
    };
    let mut a = BTreeMap::from([
        ("summary".to_owned(), summary),
        ("state".to_owned(), r.state.as_str().to_owned()),
        ("subject_uid".to_owned(), s.uid.clone()),
        ("manager_lease".to_owned(), r.manager_lease.clone()),
        ("coverage_gaps".to_owned(), r.coverage_gaps.len().to_string()),
        ("stream_time".to_owned(), time(r.stream_time)),
    ]);
    for (name, t) in [
        ("last_progress", r.last_progress),
        ("expected_by", r.expected_by),
        ("pending_since", r.pending_since),
    ] {
        if let Some(t) = t {
            a.insert(name.to_owned(), time(t));
        }
    }
    if let Some(source) = r.last_progress_source {
        a.insert("last_progress_source".to_owned(), format!("{source:?}"));
    }
    a
}

/// Epoch ms as RFC 3339 with milliseconds (Alertmanager's format); out of range → epoch 0.
fn time(ms: i64) -> String {
    rfc3339_millis(ms).unwrap_or_else(|| "1970-01-01T00:00:00.000Z".to_owned())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::coverage::{CoverageGap, CoverageSubject, ProgressSource};

    const T0: i64 = 1_795_950_000_000; // 2026-11-28T10:20:00Z
    const RESEND: i64 = 60_000;

    fn forwarder() -> Forwarder {
        Forwarder::new(ForwarderConfig {
            severity: "warning".into(),
            resend_interval_ms: RESEND,
            generator_url: None,
        })
    }

    /// A record of `name` (UID `uid-<name>`) in `state` at `t`.
    fn record(name: &str, state: CoverageState, t: i64) -> CoverageAlert {
        CoverageAlert {
            subject: CoverageSubject {
                kind: crate::coverage::SUBJECT_KIND.into(),
                namespace: "batch".into(),
                name: name.into(),
                uid: format!("uid-{name}"),
            },
            state,
            previous_state: None,
            stream_time: t,
            last_progress: Some(t - 3_600_000),
            last_progress_source: Some(ProgressSource::Run),
            expected_by: Some(t - 1_800_000),
            pending_since: matches!(state, CoverageState::Firing | CoverageState::Pending)
                .then_some(t - 600_000),
            manager_lease: "kube-system/kube-controller-manager".into(),
            manager_covered_until: Some(t),
            coverage_gaps: vec![CoverageGap { started_at: t - 7_200_000, ended_at: t - 7_100_000 }],
        }
    }

    fn ends(o: &Outbox) -> Vec<(String, String)> {
        o.alerts.iter().map(|a| (a.labels["cronjob"].clone(), a.ends_at.clone())).collect()
    }

    #[test]
    fn firing_is_an_active_alert_with_stable_labels_and_evidence_in_annotations() {
        let mut f = forwarder();
        f.apply("uid-nightly", record("nightly", CoverageState::Firing, T0));
        let now = T0 + 5_000;
        let out = f.due(now);
        assert_eq!(out.alerts.len(), 1);
        let a = &out.alerts[0];
        assert_eq!(
            a.labels,
            BTreeMap::from([
                ("alertname".to_owned(), "KubefactsCronJobOverdue".to_owned()),
                ("namespace".to_owned(), "batch".to_owned()),
                ("cronjob".to_owned(), "nightly".to_owned()),
                ("severity".to_owned(), "warning".to_owned()),
            ])
        );
        assert_eq!(a.starts_at, time(T0 - 600_000), "startsAt = pending_since");
        assert_eq!(a.ends_at, time(now + 4 * RESEND));
        assert_eq!(a.annotations["last_progress"], time(T0 - 3_600_000));
        assert_eq!(a.annotations["expected_by"], time(T0 - 1_800_000));
        assert_eq!(a.annotations["pending_since"], time(T0 - 600_000));
        assert_eq!(a.annotations["coverage_gaps"], "1");
        assert_eq!(a.annotations["manager_lease"], "kube-system/kube-controller-manager");
        assert_eq!(a.annotations["subject_uid"], "uid-nightly");
        assert!(a.annotations["summary"].contains("batch/nightly"), "{}", a.annotations["summary"]);
        let json = serde_json::to_value(a).unwrap();
        assert_eq!(json["startsAt"], json!(time(T0 - 600_000)));
        assert!(json.get("generatorURL").is_none());
    }

    #[test]
    fn firing_is_resent_every_interval_and_after_failed_posts() {
        let mut f = forwarder();
        f.apply("uid-a", record("a", CoverageState::Firing, T0));
        let out = f.due(T0);
        f.delivered(&out, T0);
        assert!(f.due(T0 + RESEND - 1).is_empty(), "nothing before the interval");
        let again = f.due(T0 + RESEND);
        assert_eq!(ends(&again), [("a".to_owned(), time(T0 + 5 * RESEND))]);
        // Not delivered (Alertmanager down): owed at every later instant until it is.
        assert_eq!(f.due(T0 + RESEND + 30_000).alerts.len(), 1);
        f.delivered(&f.due(T0 + 2 * RESEND), T0 + 2 * RESEND);
        assert!(f.due(T0 + 2 * RESEND + 1).is_empty());
    }

    #[test]
    fn a_state_after_firing_resolves_once_ending_at_its_stream_time() {
        for state in [CoverageState::Resolved, CoverageState::ManagerStopped, CoverageState::Ok] {
            let mut f = forwarder();
            f.apply("uid-a", record("a", CoverageState::Firing, T0));
            f.delivered(&f.due(T0), T0);
            f.apply("uid-a", record("a", state, T0 + 90_000));
            let out = f.due(T0 + 100_000);
            assert_eq!(out.alerts.len(), 1, "{state:?}");
            assert_eq!(out.alerts[0].starts_at, time(T0 - 600_000), "same start as the firing alert");
            assert_eq!(out.alerts[0].ends_at, time(T0 + 90_000));
            assert_eq!(out.alerts[0].annotations["state"], state.as_str());
            assert_eq!(f.firing(), 0);
            f.delivered(&out, T0 + 100_000);
            assert!(f.due(T0 + 10 * RESEND).is_empty(), "{state:?}: resolved once, never again");
        }
    }

    #[test]
    fn non_firing_states_without_firing_send_nothing_but_resolved_does() {
        let mut f = forwarder();
        for (i, state) in
            [CoverageState::Ok, CoverageState::Pending, CoverageState::ManagerStopped].into_iter().enumerate()
        {
            f.apply(&format!("uid-{i}"), record(&i.to_string(), state, T0));
        }
        assert!(f.due(T0).is_empty());
        f.apply("uid-r", record("r", CoverageState::Resolved, T0));
        assert_eq!(ends(&f.due(T0 + 1)), [("r".to_owned(), time(T0))]);
    }

    #[test]
    fn resolve_never_ends_in_the_future_nor_before_its_start() {
        let mut f = forwarder();
        f.apply("uid-a", record("a", CoverageState::Firing, T0));
        f.apply("uid-a", record("a", CoverageState::Resolved, T0 + 60_000));
        assert_eq!(f.due(T0).alerts[0].ends_at, time(T0), "clamped to now");
        f.apply("uid-b", record("b", CoverageState::Resolved, T0));
        let early = f.due(T0 - 10_000);
        let b = early.alerts.iter().find(|a| a.labels["cronjob"] == "b").unwrap();
        assert_eq!((b.starts_at.as_str(), b.ends_at.as_str()), (time(T0).as_str(), time(T0).as_str()));
    }

    #[test]
    fn refiring_before_the_resolve_was_delivered_drops_the_resolve() {
        let mut f = forwarder();
        f.apply("uid-a", record("a", CoverageState::Firing, T0));
        f.apply("uid-a", record("a", CoverageState::Resolved, T0 + 1_000));
        f.apply("uid-a", record("a", CoverageState::Firing, T0 + 2_000));
        let out = f.due(T0 + 3_000);
        assert_eq!(out.alerts.len(), 1);
        assert_eq!(out.alerts[0].ends_at, time(T0 + 3_000 + 4 * RESEND), "active");
    }

    #[test]
    fn a_tombstone_resolves_a_firing_subject_and_forgets_it() {
        let mut f = forwarder();
        f.apply("uid-a", record("a", CoverageState::Firing, T0));
        f.apply("uid-b", record("b", CoverageState::Ok, T0));
        f.remove("uid-b", T0 + 1);
        assert_eq!(f.subjects(), 1, "a quiet subject is forgotten at once");
        f.delivered(&f.due(T0), T0);
        f.remove("uid-a", T0 + 5_000);
        let out = f.due(T0 + 6_000);
        assert_eq!(ends(&out), [("a".to_owned(), time(T0 + 5_000))]);
        f.delivered(&out, T0 + 6_000);
        assert_eq!(f.subjects(), 0);
        f.remove("uid-unknown", T0);
    }

    #[test]
    fn a_resolve_is_not_sent_over_a_firing_subject_with_the_same_labels() {
        // CronJob batch/a deleted and re-created: a new UID under the same labels fires.
        let mut f = forwarder();
        f.apply("uid-old", record("a", CoverageState::Firing, T0));
        f.apply("uid-new", record("a", CoverageState::Firing, T0 + 1_000));
        f.remove("uid-old", T0 + 2_000);
        let out = f.due(T0 + 3_000);
        assert_eq!(out.alerts.len(), 1);
        assert!(out.alerts[0].ends_at > time(T0 + 3_000), "only the active one");
        f.delivered(&out, T0 + 3_000);
        assert_eq!(f.subjects(), 1, "the shadowed resolve is settled");
    }

    #[test]
    fn severity_and_generator_url_come_from_the_config() {
        let mut f = Forwarder::new(ForwarderConfig {
            severity: "critical".into(),
            resend_interval_ms: RESEND,
            generator_url: Some("https://grafana.example/d/coverage".into()),
        });
        f.apply("uid-a", record("a", CoverageState::Firing, T0));
        let json = serde_json::to_value(&f.due(T0).alerts).unwrap();
        assert_eq!(json[0]["labels"]["severity"], "critical");
        assert_eq!(json[0]["generatorURL"], "https://grafana.example/d/coverage");
    }
}
