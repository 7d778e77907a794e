//! Direct Avro forms ([`crate::codec::direct`]) of the Job and Pod observations `[runs]`
//! reads: every field in schema order (`schemas/job-observation.avsc`,
//! `pod-observation.avsc`). Debug builds compare each read and write with apache-avro.

use crate::codec::direct::{
    Datum, DirectRecord, Reader, Unreadable, write_array, write_boolean, write_int, write_long,
    write_optional, write_optional_int, write_optional_long, write_optional_string, write_string,
    write_string_map,
};

use super::model::{
    ConditionStatus, ContainerObservation, ContainerTermination, Job, JobCondition, JobObservation, JobSpec,
    JobStatus, ObjectMeta, ObservationEvent, OwnerReference, Pod, PodObservation, PodPhase, Source,
};

impl Datum for Source {
    fn write(&self, out: &mut Vec<u8>) {
        write_string(out, &self.cluster);
        write_string(out, &self.instance);
        write_long(out, self.epoch);
    }

    fn read(r: &mut Reader<'_>) -> Result<Self, Unreadable> {
        Ok(Self { cluster: r.string()?, instance: r.string()?, epoch: r.long()? })
    }
}

impl Datum for ObservationEvent {
    fn write(&self, out: &mut Vec<u8>) {
        write_int(out, *self as i32);
    }

    fn read(r: &mut Reader<'_>) -> Result<Self, Unreadable> {
        Ok(match r.symbol()? {
            0 => Self::Unknown,
            1 => Self::Applied,
            2 => Self::Deleted,
            3 => Self::SnapshotBegin,
            4 => Self::SnapshotEnd,
            5 => Self::Heartbeat,
            _ => return Err(Unreadable),
        })
    }
}

impl Datum for ObjectMeta {
    fn write(&self, out: &mut Vec<u8>) {
        write_string(out, &self.namespace);
        write_string(out, &self.name);
        write_string(out, &self.uid);
        write_optional_string(out, self.resource_version.as_ref());
        write_optional_long(out, self.creation_timestamp);
        write_optional_long(out, self.deletion_timestamp);
        write_string_map(out, &self.labels);
        write_string_map(out, &self.annotations);
    }

    fn read(r: &mut Reader<'_>) -> Result<Self, Unreadable> {
        Ok(Self {
            namespace: r.string()?,
            name: r.string()?,
            uid: r.string()?,
            resource_version: r.optional(Reader::string)?,
            creation_timestamp: r.optional(Reader::long)?,
            deletion_timestamp: r.optional(Reader::long)?,
            labels: r.string_map()?,
            annotations: r.string_map()?,
        })
    }
}

impl Datum for OwnerReference {
    fn write(&self, out: &mut Vec<u8>) {
        write_string(out, &self.kind);
        write_string(out, &self.name);
        write_string(out, &self.uid);
    }

    fn read(r: &mut Reader<'_>) -> Result<Self, Unreadable> {
        Ok(Self { kind: r.string()?, name: r.string()?, uid: r.string()? })
    }
}

impl Datum for JobSpec {
    fn write(&self, out: &mut Vec<u8>) {
        write_optional_int(out, self.parallelism);
        write_optional_int(out, self.completions);
        write_optional_int(out, self.backoff_limit);
        write_optional_int(out, self.ttl_seconds_after_finished);
        write_optional(out, self.suspend.as_ref(), |out, b| write_boolean(out, *b));
        write_optional_string(out, self.completion_mode.as_ref());
        write_optional_long(out, self.active_deadline_seconds);
    }

    fn read(r: &mut Reader<'_>) -> Result<Self, Unreadable> {
        Ok(Self {
            parallelism: r.optional(Reader::int)?,
            completions: r.optional(Reader::int)?,
            backoff_limit: r.optional(Reader::int)?,
            ttl_seconds_after_finished: r.optional(Reader::int)?,
            suspend: r.optional(Reader::boolean)?,
            completion_mode: r.optional(Reader::string)?,
            active_deadline_seconds: r.optional(Reader::long)?,
        })
    }
}

impl Datum for ConditionStatus {
    fn write(&self, out: &mut Vec<u8>) {
        write_int(out, *self as i32);
    }

    fn read(r: &mut Reader<'_>) -> Result<Self, Unreadable> {
        Ok(match r.symbol()? {
            0 => Self::Unknown,
            1 => Self::True,
            2 => Self::False,
            _ => return Err(Unreadable),
        })
    }
}

impl Datum for JobCondition {
    fn write(&self, out: &mut Vec<u8>) {
        write_string(out, &self.type_);
        self.status.write(out);
        write_optional_string(out, self.reason.as_ref());
        write_optional_long(out, self.last_transition_time);
    }

    fn read(r: &mut Reader<'_>) -> Result<Self, Unreadable> {
        Ok(Self {
            type_: r.string()?,
            status: ConditionStatus::read(r)?,
            reason: r.optional(Reader::string)?,
            last_transition_time: r.optional(Reader::long)?,
        })
    }
}

impl Datum for JobStatus {
    fn write(&self, out: &mut Vec<u8>) {
        write_optional_long(out, self.start_time);
        write_optional_long(out, self.completion_time);
        write_optional_int(out, self.active);
        write_optional_int(out, self.succeeded);
        write_optional_int(out, self.failed);
        write_optional_int(out, self.ready);
        write_int(out, self.uncounted_succeeded);
        write_int(out, self.uncounted_failed);
        write_array(out, &self.conditions, |out, c| c.write(out));
    }

    fn read(r: &mut Reader<'_>) -> Result<Self, Unreadable> {
        Ok(Self {
            start_time: r.optional(Reader::long)?,
            completion_time: r.optional(Reader::long)?,
            active: r.optional(Reader::int)?,
            succeeded: r.optional(Reader::int)?,
            failed: r.optional(Reader::int)?,
            ready: r.optional(Reader::int)?,
            uncounted_succeeded: r.int()?,
            uncounted_failed: r.int()?,
            conditions: r.array(JobCondition::read)?,
        })
    }
}

impl Datum for Job {
    fn write(&self, out: &mut Vec<u8>) {
        self.meta.write(out);
        write_optional(out, self.owner_cronjob.as_ref(), |out, o| o.write(out));
        self.spec.write(out);
        self.status.write(out);
    }

    fn read(r: &mut Reader<'_>) -> Result<Self, Unreadable> {
        Ok(Self {
            meta: ObjectMeta::read(r)?,
            owner_cronjob: r.optional(OwnerReference::read)?,
            spec: JobSpec::read(r)?,
            status: JobStatus::read(r)?,
        })
    }
}

impl Datum for JobObservation {
    fn write(&self, out: &mut Vec<u8>) {
        self.source.write(out);
        write_long(out, self.observed_at);
        self.event.write(out);
        write_optional(out, self.job.as_ref(), |out, j| j.write(out));
    }

    fn read(r: &mut Reader<'_>) -> Result<Self, Unreadable> {
        Ok(Self {
            source: Source::read(r)?,
            observed_at: r.long()?,
            event: ObservationEvent::read(r)?,
            job: r.optional(Job::read)?,
        })
    }
}

impl DirectRecord for JobObservation {
    const FULL_NAME: &'static str = JobObservation::FULL_NAME;
}

impl Datum for PodPhase {
    fn write(&self, out: &mut Vec<u8>) {
        write_int(out, *self as i32);
    }

    fn read(r: &mut Reader<'_>) -> Result<Self, Unreadable> {
        Ok(match r.symbol()? {
            0 => Self::Unknown,
            1 => Self::Pending,
            2 => Self::Running,
            3 => Self::Succeeded,
            4 => Self::Failed,
            _ => return Err(Unreadable),
        })
    }
}

impl Datum for ContainerTermination {
    fn write(&self, out: &mut Vec<u8>) {
        write_int(out, self.exit_code);
        write_optional_string(out, self.reason.as_ref());
        write_optional_int(out, self.exit_signal);
        write_optional_long(out, self.started_at);
        write_optional_long(out, self.finished_at);
        write_optional_string(out, self.container_id.as_ref());
    }

    fn read(r: &mut Reader<'_>) -> Result<Self, Unreadable> {
        Ok(Self {
            exit_code: r.int()?,
            reason: r.optional(Reader::string)?,
            exit_signal: r.optional(Reader::int)?,
            started_at: r.optional(Reader::long)?,
            finished_at: r.optional(Reader::long)?,
            container_id: r.optional(Reader::string)?,
        })
    }
}

impl Datum for ContainerObservation {
    fn write(&self, out: &mut Vec<u8>) {
        write_string(out, &self.name);
        write_optional_string(out, self.requests_cpu.as_ref());
        write_optional_string(out, self.requests_memory.as_ref());
        write_int(out, self.restart_count);
        write_optional(out, self.state.as_ref(), |out, t| t.write(out));
        write_optional(out, self.last_state.as_ref(), |out, t| t.write(out));
    }

    fn read(r: &mut Reader<'_>) -> Result<Self, Unreadable> {
        Ok(Self {
            name: r.string()?,
            requests_cpu: r.optional(Reader::string)?,
            requests_memory: r.optional(Reader::string)?,
            restart_count: r.int()?,
            state: r.optional(ContainerTermination::read)?,
            last_state: r.optional(ContainerTermination::read)?,
        })
    }
}

impl Datum for Pod {
    fn write(&self, out: &mut Vec<u8>) {
        self.meta.write(out);
        write_optional(out, self.controller.as_ref(), |out, o| o.write(out));
        self.phase.write(out);
        write_array(out, &self.containers, |out, c| c.write(out));
        write_array(out, &self.init_containers, |out, c| c.write(out));
    }

    fn read(r: &mut Reader<'_>) -> Result<Self, Unreadable> {
        Ok(Self {
            meta: ObjectMeta::read(r)?,
            controller: r.optional(OwnerReference::read)?,
            phase: PodPhase::read(r)?,
            containers: r.array(ContainerObservation::read)?,
            init_containers: r.array(ContainerObservation::read)?,
        })
    }
}

impl Datum for PodObservation {
    fn write(&self, out: &mut Vec<u8>) {
        self.source.write(out);
        write_long(out, self.observed_at);
        self.event.write(out);
        write_optional(out, self.pod.as_ref(), |out, p| p.write(out));
    }

    fn read(r: &mut Reader<'_>) -> Result<Self, Unreadable> {
        Ok(Self {
            source: Source::read(r)?,
            observed_at: r.long()?,
            event: ObservationEvent::read(r)?,
            pod: r.optional(Pod::read)?,
        })
    }
}

impl DirectRecord for PodObservation {
    const FULL_NAME: &'static str = PodObservation::FULL_NAME;
}
