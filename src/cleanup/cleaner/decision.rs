//! The pure core: which decisions are acted on, what a GET's finding means, the DELETE's
//! parameters, and the outcome an API result comes to.

use kube::api::{DeleteParams, Preconditions, PropagationPolicy};

use crate::cleanup::{model::CleanupDecision, outcome::CleanupOutcomeKind};

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

pub(super) fn bounded(mut s: String) -> String {
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
