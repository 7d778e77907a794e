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
    /// More than `max_behind_ms` before the last heartbeat accepted before it on a checked
    /// lane: it carried no time and must be dead-lettered (`timestamp_behind`).
    Behind,
}

impl Verdict {
    /// Whether the gate judged the record's time implausible (it carried no time).
    pub fn refuses(self) -> bool {
        self != Self::Use
    }
}

/// What a heartbeat or snapshot marker says of its publisher, as the gate judges it
/// ([`super::Gate::vet`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Claim {
    /// The snapshot epoch it carries.
    pub epoch: i64,
    /// A stable hash of the publishing instance's name ([`Claim::instance_hash`]).
    pub instance: u64,
    /// Whether it is a SNAPSHOT_BEGIN (the one marker that may start a new epoch).
    pub begins: bool,
}

impl Claim {
    /// The publisher a lane knows after this claim, given the one it knew (the epoch it
    /// began, its instance hash). A SNAPSHOT_BEGIN of a later epoch than the known one (or
    /// the first one heard) makes its instance the publisher: a new leader's relist, or a
    /// relist of the same one. Anything else must come from the known instance; before
    /// any SNAPSHOT_BEGIN there is none to compare with, and nothing is learned (a forged
    /// heartbeat must not be the one a lane trusts). `Err`: another instance, with the
    /// known epoch.
    pub fn judge(self, known: Option<(i64, u64)>) -> Result<Option<(i64, u64)>, i64> {
        match known {
            None if self.begins => Ok(Some((self.epoch, self.instance))),
            None => Ok(None),
            Some((epoch, _)) if self.begins && self.epoch > epoch => Ok(Some((self.epoch, self.instance))),
            Some((_, instance)) if instance == self.instance => Ok(known),
            Some((epoch, _)) => Err(epoch),
        }
    }

    /// FNV-1a (64-bit) of `instance`: the same on every build and platform, so a restored
    /// task compares what the changelog kept with what it reads.
    pub fn instance_hash(instance: &str) -> u64 {
        instance.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
    }
}
