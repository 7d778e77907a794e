//! Retries with backoff, and the DELETE rate limit; both clock-free.

use std::time::{Duration, Instant};

use super::ApiFailure;

/// Which failures are retried, how often, and how long to wait in between.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all (1: no retry).
    pub max_attempts: u32,
    /// Pause before the first retry.
    pub initial: Duration,
    /// Longest pause.
    pub max: Duration,
}

impl RetryPolicy {
    /// After `attempts` attempts, the last of which failed with `failure`: the pause before
    /// the next attempt, or `None` to give up (not retriable, or attempts exhausted).
    pub fn next_delay(&self, attempts: u32, failure: &ApiFailure) -> Option<Duration> {
        if !failure.is_retriable() || attempts >= self.max_attempts {
            return None;
        }
        let doublings = attempts.saturating_sub(1).min(20);
        Some(self.initial.saturating_mul(1 << doublings).min(self.max))
    }
}

/// At most `n` requests per second, evenly spaced (a token bucket holding one token): the
/// `k`-th request goes no earlier than `(k - 1) / n` s after the first. Clock-free: the caller
/// passes the time and waits for what [`RateLimiter::reserve`] returns.
#[derive(Debug, Clone)]
pub struct RateLimiter {
    interval: Duration,
    next: Option<Instant>,
}

impl RateLimiter {
    /// A limiter of `n` (at least 1) requests per second.
    pub fn per_second(n: u32) -> Self {
        // Rounded up: never a nanosecond more than `n` per second.
        Self { interval: Duration::from_nanos(1_000_000_000u64.div_ceil(u64::from(n.max(1)))), next: None }
    }

    /// Takes the next slot for a request about to be sent at `now`: how long to wait first.
    /// The slot is taken whether or not the caller then sends.
    pub fn reserve(&mut self, now: Instant) -> Duration {
        let at = self.next.map_or(now, |next| next.max(now));
        self.next = Some(at + self.interval);
        at - now
    }
}
