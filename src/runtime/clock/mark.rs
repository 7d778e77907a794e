//! What a record is pushed into the gate with ([`Mark`]) and released with ([`Verdict`]):
//! the vocabulary the gate and its lanes share.

/// What a record says about its writer's time on its lane.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    /// A record: its writer delivers nothing earlier after it.
    Record,
    /// Forwarded stream time (a heartbeat without a value): nothing earlier follows, and
    /// it changes nothing once stream time has reached it, wherever it goes among records
    /// of its own time.
    Forwarded,
    /// A watcher heartbeat (an observation carrying time): nothing at or before its time
    /// follows on the partition (the observer stamps a later observation of the same
    /// millisecond one millisecond later). Processors take it as time only, so like
    /// [`Mark::Forwarded`] it changes nothing once stream time has reached it.
    Through,
    /// A record the runtime cannot use (it is dead-lettered): it carries no time, so it
    /// sorts at its writer's time so far and shows nothing.
    Void,
}

impl Mark {
    /// A heartbeat, or a record that carries no time: once stream time has reached it,
    /// where it goes among records of its own time changes no stream time, so it goes
    /// without waiting (a refused record's one effect, a processor forgetting what its key
    /// said, happens at that same stream time).
    pub(super) fn is_time_only(self) -> bool {
        matches!(self, Self::Forwarded | Self::Through | Self::Void)
    }
}

/// What the gate says of a released record's time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Its time is plausible: process it (or, pushed [`Mark::Void`], dead-letter it).
    Use,
    /// More than `max_ahead_ms` ahead of the heartbeat after it on a checked lane: it
    /// carried no time and must be dead-lettered (`timestamp_ahead`).
    Ahead,
}
