//! Direct Avro forms ([`crate::codec::direct`]) of the journal's records, every field in
//! schema order (`schemas/job-run.avsc`, `job-run-window-part.avsc`,
//! `job-run-window-part-key.avsc`).
//! Debug builds compare each read and write with apache-avro.

use crate::codec::direct::{
    Datum, DirectRecord, Reader, Unreadable, write_array, write_boolean, write_int, write_long,
    write_optional, write_optional_int, write_optional_long, write_optional_string, write_string,
};

use super::model::{
    ContainerExitCount, FailureReasonCount, JobRun, JobRunPage, JobRunWindowPart, JobRunWindowPartKey,
    JobRunWindowSummary, OwnerKind, RunOwner, RunResult,
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

impl Datum for JobRunWindowPartKey {
    fn write(&self, out: &mut Vec<u8>) {
        write_long(out, self.window_start);
        write_long(out, self.window_length_ms);
        write_int(out, self.part);
    }

    fn read(r: &mut Reader<'_>) -> Result<Self, Unreadable> {
        Ok(Self { window_start: r.long()?, window_length_ms: r.long()?, part: r.int()? })
    }
}

impl DirectRecord for JobRunWindowPartKey {
    const FULL_NAME: &'static str = JobRunWindowPartKey::FULL_NAME;
}

impl Datum for FailureReasonCount {
    fn write(&self, out: &mut Vec<u8>) {
        write_optional_string(out, self.reason.as_ref());
        write_long(out, self.count);
    }

    fn read(r: &mut Reader<'_>) -> Result<Self, Unreadable> {
        Ok(Self { reason: r.optional(Reader::string)?, count: r.long()? })
    }
}

impl Datum for JobRunWindowSummary {
    fn write(&self, out: &mut Vec<u8>) {
        write_boolean(out, self.is_final);
        write_int(out, self.pages);
        write_long(out, self.runs);
        write_long(out, self.succeeded);
        write_long(out, self.failed);
        write_array(out, &self.failure_reasons, |out, c| c.write(out));
    }

    fn read(r: &mut Reader<'_>) -> Result<Self, Unreadable> {
        Ok(Self {
            is_final: r.boolean()?,
            pages: r.int()?,
            runs: r.long()?,
            succeeded: r.long()?,
            failed: r.long()?,
            failure_reasons: r.array(FailureReasonCount::read)?,
        })
    }
}

impl JobRunWindowPart {
    /// Writes a page's fields up to its runs: the head, no summary, the page branch. Then
    /// come the runs as an array of datums ([`write_datums`]).
    pub(super) fn write_page_head(&self, out: &mut Vec<u8>) {
        self.write_head(out);
        write_long(out, 0); // summary: null
        write_long(out, 1); // page: the record
    }

    fn write_head(&self, out: &mut Vec<u8>) {
        write_long(out, self.window_start);
        write_long(out, self.window_length_ms);
        write_int(out, self.part);
        write_long(out, self.revision);
        write_long(out, self.stream_time);
    }
}

/// An Avro array of already-encoded datums, as apache-avro writes one: a single block of
/// all of them (none when empty), then the 0 block.
pub(super) fn write_datums(out: &mut Vec<u8>, datums: &[Vec<u8>]) {
    if !datums.is_empty() {
        write_long(out, datums.len() as i64);
        datums.iter().for_each(|d| out.extend_from_slice(d));
    }
    out.push(0);
}

impl Datum for JobRunWindowPart {
    fn write(&self, out: &mut Vec<u8>) {
        self.write_head(out);
        write_optional(out, self.summary.as_ref(), |out, s| s.write(out));
        write_optional(out, self.page.as_ref(), |out, p| {
            write_array(out, &p.runs, |out, run| run.write(out))
        });
    }

    fn read(r: &mut Reader<'_>) -> Result<Self, Unreadable> {
        Ok(Self {
            window_start: r.long()?,
            window_length_ms: r.long()?,
            part: r.int()?,
            revision: r.long()?,
            stream_time: r.long()?,
            summary: r.optional(JobRunWindowSummary::read)?,
            page: r.optional(|r| Ok(JobRunPage { runs: r.array(JobRun::read)? }))?,
        })
    }
}

impl DirectRecord for JobRunWindowPart {
    const FULL_NAME: &'static str = JobRunWindowPart::FULL_NAME;
}
