//! Liveness and readiness of a long-running verb (`watch`, `process`, `cleaner`, `alerts`),
//! served beside `/metrics` as `/healthz` and `/readyz` (docs/METRICS.md, "Health").
//!
//! - A [`Heartbeat`] per loop: the loop beats once per turn, and `/healthz` fails when a
//!   loop has not turned for its stall limit. That is what a liveness probe restarts a pod
//!   for: a thread stuck in a call that never returns, not a slow broker (every Kafka call
//!   of a loop is bounded well inside the limit).
//! - A [`Condition`] per reason to wait: `/readyz` is 200 once every condition is met
//!   (connected, tasks restored, leading or standing by, caught up), 503 saying why until
//!   then.
//!
//! Both are cheap atomics and locks the loops touch; nothing here does I/O.

use std::{
    sync::{
        Arc, PoisonError, RwLock,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

/// The liveness path.
pub const HEALTH_PATH: &str = "/healthz";

/// How long a loop may go without turning before `/healthz` fails, unless its verb sets
/// another: longer than the longest bounded wait of any loop with the default settings (a
/// stream thread waits up to twice the transaction timeout plus 60 s for a previous
/// owner's transaction, 80 s; `process` raises it to eight transaction timeouts when
/// that is longer).
pub const DEFAULT_STALL_LIMIT: Duration = Duration::from_secs(300);

/// One loop's heartbeat (cheap to clone: clones beat the same loop).
#[derive(Debug, Clone)]
pub struct Heartbeat(Arc<Beat>);

#[derive(Debug)]
struct Beat {
    name: String,
    epoch: Instant,
    /// Milliseconds from `epoch` to the last beat.
    last_ms: AtomicU64,
    stall_limit: Duration,
    /// The loop ended on purpose (shutdown): no longer watched.
    retired: AtomicBool,
}

impl Heartbeat {
    /// A heartbeat no [`Health`] watches: what a loop beats when nothing serves `/healthz`.
    pub fn detached() -> Self {
        Self::new("detached", Instant::now(), DEFAULT_STALL_LIMIT)
    }

    fn new(name: &str, epoch: Instant, stall_limit: Duration) -> Self {
        let last_ms = AtomicU64::new(millis(epoch.elapsed()));
        Self(Arc::new(Beat {
            name: name.to_owned(),
            epoch,
            last_ms,
            stall_limit,
            retired: AtomicBool::new(false),
        }))
    }

    /// The loop turned (a retired loop that beats is watched again).
    pub fn beat(&self) {
        self.0.last_ms.store(millis(self.0.epoch.elapsed()), Ordering::Relaxed);
        self.0.retired.store(false, Ordering::Relaxed);
    }

    /// The loop ended on purpose (a watcher's term, a shutdown): `/healthz` stops watching
    /// it until it beats again.
    pub fn retire(&self) {
        self.0.retired.store(true, Ordering::Relaxed);
    }

    /// How long the loop has gone without turning at `now`, if longer than its stall limit.
    fn stalled_at(&self, now: Instant) -> Option<Duration> {
        if self.0.retired.load(Ordering::Relaxed) {
            return None;
        }
        let last = self.0.epoch + Duration::from_millis(self.0.last_ms.load(Ordering::Relaxed));
        let quiet = now.saturating_duration_since(last);
        (quiet > self.0.stall_limit).then_some(quiet)
    }
}

/// One reason a verb is not ready yet, set and cleared by its shell.
#[derive(Debug)]
pub struct Condition {
    name: String,
    waiting: RwLock<Option<String>>,
}

impl Condition {
    /// Met: `/readyz` no longer waits for it.
    pub fn met(&self) {
        *self.waiting.write().unwrap_or_else(PoisonError::into_inner) = None;
    }

    /// Not met, because of `why` (said by `/readyz`).
    pub fn waiting(&self, why: impl Into<String>) {
        *self.waiting.write().unwrap_or_else(PoisonError::into_inner) = Some(why.into());
    }

    fn why(&self) -> Option<String> {
        let waiting = self.waiting.read().unwrap_or_else(PoisonError::into_inner);
        waiting.as_ref().map(|why| format!("{}: {why}", self.name))
    }
}

/// The heartbeats and readiness conditions of one process.
#[derive(Debug, Default)]
pub struct Health {
    beats: RwLock<Vec<Heartbeat>>,
    conditions: RwLock<Vec<Arc<Condition>>>,
}

impl Health {
    /// A heartbeat for the loop `name`, watched from now on; it counts as having just
    /// beaten. A name asked for again replaces the earlier heartbeat (a loop restarted).
    pub fn heartbeat(&self, name: &str, stall_limit: Duration) -> Heartbeat {
        let beat = Heartbeat::new(name, Instant::now(), stall_limit);
        let mut beats = self.beats.write().unwrap_or_else(PoisonError::into_inner);
        beats.retain(|b| b.0.name != name);
        beats.push(beat.clone());
        beat
    }

    /// A readiness condition `name`, not met at first (`why`).
    pub fn condition(&self, name: &str, why: &str) -> Arc<Condition> {
        let condition =
            Arc::new(Condition { name: name.to_owned(), waiting: RwLock::new(Some(why.to_owned())) });
        self.conditions.write().unwrap_or_else(PoisonError::into_inner).push(Arc::clone(&condition));
        condition
    }

    /// Which loops have stopped turning, if any: what `/healthz` answers 503 with.
    pub fn stalled(&self) -> Option<String> {
        self.stalled_at(Instant::now())
    }

    fn stalled_at(&self, now: Instant) -> Option<String> {
        let beats = self.beats.read().unwrap_or_else(PoisonError::into_inner);
        let stalled: Vec<String> = beats
            .iter()
            .filter_map(|b| {
                let quiet = b.stalled_at(now)?;
                Some(format!(
                    "{} has not turned for {} s (limit {} s)",
                    b.0.name,
                    quiet.as_secs(),
                    b.0.stall_limit.as_secs()
                ))
            })
            .collect();
        (!stalled.is_empty()).then(|| stalled.join("; "))
    }

    /// The conditions not met yet, if any.
    pub fn waiting(&self) -> Option<String> {
        let conditions = self.conditions.read().unwrap_or_else(PoisonError::into_inner);
        let why: Vec<String> = conditions.iter().filter_map(|c| c.why()).collect();
        (!why.is_empty()).then(|| why.join("; "))
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loop_that_stops_turning_past_its_limit_is_stalled_and_a_beat_revives_it() {
        let health = Health::default();
        let start = Instant::now();
        let beat = health.heartbeat("stream thread 0", Duration::from_secs(10));
        let s = Duration::from_secs;
        assert_eq!(health.stalled_at(start + s(9)), None);
        let said = health.stalled_at(start + s(12)).expect("stalled");
        assert!(said.contains("stream thread 0 has not turned for 1"), "{said}");
        assert!(said.contains("(limit 10 s)"), "{said}");
        beat.beat();
        assert_eq!(health.stalled_at(Instant::now() + s(9)), None);
    }

    #[test]
    fn a_retired_loop_is_not_watched_and_a_restarted_one_replaces_it() {
        let health = Health::default();
        let later = Instant::now() + Duration::from_secs(60);
        let first = health.heartbeat("cleaner", Duration::from_secs(1));
        first.retire();
        assert_eq!(health.stalled_at(later), None);
        first.beat();
        assert!(health.stalled_at(later).is_some(), "a beat watches it again");
        first.retire();
        let _second = health.heartbeat("cleaner", Duration::from_secs(1));
        assert_eq!(health.beats.read().unwrap().len(), 1);
        assert!(health.stalled_at(later).is_some());
    }

    #[test]
    fn readiness_waits_for_every_condition() {
        let health = Health::default();
        assert_eq!(health.waiting(), None);
        let kafka = health.condition("kafka", "connecting");
        let restore = health.condition("tasks", "restoring");
        assert_eq!(health.waiting().as_deref(), Some("kafka: connecting; tasks: restoring"));
        kafka.met();
        restore.waiting("restoring 3 partitions");
        assert_eq!(health.waiting().as_deref(), Some("tasks: restoring 3 partitions"));
        restore.met();
        assert_eq!(health.waiting(), None);
    }
}
