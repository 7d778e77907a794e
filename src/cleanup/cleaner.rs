//! `kubefacts cleaner`: applies cleanup decisions to the cluster (DESIGN §5.2;
//! `docs/CLEANER.md` has the outcomes, the exactly-once argument and the RBAC).
//!
//! Pure core here, I/O in [`shell`]:
//!
//! * the decision → request mapping: [`validate`] (a decision that is safe to act on),
//!   [`after_get`] (what a GET's finding means: delete, or a verdict), [`delete_params`]
//!   (the DELETE: UID precondition, background propagation);
//! * outcome classification from an API result: [`ApiFailure`] (an error reduced to its HTTP
//!   status and reason code, never the message), [`failed`], [`deleted`];
//! * [`RetryPolicy`] (which failures are retried, and the backoff) and [`RateLimiter`] (at
//!   most `max_deletes_per_sec` DELETE requests per second), both clock-free: the shell
//!   passes `Instant`s in and sleeps for what they return.
//!
//! [`shell`] consumes decisions read_committed, applies each through `Api<Job>` and writes
//! every outcome in one Kafka transaction with the decisions' offsets.

pub mod shell;

use std::time::{Duration, Instant};

use kube::api::{DeleteParams, Preconditions, PropagationPolicy};
use serde::{Deserialize, Serialize};

use super::{model::CleanupDecision, outcome::CleanupOutcomeKind};

/// Settings of `kubefacts cleaner` (`[cleaner]` in a pipeline file).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CleanerConfig {
    /// Most DELETE requests per second sent to the API server (retries included).
    pub max_deletes_per_sec: u32,
    /// Attempts of one API request (GET or DELETE) on a retriable failure (5xx, 429, a
    /// timeout, a connection failure) before the outcome is ERROR.
    pub max_attempts: u32,
    /// Pause before the first retry, in milliseconds; it doubles with every retry.
    pub retry_backoff_ms: u64,
    /// Longest pause between two retries, in milliseconds.
    pub max_retry_backoff_ms: u64,
    /// How long one API request may take, in milliseconds, before it counts as a timeout.
    pub request_timeout_ms: u64,
    /// Most decisions whose outcomes share one Kafka transaction.
    pub max_decisions_per_transaction: u32,
    /// Longest time spent applying decisions before their outcomes are committed, in
    /// milliseconds (a decision already started is finished first).
    pub commit_interval_ms: u64,
}

impl Default for CleanerConfig {
    fn default() -> Self {
        Self {
            max_deletes_per_sec: 10,
            max_attempts: 4,
            retry_backoff_ms: 500,
            max_retry_backoff_ms: 10_000,
            request_timeout_ms: 10_000,
            max_decisions_per_transaction: 100,
            commit_interval_ms: 1_000,
        }
    }
}

impl CleanerConfig {
    /// The first setting out of range, as (key under `[cleaner]`, why).
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        fn within<T: PartialOrd + std::fmt::Display>(
            key: &'static str,
            v: T,
            lo: T,
            hi: T,
        ) -> Result<(), (&'static str, String)> {
            if v < lo || v > hi { Err((key, format!("{v} is outside {lo}..={hi}"))) } else { Ok(()) }
        }
        within("max_deletes_per_sec", self.max_deletes_per_sec, 1, 1000)?;
        within("max_attempts", self.max_attempts, 1, 10)?;
        within("retry_backoff_ms", self.retry_backoff_ms, 1, 60_000)?;
        within("max_retry_backoff_ms", self.max_retry_backoff_ms, self.retry_backoff_ms, 300_000)?;
        within("request_timeout_ms", self.request_timeout_ms, 100, 120_000)?;
        within("max_decisions_per_transaction", self.max_decisions_per_transaction, 1, 10_000)?;
        within("commit_interval_ms", self.commit_interval_ms, 1, 60_000)?;
        Ok(())
    }

    /// The retry policy these settings give.
    pub fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy {
            max_attempts: self.max_attempts,
            initial: Duration::from_millis(self.retry_backoff_ms),
            max: Duration::from_millis(self.max_retry_backoff_ms),
        }
    }

    /// The longest one decision can take, in milliseconds: a GET and a DELETE, each with
    /// every attempt timing out, waiting for a rate-limiter slot and backing off in between.
    /// The consumer's `max.poll.interval.ms` must exceed a batch's time, which is at most
    /// `commit_interval_ms` plus this.
    pub fn worst_case_decision_ms(&self) -> u64 {
        let attempts = u64::from(self.max_attempts);
        let slot = 1000u64.div_ceil(u64::from(self.max_deletes_per_sec.max(1)));
        let per_request = attempts * (self.request_timeout_ms + slot)
            + attempts.saturating_sub(1) * self.max_retry_backoff_ms;
        2 * per_request
    }
}

/// Longest [`Verdict::detail`], in characters.
pub const MAX_DETAIL_CHARS: usize = 200;

/// Which API request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    /// `GET` the Job (its metadata).
    Get,
    /// `DELETE` the Job.
    Delete,
}

impl Request {
    /// `get` or `delete`, as in details and RBAC verbs.
    pub fn verb(self) -> &'static str {
        match self {
            Self::Get => "get",
            Self::Delete => "delete",
        }
    }
}

/// What a successful GET found: the Job with the decided namespace and name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// Its UID (a re-created Job has another).
    pub uid: String,
    /// `metadata.deletionTimestamp` is set: a deletion is already under way.
    pub deleting: bool,
}

/// A failed API request, reduced to what may leave the process: the HTTP status and the API
/// server's reason code (`NotFound`, `Conflict`, …), or the kind of transport failure.
/// Messages from the cluster are never kept (they are free text).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApiFailure {
    /// The API server answered with an error status.
    Status {
        /// HTTP status.
        code: u16,
        /// The Status `reason`, when it is a plain identifier (else empty).
        reason: String,
    },
    /// No answer within the request timeout.
    Timeout,
    /// The connection failed (refused, reset, TLS, name resolution).
    Connection,
    /// An answer that is neither the object nor a Status (a bug or a proxy in the way).
    Unreadable,
}

impl ApiFailure {
    /// An error status; `reason` is kept only when it is an identifier of at most 64 ASCII
    /// letters and digits, as the API server's reasons are.
    pub fn status(code: u16, reason: &str) -> Self {
        let plain =
            !reason.is_empty() && reason.len() <= 64 && reason.bytes().all(|b| b.is_ascii_alphanumeric());
        Self::Status { code, reason: if plain { reason.to_owned() } else { String::new() } }
    }

    /// Reduces a kube client error.
    pub fn from_kube(e: &kube::Error) -> Self {
        match e {
            kube::Error::Api(status) => Self::status(status.code, &status.reason),
            kube::Error::SerdeError(_) | kube::Error::FromUtf8(_) => Self::Unreadable,
            kube::Error::Service(inner) if is_timeout(inner.as_ref()) => Self::Timeout,
            _ => Self::Connection,
        }
    }

    /// Whether trying again later can succeed: 429, 5xx, timeouts and connection failures.
    pub fn is_retriable(&self) -> bool {
        match self {
            Self::Status { code, .. } => *code == 429 || (500..=599).contains(code),
            Self::Timeout | Self::Connection => true,
            Self::Unreadable => false,
        }
    }

    /// The HTTP status, when an answer arrived.
    pub fn http_status(&self) -> Option<u16> {
        match self {
            Self::Status { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// `409 Conflict`, `timeout`, … (bounded).
    pub fn describe(&self) -> String {
        match self {
            Self::Status { code, reason } if reason.is_empty() => code.to_string(),
            Self::Status { code, reason } => format!("{code} {reason}"),
            Self::Timeout => "timeout".into(),
            Self::Connection => "connection failed".into(),
            Self::Unreadable => "unreadable response".into(),
        }
    }
}

fn is_timeout(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(err) = cur {
        if err.is::<tokio::time::error::Elapsed>()
            || err
                .downcast_ref::<std::io::Error>()
                .is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut)
        {
            return true;
        }
        cur = err.source();
    }
    false
}

/// The verdict on one decision: its outcome and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// What happened.
    pub outcome: CleanupOutcomeKind,
    /// Why, at most [`MAX_DETAIL_CHARS`], from a fixed vocabulary plus status codes.
    pub detail: String,
    /// The HTTP status of the last error response, if the verdict rests on one.
    pub http_status: Option<u16>,
}

impl Verdict {
    fn new(outcome: CleanupOutcomeKind, detail: String, http_status: Option<u16>) -> Self {
        Self { outcome, detail: bounded(detail), http_status }
    }
}

fn bounded(mut s: String) -> String {
    if let Some((i, _)) = s.char_indices().nth(MAX_DETAIL_CHARS) {
        s.truncate(i);
    }
    s
}

/// Why a decision cannot be acted on, for its dead letter: an empty or malformed namespace,
/// name or UID (a DELETE of an empty name would name the whole collection).
pub fn validate(decision: &CleanupDecision) -> Result<(), String> {
    let job = &decision.job;
    // DNS-1123 subdomain characters (Job names), at most 253.
    let name_ok = |s: &str| {
        !s.is_empty()
            && s.len() <= 253
            && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
    };
    if !name_ok(&job.namespace) {
        return Err(format!("namespace {:?} is not a Kubernetes name", job.namespace));
    }
    if !name_ok(&job.name) {
        return Err(format!("name {:?} is not a Kubernetes name", job.name));
    }
    if job.uid.is_empty()
        || job.uid.len() > 128
        || !job.uid.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    {
        return Err(format!("uid {:?} is not a Kubernetes UID", job.uid));
    }
    Ok(())
}

/// What to do after the GET of a decision's Job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AfterGet {
    /// Send the DELETE of [`delete_params`].
    Delete,
    /// Nothing to send: this is the outcome.
    Done(Verdict),
}

/// The decision → request mapping: given what the GET returned after its retries — the Job
/// found, or the failure that ended its attempts and their count — whether to delete. Only
/// the decided UID is ever deleted; a Job already being deleted is not deleted again; a dry
/// run stops here.
pub fn after_get(decided_uid: &str, got: Result<&Found, (&ApiFailure, u32)>, dry_run: bool) -> AfterGet {
    use CleanupOutcomeKind as K;
    let found = match got {
        Ok(found) => found,
        Err((failure, attempts)) => return AfterGet::Done(failed(Request::Get, failure, attempts)),
    };
    if found.uid != decided_uid {
        return AfterGet::Done(Verdict::new(
            K::PreconditionFailed,
            "get: a Job with this name has another UID (re-created): left alone".into(),
            None,
        ));
    }
    if found.deleting {
        return AfterGet::Done(Verdict::new(
            K::AlreadyGone,
            "get: being deleted (deletionTimestamp already set): no second DELETE".into(),
            None,
        ));
    }
    if dry_run {
        return AfterGet::Done(Verdict::new(
            K::WouldDelete,
            "get: the Job exists with the decided UID; dry run: not deleted".into(),
            None,
        ));
    }
    AfterGet::Delete
}

/// The DELETE of a decided Job: only if it still has the decided UID (the API server answers
/// 409 Conflict otherwise), its Pods removed by the garbage collector in the background.
pub fn delete_params(decided_uid: &str) -> DeleteParams {
    DeleteParams {
        preconditions: Some(Preconditions { uid: Some(decided_uid.to_owned()), resource_version: None }),
        propagation_policy: Some(PropagationPolicy::Background),
        ..DeleteParams::default()
    }
}

/// The verdict of an accepted DELETE.
pub fn deleted() -> Verdict {
    Verdict::new(
        CleanupOutcomeKind::Deleted,
        "delete: accepted (UID precondition, background propagation)".into(),
        None,
    )
}

/// The verdict of a request that failed for good after `attempts` attempts. 404 means the Job is gone, 403 forbidden, 409 on the DELETE a failed UID
/// precondition (the Job was re-created between the GET and the DELETE); anything else is
/// an ERROR.
pub fn failed(request: Request, failure: &ApiFailure, attempts: u32) -> Verdict {
    use CleanupOutcomeKind as K;
    let verb = request.verb();
    let what = failure.describe();
    let code = failure.http_status();
    let (outcome, detail) = match (code, request) {
        (Some(404), _) => (K::AlreadyGone, format!("{verb}: {what}: no Job by this name")),
        (Some(403), _) => (K::Forbidden, format!("{verb}: {what}")),
        (Some(409), Request::Delete) => (
            K::PreconditionFailed,
            format!("{verb}: {what}: UID precondition failed (re-created): left alone"),
        ),
        _ if failure.is_retriable() && attempts > 1 => {
            (K::Error, format!("{verb}: {what} after {attempts} attempts"))
        }
        _ => (K::Error, format!("{verb}: {what}")),
    };
    Verdict::new(outcome, detail, code)
}

/// Which failures are retried, how often, and how long to wait in between.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all (1: no retry).
    pub max_attempts: u32,
    /// Pause before the first retry.
    pub initial: Duration,
    /// Longest pause.
    pub max: Duration,
}

impl RetryPolicy {
    /// After `attempts` attempts, the last of which failed with `failure`: the pause before
    /// the next attempt, or `None` to give up (not retriable, or attempts exhausted).
    pub fn next_delay(&self, attempts: u32, failure: &ApiFailure) -> Option<Duration> {
        if !failure.is_retriable() || attempts >= self.max_attempts {
            return None;
        }
        let doublings = attempts.saturating_sub(1).min(20);
        Some(self.initial.saturating_mul(1 << doublings).min(self.max))
    }
}

/// At most `n` requests per second, evenly spaced (a token bucket holding one token): the
/// `k`-th request goes no earlier than `(k - 1) / n` s after the first. Clock-free: the caller
/// passes the time and waits for what [`RateLimiter::reserve`] returns.
#[derive(Debug, Clone)]
pub struct RateLimiter {
    interval: Duration,
    next: Option<Instant>,
}

impl RateLimiter {
    /// A limiter of `n` (at least 1) requests per second.
    pub fn per_second(n: u32) -> Self {
        // Rounded up: never a nanosecond more than `n` per second.
        Self { interval: Duration::from_nanos(1_000_000_000u64.div_ceil(u64::from(n.max(1)))), next: None }
    }

    /// Takes the next slot for a request about to be sent at `now`: how long to wait first.
    /// The slot is taken whether or not the caller then sends.
    pub fn reserve(&mut self, now: Instant) -> Duration {
        let at = self.next.map_or(now, |next| next.max(now));
        self.next = Some(at + self.interval);
        at - now
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cleanup::model::JobRef;

    const UID: &str = "6f1c9a52-3d2e-4b8e-9a51-0c7f7d3f2a10";
    const OTHER: &str = "0b7e1d2c-0000-4000-8000-00000000beef";

    fn decision(namespace: &str, name: &str, uid: &str) -> CleanupDecision {
        CleanupDecision {
            job: JobRef { namespace: namespace.into(), name: name.into(), uid: uid.into() },
            owner: None,
            result: None,
            finished_at: 1_795_946_400_000,
            retention_secs: 3600,
            retention_source: crate::cleanup::RetentionSource::Default,
            decided_at: 1_795_950_000_000,
            sweep: 3,
        }
    }

    fn found(uid: &str) -> Found {
        Found { uid: uid.into(), deleting: false }
    }

    fn status(code: u16, reason: &str) -> ApiFailure {
        ApiFailure::status(code, reason)
    }

    fn done(a: AfterGet) -> Verdict {
        match a {
            AfterGet::Done(v) => v,
            AfterGet::Delete => panic!("expected a verdict, got Delete"),
        }
    }

    #[test]
    fn the_job_with_the_decided_uid_is_deleted_and_only_when_applying() {
        assert_eq!(after_get(UID, Ok(&found(UID)), false), AfterGet::Delete);
        let v = done(after_get(UID, Ok(&found(UID)), true));
        assert_eq!(v.outcome, CleanupOutcomeKind::WouldDelete);
        assert!(v.detail.contains("dry run"), "{}", v.detail);
    }

    #[test]
    fn a_recreated_job_is_never_deleted_in_either_mode() {
        for dry_run in [false, true] {
            let v = done(after_get(UID, Ok(&found(OTHER)), dry_run));
            assert_eq!(v.outcome, CleanupOutcomeKind::PreconditionFailed);
        }
    }

    #[test]
    fn a_job_being_deleted_is_already_gone_without_a_second_delete() {
        let deleting = Found { uid: UID.into(), deleting: true };
        for dry_run in [false, true] {
            let v = done(after_get(UID, Ok(&deleting), dry_run));
            assert_eq!(v.outcome, CleanupOutcomeKind::AlreadyGone);
            assert!(v.detail.contains("being deleted"), "{}", v.detail);
        }
    }

    #[test]
    fn a_failed_get_is_classified_by_status() {
        let cases = [
            (
                status(404, "NotFound"),
                CleanupOutcomeKind::AlreadyGone,
                "get: 404 NotFound: no Job by this name",
            ),
            (status(403, "Forbidden"), CleanupOutcomeKind::Forbidden, "get: 403 Forbidden"),
            (status(500, "InternalError"), CleanupOutcomeKind::Error, "get: 500 InternalError"),
            (ApiFailure::Timeout, CleanupOutcomeKind::Error, "get: timeout"),
            // A 409 only means a failed precondition on the DELETE.
            (status(409, "Conflict"), CleanupOutcomeKind::Error, "get: 409 Conflict"),
        ];
        for (failure, outcome, detail) in cases {
            let v = done(after_get(UID, Err((&failure, 1)), false));
            assert_eq!((v.outcome, v.detail.as_str()), (outcome, detail));
            assert_eq!(v.http_status, failure.http_status());
        }
    }

    #[test]
    fn a_failed_delete_is_classified_by_status() {
        let d = |f: ApiFailure, attempts| failed(Request::Delete, &f, attempts);
        assert_eq!(d(status(409, "Conflict"), 1).outcome, CleanupOutcomeKind::PreconditionFailed);
        assert_eq!(d(status(404, "NotFound"), 2).outcome, CleanupOutcomeKind::AlreadyGone);
        assert_eq!(d(status(403, "Forbidden"), 1).outcome, CleanupOutcomeKind::Forbidden);
        let v = d(status(503, "ServiceUnavailable"), 4);
        assert_eq!(
            (v.outcome, v.detail.as_str(), v.http_status),
            (CleanupOutcomeKind::Error, "delete: 503 ServiceUnavailable after 4 attempts", Some(503))
        );
        let v = d(ApiFailure::Connection, 3);
        assert_eq!((v.detail.as_str(), v.http_status), ("delete: connection failed after 3 attempts", None));
        assert_eq!(d(status(422, "Invalid"), 1).outcome, CleanupOutcomeKind::Error);
        assert_eq!(deleted().outcome, CleanupOutcomeKind::Deleted);
    }

    #[test]
    fn no_free_text_from_the_cluster_reaches_a_detail() {
        // A reason that is not an identifier (a proxy's HTML, a message in the reason field).
        let f = status(502, "<html>Bad gateway: upstream 10.0.0.7 said no</html>");
        assert_eq!(f, ApiFailure::Status { code: 502, reason: String::new() });
        assert_eq!(failed(Request::Get, &f, 1).detail, "get: 502");
        let long = "A".repeat(65);
        assert_eq!(status(500, &long), ApiFailure::Status { code: 500, reason: String::new() });
        let kube = kube::Error::Api(
            kube::core::Status::failure(
                "jobs.batch \"x\" is forbidden: User \"system:sa\" cannot delete",
                "Forbidden",
            )
            .with_code(403)
            .boxed(),
        );
        let v = failed(Request::Delete, &ApiFailure::from_kube(&kube), 1);
        assert_eq!(v.detail, "delete: 403 Forbidden");
        assert!(bounded("é".repeat(500)).chars().count() == MAX_DETAIL_CHARS);
    }

    #[test]
    fn the_delete_carries_the_uid_precondition_and_background_propagation() {
        let dp = delete_params(UID);
        assert_eq!(dp.preconditions.as_ref().and_then(|p| p.uid.as_deref()), Some(UID));
        assert_eq!(dp.preconditions.as_ref().and_then(|p| p.resource_version.as_deref()), None);
        assert_eq!(dp.propagation_policy, Some(PropagationPolicy::Background));
        assert!(!dp.dry_run);
        let body = serde_json::to_value(&dp).unwrap();
        assert_eq!(
            body,
            serde_json::json!({"propagationPolicy": "Background", "preconditions": {"uid": UID}})
        );
    }

    #[test]
    fn only_well_formed_decisions_are_acted_on() {
        assert_eq!(validate(&decision("batch", "nightly-29000000", UID)), Ok(()));
        for bad in [
            decision("", "x", UID),
            decision("batch", "", UID),
            decision("batch", "a/b", UID),
            decision("batch", "x", ""),
            decision("batch", "x", "not a uid"),
            decision("Batch", "x", UID),
        ] {
            assert!(validate(&bad).is_err(), "{:?}", bad.job);
        }
    }

    #[test]
    fn retriable_failures_back_off_exponentially_up_to_the_cap_then_give_up() {
        let p = RetryPolicy {
            max_attempts: 5,
            initial: Duration::from_millis(100),
            max: Duration::from_millis(350),
        };
        let f = status(500, "InternalError");
        let delays: Vec<_> = (1..=5).map(|a| p.next_delay(a, &f)).collect();
        let ms = |n| Some(Duration::from_millis(n));
        assert_eq!(delays, vec![ms(100), ms(200), ms(350), ms(350), None]);
        for retriable in
            [status(429, "TooManyRequests"), status(503, ""), ApiFailure::Timeout, ApiFailure::Connection]
        {
            assert!(p.next_delay(1, &retriable).is_some(), "{retriable:?}");
        }
        for fatal in [
            status(404, "NotFound"),
            status(403, "Forbidden"),
            status(409, "Conflict"),
            ApiFailure::Unreadable,
        ] {
            assert_eq!(p.next_delay(1, &fatal), None, "{fatal:?}");
        }
        let once = RetryPolicy { max_attempts: 1, ..p };
        assert_eq!(once.next_delay(1, &f), None);
    }

    #[test]
    fn the_rate_limiter_spaces_requests_evenly_and_never_bursts() {
        let mut r = RateLimiter::per_second(5);
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        // Ten requests at once: each waits for its slot, 200 ms apart.
        let waits: Vec<_> = (0..10).map(|_| r.reserve(t0)).collect();
        assert_eq!(waits, (0..10).map(|k| ms(200 * k)).collect::<Vec<_>>());
        // Idle time does not save up slots for a burst: after a long pause, one at once,
        // then 200 ms apart again.
        let later = t0 + Duration::from_secs(60);
        assert_eq!(r.reserve(later), Duration::ZERO);
        assert_eq!(r.reserve(later), ms(200));
        // A request arriving after its slot waits nothing.
        assert_eq!(r.reserve(later + ms(1000)), Duration::ZERO);
        // N requests span at least (N - 1) / rate.
        let mut r = RateLimiter::per_second(7);
        let mut now = t0;
        for _ in 0..15 {
            now += r.reserve(now);
        }
        assert!(now - t0 >= Duration::from_secs(2), "{:?}", now - t0);
    }

    #[test]
    fn settings_out_of_range_name_their_key() {
        assert_eq!(CleanerConfig::default().check(), Ok(()));
        let bad = [
            CleanerConfig { max_deletes_per_sec: 0, ..Default::default() },
            CleanerConfig { max_attempts: 0, ..Default::default() },
            CleanerConfig { retry_backoff_ms: 0, ..Default::default() },
            CleanerConfig { max_retry_backoff_ms: 100, ..Default::default() },
            CleanerConfig { request_timeout_ms: 10, ..Default::default() },
            CleanerConfig { max_decisions_per_transaction: 0, ..Default::default() },
            CleanerConfig { commit_interval_ms: 0, ..Default::default() },
        ];
        let keys: Vec<_> = bad.iter().map(|c| c.check().unwrap_err().0).collect();
        assert_eq!(
            keys,
            [
                "max_deletes_per_sec",
                "max_attempts",
                "retry_backoff_ms",
                "max_retry_backoff_ms",
                "request_timeout_ms",
                "max_decisions_per_transaction",
                "commit_interval_ms"
            ]
        );
        let (_, why) = bad[3].check().unwrap_err();
        assert_eq!(why, "100 is outside 500..=300000");
    }

    #[test]
    fn the_worst_case_decision_counts_every_attempt_slot_and_backoff() {
        let cfg = CleanerConfig::default();
        // 2 requests × (4 × (10 000 + 100) + 3 × 10 000) ms.
        assert_eq!(cfg.worst_case_decision_ms(), 2 * (4 * 10_100 + 3 * 10_000));
    }
}
