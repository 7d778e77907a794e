//! What `[runs]`'s global input reads of a Job observation of any partition: the dependency
//! holds need only the Job's identity, its annotations and whether it finished. Every task
//! reads every partition of the jobs topic, so each Job record is read once per task as
//! its own partition's Job *and* as this view: reading the view straight from the payload,
//! skipping the rest, keeps the second read cheap and what the global lanes buffer small
//! (the profile showed the second full decode, and dropping it, as a quarter of `[runs]`).

use std::collections::BTreeMap;

use super::finish::terminal;
use crate::{
    codec::direct::{Reader, Unreadable},
    observe::model::{ConditionStatus, JobObservation, ObservationEvent, Source},
};

/// A Job observation as the global input sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobGlance {
    /// Who published it (its epoch ages dependents out after a relist).
    pub source: Source,
    /// What it reports.
    pub event: ObservationEvent,
    /// The Job, for APPLIED and DELETED.
    pub job: Option<GlancedJob>,
}

/// The fields of a Job the dependency holds read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GlancedJob {
    /// `metadata.uid`.
    pub uid: String,
    /// `metadata.namespace`.
    pub namespace: String,
    /// `metadata.annotations` (the dependency annotation is among them, when set).
    pub annotations: BTreeMap<String, String>,
    /// Whether it has finished ([`super::finish::finished`]).
    pub finished: bool,
}

impl JobGlance {
    /// The view of a decoded observation (the slow path, and what debug builds compare the
    /// direct read with).
    pub fn of(obs: &JobObservation) -> Self {
        Self {
            source: obs.source.clone(),
            event: obs.event,
            job: obs.job.as_ref().map(|job| GlancedJob {
                uid: job.meta.uid.clone(),
                namespace: job.meta.namespace.clone(),
                annotations: job.meta.annotations.clone(),
                finished: super::finish::finished(job),
            }),
        }
    }

    /// Reads the view from a `JobObservation` datum of the current schema
    /// (`schemas/job-observation.avsc`), in field order, skipping what it does not keep —
    /// with the same checks as reading it (UTF-8, union indexes, `int` ranges, enum
    /// symbols), so it refuses exactly the datums the full direct read refuses.
    pub fn read(r: &mut Reader<'_>) -> Result<Self, Unreadable> {
        use crate::codec::direct::Datum;
        let source = Source::read(r)?;
        r.long()?; // observed_at
        let event = ObservationEvent::read(r)?;
        let job = r.optional(|r| {
            // ObjectMeta
            let namespace = r.string()?;
            r.str()?; // name
            let uid = r.string()?;
            r.optional(Reader::str)?; // resource_version
            r.optional(Reader::long)?; // creation_timestamp
            r.optional(Reader::long)?; // deletion_timestamp
            skip_string_map(r)?; // labels
            let annotations = r.string_map()?;
            // owner_cronjob: OwnerReference
            r.optional(|r| {
                for _ in 0..3 {
                    r.str()?; // kind, name, uid
                }
                Ok(())
            })?;
            // JobSpec
            for _ in 0..4 {
                r.optional(Reader::int)?; // parallelism, completions, backoff_limit, ttl
            }
            r.optional(Reader::boolean)?; // suspend
            r.optional(Reader::str)?; // completion_mode
            r.optional(Reader::long)?; // active_deadline_seconds
            // JobStatus
            r.optional(Reader::long)?; // start_time
            r.optional(Reader::long)?; // completion_time
            for _ in 0..4 {
                r.optional(Reader::int)?; // active, succeeded, failed, ready
            }
            let uncounted_succeeded = r.int()?;
            let uncounted_failed = r.int()?;
            let mut ended = false;
            r.each(|r| {
                let type_ = r.str()?;
                let status = ConditionStatus::read(r)?;
                r.optional(Reader::str)?; // reason
                r.optional(Reader::long)?; // last_transition_time
                ended |= terminal(type_, status);
                Ok(())
            })?;
            let finished = ended && uncounted_succeeded == 0 && uncounted_failed == 0;
            Ok(GlancedJob { uid, namespace, annotations, finished })
        })?;
        Ok(Self { source, event, job })
    }
}

fn skip_string_map(r: &mut Reader<'_>) -> Result<(), Unreadable> {
    r.each(|r| {
        r.str()?;
        r.str().map(drop)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        codec::direct::Datum,
        observe::model::{Job, JobCondition, ObjectMeta, OwnerReference},
    };

    fn observation(conditions: Vec<JobCondition>, uncounted_failed: i32) -> JobObservation {
        let mut job = Job {
            meta: ObjectMeta {
                namespace: "batch".into(),
                name: "nightly-1".into(),
                uid: "u-1".into(),
                resource_version: Some("7".into()),
                creation_timestamp: Some(1_000),
                deletion_timestamp: None,
                labels: [("app".into(), "nightly".into())].into(),
                annotations: [("kubefacts.io/depends-on".into(), "a, b".into())].into(),
            },
            owner_cronjob: Some(OwnerReference {
                kind: "CronJob".into(),
                name: "nightly".into(),
                uid: "c-1".into(),
            }),
            spec: Default::default(),
            status: Default::default(),
        };
        job.spec.parallelism = Some(2);
        job.spec.completion_mode = Some("NonIndexed".into());
        job.status.conditions = conditions;
        job.status.uncounted_failed = uncounted_failed;
        JobObservation {
            source: Source { cluster: "c".into(), instance: "w-0".into(), epoch: 3 },
            observed_at: 5_000,
            event: ObservationEvent::Applied,
            job: Some(job),
        }
    }

    fn condition(type_: &str, status: ConditionStatus) -> JobCondition {
        JobCondition { type_: type_.into(), status, reason: Some("r".into()), last_transition_time: Some(9) }
    }

    fn glance_bytes(obs: &JobObservation) -> Result<JobGlance, Unreadable> {
        let mut bytes = Vec::new();
        obs.write(&mut bytes);
        let mut r = Reader::new(&bytes);
        let glance = JobGlance::read(&mut r)?;
        assert!(r.is_empty(), "the view read the whole datum");
        Ok(glance)
    }

    #[test]
    fn the_direct_view_is_the_view_of_the_decoded_observation() {
        for obs in [
            observation(vec![], 0),
            observation(vec![condition("Complete", ConditionStatus::True)], 0),
            observation(vec![condition("Complete", ConditionStatus::True)], 1),
            observation(vec![condition("Failed", ConditionStatus::False)], 0),
            JobObservation { job: None, event: ObservationEvent::SnapshotEnd, ..observation(vec![], 0) },
        ] {
            assert_eq!(glance_bytes(&obs), Ok(JobGlance::of(&obs)), "{obs:?}");
        }
        let done = glance_bytes(&observation(vec![condition("Complete", ConditionStatus::True)], 0)).unwrap();
        assert!(done.job.unwrap().finished);
    }

    #[tokio::test]
    async fn the_global_lane_made_from_the_decoded_job_is_what_decoding_it_again_gives() {
        use crate::{
            codec::{Codec, single_object_writer},
            journal::wiring::{RunsIn, RunsInput},
            runtime::DecodeInput,
        };
        let codec = Codec::new(None).unwrap();
        let writer = single_object_writer(&codec, JobObservation::FULL_NAME).unwrap();
        let obs = observation(vec![condition("Complete", ConditionStatus::True)], 0);
        let bytes = writer.encode_direct(&obs).unwrap();
        let (jobs, all) = (RunsIn::Jobs as usize, RunsIn::AllJobs as usize);
        let job = RunsInput::decode(jobs, &codec, &bytes).await.unwrap();
        let again = RunsInput::decode(all, &codec, &bytes).await.unwrap();
        assert!(matches!(again, RunsInput::AnyJob(_)), "{again:?}");
        assert_eq!(job.view_as(all), Some(again));
        // Only the Jobs lane has a global view; the view itself has none.
        assert_eq!(job.view_as(jobs), None);
        assert_eq!(RunsInput::decode(all, &codec, &bytes).await.unwrap().view_as(all), None);
    }

    #[test]
    fn a_skipped_field_refuses_what_reading_it_refuses() {
        let obs = observation(vec![], 0);
        let mut bytes = Vec::new();
        obs.write(&mut bytes);
        // The Job's name (skipped by the view) made invalid UTF-8, its length unchanged.
        let at = bytes.windows(9).position(|w| w == b"nightly-1").unwrap();
        bytes[at] = 0xff;
        assert_eq!(JobObservation::read(&mut Reader::new(&bytes)), Err(Unreadable));
        assert_eq!(JobGlance::read(&mut Reader::new(&bytes)), Err(Unreadable));
    }
}
