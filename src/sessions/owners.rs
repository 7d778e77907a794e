//! `[session-owners]`: the compute each owner's stopped sessions still hold.
//!
//! Input: what each session holds, re-keyed by owner by `[sessions]` (an owner's sessions
//! sit in every partition of `sessions.v1`). Output: `retained-compute-by-owner.v1`, one
//! record per change of an owner's total. Each input record replaces the session's previous
//! one under that owner, so a total is a sum of current values, never of deltas: a record
//! seen twice changes nothing.

use super::{
    model::OwnerRetainedCompute,
    state::Held,
    wiring::{OwnersEvent, OwnersInput, OwnersOut},
};
use crate::runtime::{
    OutputPort, Outputs, ProcessError, Processor, Reason, RecordMeta, StreamTime,
    store::{KvStore, StateStore},
};

/// The `[session-owners]` processor: one per task.
#[derive(Debug)]
pub struct SessionOwners {
    /// (owner, session id) → what that RETAINED session holds.
    held: KvStore<(String, String), Held>,
    /// Owner → its latest total (with its revision).
    totals: KvStore<String, OwnerRetainedCompute>,
}

impl Default for SessionOwners {
    fn default() -> Self {
        Self::new()
    }
}

impl SessionOwners {
    /// Output ports: `retained-compute-by-owner.v1`.
    pub const OUTPUTS: [OutputPort; 1] = [OutputPort {
        topic: "retained_by_owner",
        record: OwnerRetainedCompute::FULL_NAME,
        compacted: true,
        key_record: None,
        stream_time_every_ms: None,
    }];

    /// An empty processor.
    pub fn new() -> Self {
        Self { held: KvStore::new("held"), totals: KvStore::new("totals") }
    }

    /// Latest totals by owner (for tests and the demo).
    pub fn totals(&self) -> impl Iterator<Item = (&String, &OwnerRetainedCompute)> {
        self.totals.iter()
    }
}

/// Adds (`sign` 1) or removes (`sign` -1) one session from a total.
fn apply(total: &mut OwnerRetainedCompute, held: Held, sign: i64) {
    total.retained_sessions += sign;
    match held.cpu_millicores {
        Some(m) => total.cpu_millicores += sign * m,
        None => total.sessions_without_cpu_request += sign,
    }
    match held.memory_bytes {
        Some(b) => total.memory_bytes += sign * b,
        None => total.sessions_without_memory_request += sign,
    }
}

impl Processor for SessionOwners {
    type Input = OwnersInput;

    fn stores(&mut self) -> Vec<&mut dyn StateStore> {
        vec![&mut self.held, &mut self.totals]
    }

    fn process(
        &mut self,
        OwnersInput(record): OwnersInput,
        meta: &RecordMeta,
        _now: StreamTime,
        out: &mut Outputs,
    ) -> Result<(), ProcessError> {
        // The key is the owner whose total this record changes; the record's own owner
        // differs when the session left it.
        let Some(owner) = meta.key.as_deref().and_then(|k| std::str::from_utf8(k).ok()).map(str::to_owned)
        else {
            return Err(ProcessError::new(
                Reason::MissingKey,
                "a retained-compute record without an owner key",
            ));
        };
        let slot = (owner.clone(), record.session_id.clone());
        let before = self.held.get(&slot).copied();
        let after = (record.retained && record.owner == owner)
            .then_some(Held { cpu_millicores: record.cpu_millicores, memory_bytes: record.memory_bytes });
        if before == after {
            out.count(OwnersEvent::Unchanged, 1);
            return Ok(());
        }
        let mut total = self.totals.get(&owner).cloned().unwrap_or_else(|| OwnerRetainedCompute {
            owner: owner.clone(),
            ..OwnerRetainedCompute::default()
        });
        if let Some(b) = before {
            apply(&mut total, b, -1);
        }
        match after {
            Some(a) => {
                apply(&mut total, a, 1);
                self.held.put(slot, a);
            }
            None => {
                self.held.delete(&slot);
            }
        }
        total.revision += 1;
        // The latest `[sessions]` change time the total includes. Not our own stream time,
        // nor the last record's: both depend on how the upstream tasks' records interleave
        // in the repartition topic (two sessions of one owner change in two tasks).
        total.stream_time = total.stream_time.max(record.stream_time);
        match out.emit(OwnersOut::Totals, owner.as_bytes().to_vec(), &total) {
            Ok(()) => out.count(OwnersEvent::Totals, 1),
            Err(_) => out.count(OwnersEvent::EncodeFailed, 1),
        }
        self.totals.put(owner, total);
        Ok(())
    }

    fn on_stream_time(&mut self, _now: StreamTime, _out: &mut Outputs) {}
}
