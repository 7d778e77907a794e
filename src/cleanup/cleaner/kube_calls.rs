//! The Kubernetes calls: a decision's GET and DELETE through `Api<Job>`, retried per the
//! [`RetryPolicy`](super::RetryPolicy) and paced by the [`RateLimiter`](super::RateLimiter).

use std::{
    future::Future,
    time::{Duration, Instant},
};

use k8s_openapi::api::batch::v1::Job;
use kube::Api;

use super::{
    AfterGet, ApiFailure, CleanerConfig, Found, RateLimiter, Request, RetryPolicy, Verdict, after_get,
    delete_params, deleted, failed,
};
use crate::cleanup::model::CleanupDecision;

/// What applying one decision came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    /// The verdict.
    pub verdict: Verdict,
    /// GET and DELETE requests sent, retries included.
    pub api_requests: u32,
}

/// Applies one (valid) decision: GET the Job's metadata, then, when it still has the
/// decided UID, is not being deleted and this is no dry run, DELETE it with the UID
/// precondition and background propagation. Retriable failures are retried per `cfg`;
/// every DELETE attempt first takes a slot from `limiter`.
pub async fn apply(
    client: &kube::Client,
    decision: &CleanupDecision,
    dry_run: bool,
    cfg: &CleanerConfig,
    limiter: &mut RateLimiter,
) -> Applied {
    let job = &decision.job;
    let api: Api<Job> = Api::namespaced(client.clone(), &job.namespace);
    let policy = cfg.retry_policy();
    let timeout = Duration::from_millis(cfg.request_timeout_ms);
    let mut api_requests = 0;
    let got = retrying(policy, timeout, &mut api_requests, None, || api.get_metadata(&job.name)).await.map(
        |meta| Found {
            uid: meta.metadata.uid.unwrap_or_default(),
            deleting: meta.metadata.deletion_timestamp.is_some(),
        },
    );
    let verdict = match after_get(&job.uid, got.as_ref().map_err(|(f, n)| (f, *n)), dry_run) {
        AfterGet::Done(verdict) => verdict,
        AfterGet::Delete => {
            let params = delete_params(&job.uid);
            match retrying(policy, timeout, &mut api_requests, Some(limiter), || {
                api.delete(&job.name, &params)
            })
            .await
            {
                Ok(_) => deleted(),
                Err((failure, attempts)) => failed(Request::Delete, &failure, attempts),
            }
        }
    };
    Applied { verdict, api_requests }
}

/// Sends a request until it succeeds, fails for good, or runs out of attempts; returns the
/// last failure and the attempts made. Counts every request sent in `requests`.
async fn retrying<T, F, Fut>(
    policy: RetryPolicy,
    timeout: Duration,
    requests: &mut u32,
    mut limiter: Option<&mut RateLimiter>,
    mut call: F,
) -> Result<T, (ApiFailure, u32)>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, kube::Error>>,
{
    let mut attempts = 0;
    loop {
        if let Some(limiter) = limiter.as_deref_mut() {
            let wait = limiter.reserve(Instant::now());
            if !wait.is_zero() {
                tokio::time::sleep(wait).await;
            }
        }
        attempts += 1;
        *requests += 1;
        let failure = match tokio::time::timeout(timeout, call()).await {
            Ok(Ok(v)) => return Ok(v),
            Ok(Err(e)) => ApiFailure::from_kube(&e),
            Err(_) => ApiFailure::Timeout,
        };
        match policy.next_delay(attempts, &failure) {
            Some(pause) => {
                tracing::debug!(failure = %failure.describe(), attempts, ?pause, "retrying an API request");
                tokio::time::sleep(pause).await;
            }
            None => return Err((failure, attempts)),
        }
    }
}
