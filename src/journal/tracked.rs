//! How `[runs]` keeps a Job in its changelogged state: every tracked Job is restored on
//! each rebalance, so its bytes count (docs/BENCHMARKS.md, "state per tracked Job").
//!
//! * Once its run is filed, a Job keeps only what the cleanup sweep and its decision read
//!   ([`trim_filed`]): the counters, declared spec and intermediate conditions are in the
//!   fact already.
//! * UIDs — the Job's and its CronJob's — are stored as their 16 bytes rather than 36
//!   characters of text ([`job`]); anything that is not a canonical lowercase UUID is
//!   stored as text, so every value round-trips exactly.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::observe::model::{ConditionStatus, Job, JobSpec, JobStatus, ObjectMeta, OwnerReference};

/// Bounds what a tracked Job keeps of its conditions, whatever its observation carried —
/// the watcher bounds them already, a hand-made record need not have been:
/// [`crate::observe::minimize::bounds::job`] (one per type, the latest by
/// `lastTransitionTime`, at most 16 types, reasons cut to 256 bytes).
/// A Job as the API server keeps it has one condition per type, so
/// for it nothing changes; a crafted observation with 300 000 conditions becomes a few.
pub fn bound_conditions(job: &mut Job) {
    crate::observe::minimize::bounds::job(job);
}

/// Clears what nothing reads once `job`'s run is filed. What the sweep and the decision
/// read stays: namespace, name, UID, deletion time, owner, TTL, suspension, completion time
/// and the True `Complete`/`Failed` conditions (the reason only on `Failed`), so
/// [`super::finish::finish`] gives the same result, finish time and reason as before
/// (`first_seen_finished` as there); the creation and start times stay only where the finish
/// time depends on them. A Job that is not finished (which a filed Job cannot become again)
/// keeps its conditions.
pub fn trim_filed(job: &mut Job, first_seen_finished: Option<i64>) {
    let finish = super::finish::finish(job, first_seen_finished);
    let creation = job.meta.creation_timestamp.take();
    let start = job.status.start_time;
    let meta = &mut job.meta;
    meta.resource_version = None;
    meta.labels.clear();
    meta.annotations.clear();
    job.spec = JobSpec {
        ttl_seconds_after_finished: job.spec.ttl_seconds_after_finished,
        suspend: job.spec.suspend,
        ..JobSpec::default()
    };
    let status = &mut job.status;
    if finish.is_some() {
        status.conditions.retain(|c| {
            c.status == ConditionStatus::True && matches!(c.type_.as_str(), "Complete" | "Failed")
        });
        for c in status.conditions.iter_mut().filter(|c| c.type_ == "Complete") {
            c.reason = None;
        }
    }
    *status = JobStatus {
        completion_time: status.completion_time,
        uncounted_succeeded: status.uncounted_succeeded,
        uncounted_failed: status.uncounted_failed,
        conditions: std::mem::take(&mut status.conditions),
        ..JobStatus::default()
    };
    if super::finish::finish(job, first_seen_finished) != finish {
        job.meta.creation_timestamp = creation;
        job.status.start_time = start;
    }
}

/// `#[serde(with = "tracked::job")]` for `Option<Job>`: the Job with binary UIDs. The
/// writer borrows, the reader owns; both list the fields in the same order (postcard is
/// positional), which the round-trip test pins.
pub mod job {
    use super::*;

    const CRONJOB: &str = crate::observe::Kind::CronJob.as_str();

    #[derive(Serialize)]
    struct Out<'a> {
        namespace: &'a str,
        name: &'a str,
        uid: UidOut<'a>,
        resource_version: &'a Option<String>,
        creation_timestamp: Option<i64>,
        deletion_timestamp: Option<i64>,
        labels: &'a std::collections::BTreeMap<String, String>,
        annotations: &'a std::collections::BTreeMap<String, String>,
        /// (kind unless `CronJob`, which it is by construction; name; UID)
        owner_cronjob: Option<(Option<&'a str>, &'a str, UidOut<'a>)>,
        spec: &'a JobSpec,
        status: &'a JobStatus,
    }

    #[derive(Deserialize)]
    struct In {
        namespace: String,
        name: String,
        uid: UidIn,
        resource_version: Option<String>,
        creation_timestamp: Option<i64>,
        deletion_timestamp: Option<i64>,
        labels: std::collections::BTreeMap<String, String>,
        annotations: std::collections::BTreeMap<String, String>,
        owner_cronjob: Option<(Option<String>, String, UidIn)>,
        spec: JobSpec,
        status: JobStatus,
    }

    pub fn serialize<S: Serializer>(job: &Option<Job>, s: S) -> Result<S::Ok, S::Error> {
        job.as_ref()
            .map(|j| Out {
                namespace: &j.meta.namespace,
                name: &j.meta.name,
                uid: UidOut(&j.meta.uid),
                resource_version: &j.meta.resource_version,
                creation_timestamp: j.meta.creation_timestamp,
                deletion_timestamp: j.meta.deletion_timestamp,
                labels: &j.meta.labels,
                annotations: &j.meta.annotations,
                owner_cronjob: j.owner_cronjob.as_ref().map(|o| {
                    ((o.kind != CRONJOB).then_some(o.kind.as_str()), o.name.as_str(), UidOut(&o.uid))
                }),
                spec: &j.spec,
                status: &j.status,
            })
            .serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Job>, D::Error> {
        Ok(Option::<In>::deserialize(d)?.map(|j| Job {
            meta: ObjectMeta {
                namespace: j.namespace,
                name: j.name,
                uid: j.uid.into_string(),
                resource_version: j.resource_version,
                creation_timestamp: j.creation_timestamp,
                deletion_timestamp: j.deletion_timestamp,
                labels: j.labels,
                annotations: j.annotations,
            },
            owner_cronjob: j.owner_cronjob.map(|(kind, name, uid)| OwnerReference {
                kind: kind.unwrap_or_else(|| CRONJOB.to_owned()),
                name,
                uid: uid.into_string(),
            }),
            spec: j.spec,
            status: j.status,
        }))
    }
}

/// A UID as written: its 16 bytes when it is a canonical lowercase UUID, else its text.
struct UidOut<'a>(&'a str);

impl Serialize for UidOut<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match uuid_bytes(self.0) {
            Some(bytes) => s.serialize_newtype_variant("Uid", 0, "Bytes", &bytes),
            None => s.serialize_newtype_variant("Uid", 1, "Text", self.0),
        }
    }
}

/// A UID as read back.
#[derive(Deserialize)]
enum UidIn {
    Bytes([u8; 16]),
    Text(String),
}

impl UidIn {
    fn into_string(self) -> String {
        match self {
            UidIn::Text(text) => text,
            UidIn::Bytes(b) => {
                // Read on every restore: one allocation, not one per byte.
                const HEX: &[u8; 16] = b"0123456789abcdef";
                let mut text = String::with_capacity(36);
                for (i, byte) in b.iter().enumerate() {
                    if matches!(i, 4 | 6 | 8 | 10) {
                        text.push('-');
                    }
                    text.push(HEX[usize::from(byte >> 4)] as char);
                    text.push(HEX[usize::from(byte & 0xf)] as char);
                }
                text
            }
        }
    }
}

/// The 16 bytes of a canonical lowercase hyphenated UUID (`8-4-4-4-12`), `None` for any
/// other text (which is then stored as it is).
fn uuid_bytes(text: &str) -> Option<[u8; 16]> {
    let t = text.as_bytes();
    if t.len() != 36 || [8, 13, 18, 23].iter().any(|&i| t[i] != b'-') {
        return None;
    }
    let nibble = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    let mut digits = t.iter().copied().filter(|&c| c != b'-');
    let mut out = [0u8; 16];
    for byte in &mut out {
        *byte = nibble(digits.next()?)? << 4 | nibble(digits.next()?)?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::{runs::finish, state::TrackedJob};
    use crate::observe::{
        minimize::bounds::{MAX_CONDITION_TYPES, MAX_REASON_BYTES},
        model::JobCondition,
    };

    fn job(uid: &str, owner_uid: &str) -> Job {
        let condition = |type_: &str, reason: &str| JobCondition {
            type_: type_.into(),
            status: ConditionStatus::True,
            reason: Some(reason.into()),
            last_transition_time: Some(1_700_000_060_000),
        };
        Job {
            meta: ObjectMeta {
                namespace: "etl".into(),
                name: "nightly-29000000".into(),
                uid: uid.into(),
                resource_version: Some("1547954".into()),
                creation_timestamp: Some(1_700_000_000_000),
                deletion_timestamp: None,
                labels: [("team".to_owned(), "data".to_owned())].into(),
                annotations: [("kubefacts.io/needs".to_owned(), "a,b".to_owned())].into(),
            },
            owner_cronjob: Some(OwnerReference {
                kind: "CronJob".into(),
                name: "nightly".into(),
                uid: owner_uid.into(),
            }),
            spec: JobSpec {
                parallelism: Some(1),
                completions: Some(1),
                backoff_limit: Some(2),
                ttl_seconds_after_finished: Some(300),
                suspend: Some(false),
                completion_mode: Some("NonIndexed".into()),
                active_deadline_seconds: Some(600),
            },
            status: JobStatus {
                start_time: Some(1_700_000_001_000),
                completion_time: None,
                active: Some(0),
                succeeded: Some(0),
                failed: Some(3),
                ready: Some(0),
                uncounted_succeeded: 0,
                uncounted_failed: 0,
                conditions: vec![
                    condition("FailureTarget", "BackoffLimitExceeded"),
                    condition("Failed", "BackoffLimitExceeded"),
                ],
            },
        }
    }

    fn round_trip(t: &TrackedJob) -> (TrackedJob, usize) {
        let bytes = postcard::to_allocvec(t).unwrap();
        (postcard::from_bytes(&bytes).unwrap(), bytes.len())
    }

    /// Canonical UIDs take 16 bytes, anything else is kept as text; both read back equal.
    #[test]
    fn uids_are_stored_as_bytes_and_every_job_reads_back_equal() {
        let canonical = TrackedJob {
            job: Some(job("0042a8db-b648-4bec-ad91-a4c502ed3893", "3ac268e4-b9ca-48e1-8fe6-483940439fa0")),
            ..TrackedJob::default()
        };
        let (back, canonical_len) = round_trip(&canonical);
        assert_eq!(back, canonical);
        for odd in
            ["0042A8DB-B648-4BEC-AD91-A4C502ED3893", "not-a-uid", "", "0042a8db-b648-4bec-ad91-a4c502ed389g"]
        {
            let t = TrackedJob { job: Some(job(odd, odd)), ..TrackedJob::default() };
            assert_eq!(round_trip(&t).0, t, "{odd:?}");
        }
        let text = TrackedJob {
            job: Some(job("0042a8db_b648_4bec_ad91_a4c502ed3893", "3ac268e4_b9ca_48e1_8fe6_483940439fa0")),
            ..TrackedJob::default()
        };
        assert_eq!(
            round_trip(&text).1 - canonical_len,
            2 * 21,
            "length + 36 characters against 16 bytes, each"
        );
        assert_eq!(round_trip(&TrackedJob::default()).0, TrackedJob::default());
        let mut other_kind = canonical.clone();
        other_kind.job.as_mut().unwrap().owner_cronjob.as_mut().unwrap().kind = "Other".into();
        assert_eq!(round_trip(&other_kind).0, other_kind);
    }

    /// Trimming keeps what the sweep and the decision read, and `finish` agrees before
    /// and after; the trimmed Job is smaller.
    #[test]
    fn a_trimmed_job_finishes_the_same() {
        let full = job("0042a8db-b648-4bec-ad91-a4c502ed3893", "3ac268e4-b9ca-48e1-8fe6-483940439fa0");
        let mut trimmed = full.clone();
        trim_filed(&mut trimmed, None);
        assert_eq!(finish(&trimmed, None), finish(&full, None));
        assert!(finish(&full, None).is_some());
        assert_eq!(trimmed.meta.namespace, full.meta.namespace);
        assert_eq!(trimmed.meta.name, full.meta.name);
        assert_eq!(trimmed.meta.uid, full.meta.uid);
        assert_eq!(trimmed.meta.creation_timestamp, None, "the Failed condition has the finish time");
        assert_eq!(trimmed.owner_cronjob, full.owner_cronjob);
        assert_eq!(trimmed.spec.ttl_seconds_after_finished, Some(300));
        assert_eq!(trimmed.spec.suspend, Some(false));
        assert_eq!(trimmed.status.conditions.len(), 1, "FailureTarget goes, Failed stays");
        let size = |j: Job| round_trip(&TrackedJob { job: Some(j), ..TrackedJob::default() }).1;
        assert!(size(trimmed) + 60 < size(full.clone()));
        // Without a finish time the creation time stands in, and stays.
        let mut timeless = full.clone();
        timeless.status.conditions.iter_mut().for_each(|c| c.last_transition_time = None);
        let mut kept = timeless.clone();
        trim_filed(&mut kept, None);
        assert_eq!(finish(&kept, None), finish(&timeless, None));
        assert_eq!(kept.meta.creation_timestamp, full.meta.creation_timestamp);
        // When the Job was first seen finished is better evidence than its creation, which
        // then goes.
        let seen = Some(1_700_000_090_000);
        let mut kept = timeless.clone();
        trim_filed(&mut kept, seen);
        assert_eq!(finish(&kept, seen), finish(&timeless, seen));
        assert_eq!(finish(&kept, seen).unwrap().1, 1_700_000_090_000);
        assert_eq!(kept.meta.creation_timestamp, None);
        // A finish time before the start is the start, and the start time then stays.
        let mut early = full.clone();
        early.status.start_time = Some(1_800_000_000_000);
        let mut kept = early.clone();
        trim_filed(&mut kept, None);
        assert_eq!(finish(&kept, None).unwrap().1, 1_800_000_000_000);
        assert_eq!(kept.status.start_time, early.status.start_time);
        // A success keeps `Complete` without its reason (a run's reason is its failure's).
        let mut success = full.clone();
        success.status.conditions = vec![JobCondition {
            type_: "Complete".into(),
            status: ConditionStatus::True,
            reason: Some("CompletionsReached".into()),
            last_transition_time: Some(1_700_000_060_000),
        }];
        success.status.completion_time = Some(1_700_000_060_000);
        let mut kept = success.clone();
        trim_filed(&mut kept, None);
        assert_eq!(finish(&kept, None), finish(&success, None));
        assert_eq!(kept.status.conditions[0].reason, None);
        // Not finished: the conditions are all kept.
        let mut pending = full.clone();
        pending.status.conditions.retain(|c| c.type_ == "FailureTarget");
        let mut kept = pending.clone();
        trim_filed(&mut kept, None);
        assert_eq!(kept.status.conditions, pending.status.conditions);
    }

    #[test]
    fn a_job_keeps_one_condition_per_type_whatever_it_carried() {
        let mut j = job("0042a8db-b648-4bec-ad91-a4c502ed3893", "3ac268e4-b9ca-48e1-8fe6-483940439fa0");
        let condition = |t: &str, at: i64| JobCondition {
            type_: t.into(),
            status: ConditionStatus::True,
            reason: Some("R".repeat(1_000)),
            last_transition_time: Some(at),
        };
        j.status.conditions =
            (0..300_000).map(|i| condition(if i % 2 == 0 { "Failed" } else { "Progress" }, i)).collect();
        j.status.conditions.extend((0..40).map(|i| condition(&format!("T{i}"), 0)));
        let normal = |j: &Job| {
            let mut n = j.clone();
            bound_conditions(&mut n);
            n
        };
        let bounded = normal(&j);
        let types: Vec<_> = bounded.status.conditions.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(types.len(), MAX_CONDITION_TYPES);
        assert_eq!(types[..3], ["Failed", "Progress", "T0"]);
        assert_eq!(bounded.status.conditions[0].last_transition_time, Some(299_998), "the latest Failed");
        assert!(
            bounded.status.conditions.iter().all(|c| c.reason.as_ref().unwrap().len() == MAX_REASON_BYTES)
        );
        let one_each = normal(&bounded);
        assert_eq!(one_each, bounded, "a Job with one condition per type is kept as it is");
    }
}
