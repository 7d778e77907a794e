//! Direct Avro forms ([`crate::codec::direct`]) of the journal's records, every field in
//! schema order (`schemas/job-run.avsc`, `job-run-window.avsc`, `job-run-window-key.avsc`).
//! Debug builds compare each read and write with apache-avro.

use crate::codec::direct::{
    Datum, DirectRecord, Reader, Unreadable, write_array, write_boolean, write_int, write_long,
    write_optional_int, write_optional_long, write_optional_string, write_string,
};

use super::model::{
    ContainerExitCount, JobRun, JobRunWindow, JobRunWindowKey, OwnerKind, RunOwner, RunResult,
};

impl Datum for OwnerKind {
    fn write(&self, out: &mut Vec<u8>) {
        write_int(out, *self as i32);
    }

    fn read(r: &mut Reader<'_>) -> Result<Self, Unreadable> {
        Ok(match r.symbol()? {
            0 => Self::Unknown,
            1 => Self::Cronjob,
            2 => Self::Job,
            _ => return Err(Unreadable),
        })
    }
}

impl Datum for RunOwner {
    fn write(&self, out: &mut Vec<u8>) {
        self.kind.write(out);
        write_string(out, &self.name);
        write_string(out, &self.uid);
    }

    fn read(r: &mut Reader<'_>) -> Result<Self, Unreadable> {
        Ok(Self { kind: OwnerKind::read(r)?, name: r.string()?, uid: r.string()? })
    }
}

impl Datum for RunResult {
    fn write(&self, out: &mut Vec<u8>) {
        write_int(out, *self as i32);
    }

    fn read(r: &mut Reader<'_>) -> Result<Self, Unreadable> {
        Ok(match r.symbol()? {
            0 => Self::Unknown,
            1 => Self::Succeeded,
            2 => Self::Failed,
            _ => return Err(Unreadable),
        })
    }
}

impl Datum for ContainerExitCount {
    fn write(&self, out: &mut Vec<u8>) {
        write_string(out, &self.container);
        write_int(out, self.exit_code);
        write_optional_string(out, self.reason.as_ref());
        write_long(out, self.count);
    }

    fn read(r: &mut Reader<'_>) -> Result<Self, Unreadable> {
        Ok(Self {
            container: r.string()?,
            exit_code: r.int()?,
            reason: r.optional(Reader::string)?,
            count: r.long()?,
        })
    }
}

impl Datum for JobRun {
    fn write(&self, out: &mut Vec<u8>) {
        write_string(out, &self.namespace);
        self.owner.write(out);
        write_string(out, &self.run_name);
        write_string(out, &self.run_uid);
        write_optional_long(out, self.started_at);
        write_long(out, self.finished_at);
        self.result.write(out);
        write_optional_string(out, self.failure_reason.as_ref());
        write_int(out, self.succeeded_pods);
        write_int(out, self.failed_pods);
        write_optional_int(out, self.parallelism);
        write_optional_int(out, self.completions);
        write_optional_int(out, self.backoff_limit);
        write_array(out, &self.exits, |out, e| e.write(out));
    }

    fn read(r: &mut Reader<'_>) -> Result<Self, Unreadable> {
        Ok(Self {
            namespace: r.string()?,
            owner: RunOwner::read(r)?,
            run_name: r.string()?,
            run_uid: r.string()?,
            started_at: r.optional(Reader::long)?,
            finished_at: r.long()?,
            result: RunResult::read(r)?,
            failure_reason: r.optional(Reader::string)?,
            succeeded_pods: r.int()?,
            failed_pods: r.int()?,
            parallelism: r.optional(Reader::int)?,
            completions: r.optional(Reader::int)?,
            backoff_limit: r.optional(Reader::int)?,
            exits: r.array(ContainerExitCount::read)?,
        })
    }
}

impl DirectRecord for JobRun {
    const FULL_NAME: &'static str = JobRun::FULL_NAME;
}

impl Datum for JobRunWindowKey {
    fn write(&self, out: &mut Vec<u8>) {
        write_long(out, self.window_start);
        write_long(out, self.window_length_ms);
    }

    fn read(r: &mut Reader<'_>) -> Result<Self, Unreadable> {
        Ok(Self { window_start: r.long()?, window_length_ms: r.long()? })
    }
}

impl DirectRecord for JobRunWindowKey {
    const FULL_NAME: &'static str = JobRunWindowKey::FULL_NAME;
}

impl JobRunWindow {
    /// Writes every field before `runs`: the window's emission is these, then its runs'
    /// datums as the journal keeps them encoded ([`super::window`]).
    pub(super) fn write_head(&self, out: &mut Vec<u8>) {
        write_long(out, self.window_start);
        write_long(out, self.window_length_ms);
        write_long(out, self.revision);
        write_boolean(out, self.is_final);
        write_long(out, self.stream_time);
    }
}

impl Datum for JobRunWindow {
    fn write(&self, out: &mut Vec<u8>) {
        self.write_head(out);
        write_array(out, &self.runs, |out, run| run.write(out));
    }

    fn read(r: &mut Reader<'_>) -> Result<Self, Unreadable> {
        Ok(Self {
            window_start: r.long()?,
            window_length_ms: r.long()?,
            revision: r.long()?,
            is_final: r.boolean()?,
            stream_time: r.long()?,
            runs: r.array(JobRun::read)?,
        })
    }
}

impl DirectRecord for JobRunWindow {
    const FULL_NAME: &'static str = JobRunWindow::FULL_NAME;
}
