use std::time::{Duration, Instant};

use kube::api::PropagationPolicy;

use super::{decision::bounded, *};
use crate::cleanup::{
    model::{CleanupDecision, JobRef},
    outcome::CleanupOutcomeKind,
};

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
        (status(404, "NotFound"), CleanupOutcomeKind::AlreadyGone, "get: 404 NotFound: no Job by this name"),
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
    assert_eq!(body, serde_json::json!({"propagationPolicy": "Background", "preconditions": {"uid": UID}}));
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
    let p =
        RetryPolicy { max_attempts: 5, initial: Duration::from_millis(100), max: Duration::from_millis(350) };
    let f = status(500, "InternalError");
    let delays: Vec<_> = (1..=5).map(|a| p.next_delay(a, &f)).collect();
    let ms = |n| Some(Duration::from_millis(n));
    assert_eq!(delays, vec![ms(100), ms(200), ms(350), ms(350), None]);
    for retriable in
        [status(429, "TooManyRequests"), status(503, ""), ApiFailure::Timeout, ApiFailure::Connection]
    {
        assert!(p.next_delay(1, &retriable).is_some(), "{retriable:?}");
    }
    for fatal in
        [status(404, "NotFound"), status(403, "Forbidden"), status(409, "Conflict"), ApiFailure::Unreadable]
    {
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
