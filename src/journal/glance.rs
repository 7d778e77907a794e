//! Views: what `[runs]` reads of an observation, straight from the payload, skipping the
//! rest (a skipped string is checked in place, borrowed, never copied).
//!
//! * [`JobGlance`], of a Job observation of any partition (the global input): the
//!   dependency holds need only the Job's identity, its annotations and whether it
//!   finished. Every task reads every partition of the jobs topic, so each Job record is read
//!   once per task as its own partition's Job *and* as this view: reading the view keeps the
//!   second read cheap and what the global lanes buffer small (the profile showed the second
//!   full decode, and dropping it, as a quarter of `[runs]`).
//! * [`PodGlance`], of a Pod observation: the run needs only which Job controls the Pod and
//!   its containers' terminations. A full decode copied every label, annotation, name and
//!   resource request into owned strings and maps, for the one in a few Pod observations
//!   that brings a new termination.

use std::collections::BTreeMap;

use super::finish::terminal;
use crate::{
    codec::direct::{Reader, Unreadable},
    observe::{
        Kind,
        model::{
            ConditionStatus, ContainerTermination, JobObservation, ObservationEvent, PodObservation,
            PodPhase, Source,
        },
    },
};

/// A Job observation as the global input sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobGlance {
    /// Who published it (its epoch ages dependents out after a relist).
    pub source: Source,
    /// When it was observed, epoch ms.
    pub observed_at: i64,
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
            observed_at: obs.observed_at,
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
        let observed_at = r.long()?;
        let event = ObservationEvent::read(r)?;
        let job = r.optional(|r| {
            // ObjectMeta
            let namespace = r.string()?;
            r.str()?; // name
            let uid = r.string()?;
            skip_meta_between_uid_and_annotations(r)?;
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
        Ok(Self { source, observed_at, event, job })
    }
}

/// A Pod observation as `[runs]` reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodGlance {
    /// Who published it.
    pub source: Source,
    /// When it was observed, epoch ms.
    pub observed_at: i64,
    /// What it reports.
    pub event: ObservationEvent,
    /// The Pod, for APPLIED and DELETED.
    pub pod: Option<GlancedPod>,
}

/// What a run takes of a Pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GlancedPod {
    /// The UID of the Job that controls the Pod; `None` for any other Pod (bare, a
    /// session's, another controller's), whose terminations are then not read.
    pub job_uid: Option<String>,
    /// The terminations of a Job's Pod: of every container, then every init container, in
    /// spec order, the last terminated state and then the current one.
    pub terminations: Vec<Termination>,
}

/// One terminated state of a container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Termination {
    /// Its identity: the container id, else `<pod uid>/<container>/<finishedAt>/<exit code>`
    /// (what distinguishes it within the Pod).
    pub id: String,
    /// The container's name.
    pub container: String,
    /// `exitCode`.
    pub exit_code: i32,
    /// `reason`.
    pub reason: Option<String>,
}

impl Termination {
    fn of(
        pod_uid: &str,
        container: &str,
        exit_code: i32,
        reason: Option<String>,
        finished_at: Option<i64>,
        container_id: Option<&str>,
    ) -> Self {
        let id = match container_id {
            Some(id) if !id.is_empty() => id.to_owned(),
            _ => format!(
                "{pod_uid}/{container}/{}/{exit_code}",
                finished_at.map_or_else(|| "?".into(), |f| f.to_string()),
            ),
        };
        Self { id, container: container.to_owned(), exit_code, reason }
    }
}

impl PodGlance {
    /// The view of a decoded observation (the slow path, and what debug builds compare the
    /// direct read with).
    pub fn of(obs: &PodObservation) -> Self {
        Self {
            source: obs.source.clone(),
            observed_at: obs.observed_at,
            event: obs.event,
            pod: obs.pod.as_ref().map(|pod| {
                let job_uid = pod.controller.as_ref().filter(|c| c.kind == Kind::Job).map(|c| c.uid.clone());
                let mut terminations = Vec::new();
                if job_uid.is_some() {
                    for c in pod.containers.iter().chain(&pod.init_containers) {
                        for t in [&c.last_state, &c.state].into_iter().flatten() {
                            let ContainerTermination {
                                exit_code,
                                ref reason,
                                finished_at,
                                ref container_id,
                                ..
                            } = *t;
                            terminations.push(Termination::of(
                                &pod.meta.uid,
                                &c.name,
                                exit_code,
                                reason.clone(),
                                finished_at,
                                container_id.as_deref(),
                            ));
                        }
                    }
                }
                GlancedPod { job_uid, terminations }
            }),
        }
    }

    /// Reads the view from a `PodObservation` datum of the current schema
    /// (`schemas/pod-observation.avsc`), in field order, with the same checks as reading it
    /// whole, so it refuses exactly the datums the full direct read refuses.
    pub fn read(r: &mut Reader<'_>) -> Result<Self, Unreadable> {
        use crate::codec::direct::Datum;
        let source = Source::read(r)?;
        let observed_at = r.long()?;
        let event = ObservationEvent::read(r)?;
        let pod = r.optional(|r| {
            // ObjectMeta
            r.str()?; // namespace
            r.str()?; // name
            let uid = r.str()?;
            skip_meta_between_uid_and_annotations(r)?;
            skip_string_map(r)?; // annotations
            // controller: OwnerReference
            let job_uid = r.optional(|r| {
                let kind = r.str()?;
                r.str()?; // name
                let uid = r.str()?;
                Ok((kind == Kind::Job).then(|| uid.to_owned()))
            })?;
            let job_uid = job_uid.flatten();
            PodPhase::read(r)?;
            let mut terminations = Vec::new();
            let mut container = |r: &mut Reader<'_>| -> Result<(), Unreadable> {
                let name = r.str()?;
                r.optional(Reader::str)?; // requests_cpu
                r.optional(Reader::str)?; // requests_memory
                r.int()?; // restart_count
                // state, then last_state; a run lists the last state first.
                let mut states = [None, None];
                for state in &mut states {
                    *state = r.optional(|r| {
                        let exit_code = r.int()?;
                        let reason = r.optional(Reader::str)?;
                        r.optional(Reader::int)?; // exit_signal
                        r.optional(Reader::long)?; // started_at
                        let finished_at = r.optional(Reader::long)?;
                        let container_id = r.optional(Reader::str)?;
                        Ok((exit_code, reason, finished_at, container_id))
                    })?;
                }
                if job_uid.is_some() {
                    let [state, last_state] = states;
                    for (exit_code, reason, finished_at, container_id) in
                        [last_state, state].into_iter().flatten()
                    {
                        terminations.push(Termination::of(
                            uid,
                            name,
                            exit_code,
                            reason.map(str::to_owned),
                            finished_at,
                            container_id,
                        ));
                    }
                }
                Ok(())
            };
            r.each(&mut container)?; // containers
            r.each(&mut container)?; // init_containers
            Ok(GlancedPod { job_uid, terminations })
        })?;
        Ok(Self { source, observed_at, event, pod })
    }
}

/// Skips an `ObjectMeta`'s `resource_version`, `creation_timestamp`,
/// `deletion_timestamp` and `labels`, which neither view keeps.
fn skip_meta_between_uid_and_annotations(r: &mut Reader<'_>) -> Result<(), Unreadable> {
    r.optional(Reader::str)?;
    r.optional(Reader::long)?;
    r.optional(Reader::long)?;
    skip_string_map(r)
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
        observe::model::{ContainerObservation, Job, JobCondition, ObjectMeta, OwnerReference, Pod},
    };

    fn source() -> Source {
        Source { cluster: "c".into(), instance: "w-0".into(), epoch: 3 }
    }

    /// Metadata in namespace `batch` with one label and one annotation.
    fn meta(name: &str, uid: &str, label: (&str, &str), annotation: (&str, &str)) -> ObjectMeta {
        ObjectMeta {
            namespace: "batch".into(),
            name: name.into(),
            uid: uid.into(),
            resource_version: Some("7".into()),
            creation_timestamp: Some(1_000),
            deletion_timestamp: None,
            labels: [(label.0.into(), label.1.into())].into(),
            annotations: [(annotation.0.into(), annotation.1.into())].into(),
        }
    }

    fn observation(conditions: Vec<JobCondition>, uncounted_failed: i32) -> JobObservation {
        let mut job = Job {
            meta: meta("nightly-1", "u-1", ("app", "nightly"), ("kubefacts.io/depends-on", "a, b")),
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
            source: source(),
            observed_at: 5_000,
            event: ObservationEvent::Applied,
            job: Some(job),
        }
    }

    fn condition(type_: &str, status: ConditionStatus) -> JobCondition {
        JobCondition { type_: type_.into(), status, reason: Some("r".into()), last_transition_time: Some(9) }
    }

    /// The view `read` takes of `obs` written out, checking it read the whole datum.
    fn view_of<T: Datum, V>(
        obs: &T,
        read: impl FnOnce(&mut Reader<'_>) -> Result<V, Unreadable>,
    ) -> Result<V, Unreadable> {
        let mut bytes = Vec::new();
        obs.write(&mut bytes);
        let mut r = Reader::new(&bytes);
        let view = read(&mut r)?;
        assert!(r.is_empty(), "the view read the whole datum");
        Ok(view)
    }

    fn glance_bytes(obs: &JobObservation) -> Result<JobGlance, Unreadable> {
        view_of(obs, JobGlance::read)
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

    /// `obs` written out, with its name (which both views skip) made invalid UTF-8, its
    /// length unchanged.
    fn name_broken(obs: &impl Datum) -> Vec<u8> {
        let mut bytes = Vec::new();
        obs.write(&mut bytes);
        let at = bytes.windows(9).position(|w| w == b"nightly-1").unwrap();
        bytes[at] = 0xff;
        bytes
    }

    #[test]
    fn a_skipped_field_refuses_what_reading_it_refuses() {
        let bytes = name_broken(&observation(vec![], 0));
        assert_eq!(JobObservation::read(&mut Reader::new(&bytes)), Err(Unreadable));
        assert_eq!(JobGlance::read(&mut Reader::new(&bytes)), Err(Unreadable));
    }

    fn termination(
        exit_code: i32,
        finished_at: Option<i64>,
        container_id: Option<&str>,
    ) -> ContainerTermination {
        ContainerTermination {
            exit_code,
            reason: Some("Error".into()),
            exit_signal: None,
            started_at: Some(1),
            finished_at,
            container_id: container_id.map(Into::into),
        }
    }

    fn container(
        name: &str,
        state: Option<ContainerTermination>,
        last_state: Option<ContainerTermination>,
    ) -> ContainerObservation {
        ContainerObservation {
            name: name.into(),
            requests_cpu: Some("250m".into()),
            requests_memory: Some("64Mi".into()),
            restart_count: 1,
            state,
            last_state,
        }
    }

    fn pod_observation(controller_kind: &str) -> PodObservation {
        PodObservation {
            source: source(),
            observed_at: 5_000,
            event: ObservationEvent::Applied,
            pod: Some(Pod {
                meta: meta("nightly-1-abcde", "p-1", ("job-name", "nightly-1"), ("note", "x")),
                controller: Some(OwnerReference {
                    kind: controller_kind.into(),
                    name: "nightly-1".into(),
                    uid: "u-1".into(),
                }),
                phase: PodPhase::Failed,
                containers: vec![
                    container(
                        "main",
                        Some(termination(1, Some(70), Some("containerd://b"))),
                        Some(termination(2, Some(40), Some("containerd://a"))),
                    ),
                    container("side", None, None),
                ],
                init_containers: vec![container("init", Some(termination(0, Some(20), Some(""))), None)],
            }),
        }
    }

    fn pod_glance_bytes(obs: &PodObservation) -> Result<PodGlance, Unreadable> {
        view_of(obs, PodGlance::read)
    }

    #[test]
    fn a_job_pods_view_lists_its_terminations_last_state_first() {
        let obs = pod_observation("Job");
        let glance = pod_glance_bytes(&obs).unwrap();
        assert_eq!(glance, PodGlance::of(&obs));
        let pod = glance.pod.unwrap();
        assert_eq!(pod.job_uid.as_deref(), Some("u-1"));
        let seen: Vec<(&str, &str, i32)> =
            pod.terminations.iter().map(|t| (t.id.as_str(), t.container.as_str(), t.exit_code)).collect();
        // An empty container id is no identity: the Pod's UID, container, finish and code are.
        assert_eq!(
            seen,
            [("containerd://a", "main", 2), ("containerd://b", "main", 1), ("p-1/init/20/0", "init", 0)]
        );
        assert_eq!(pod.terminations[0].reason.as_deref(), Some("Error"));
    }

    #[test]
    fn another_controllers_pod_has_no_run_to_count_for() {
        for obs in [
            pod_observation("ReplicaSet"),
            PodObservation { pod: None, event: ObservationEvent::Heartbeat, ..pod_observation("Job") },
        ] {
            let glance = pod_glance_bytes(&obs).unwrap();
            assert_eq!(glance, PodGlance::of(&obs), "{obs:?}");
            if let Some(pod) = glance.pod {
                assert_eq!((pod.job_uid, pod.terminations.len()), (None, 0));
            }
        }
    }

    #[test]
    fn a_skipped_pod_field_refuses_what_reading_it_refuses() {
        let bytes = name_broken(&pod_observation("Job"));
        assert_eq!(PodObservation::read(&mut Reader::new(&bytes)), Err(Unreadable));
        assert_eq!(PodGlance::read(&mut Reader::new(&bytes)), Err(Unreadable));
    }
}
