//! CronJob schedules (`spec.schedule` with `spec.timeZone`) and their fire times.
//!
//! The grammar and the matching rules are those of robfig/cron v3 `ParseStandard`, which the
//! Kubernetes CronJob controller uses. The module is pure: no clock, no I/O, and zones come from
//! jiff's bundled tz database so results do not depend on the machine's `/usr/share/zoneinfo`.
//!
//! Semantic choices, each matching robfig unless said otherwise:
//! - **Fire times** are the instants whose wall clock in the zone matches the spec. robfig walks
//!   hours and minutes in absolute time, which gives exactly this: a wall time inside a
//!   spring-forward gap never happens and is skipped (`0 2 * * *` does not run on the day New York
//!   jumps from 2:00 to 3:00; robfig's "2am nightly job (skipped)"), and a wall time repeated by a
//!   fall-back fires once per offset (robfig's "1am nightly job (runs twice)").
//! - **Zone**: `time_zone` `None` means UTC (the controller would use kube-controller-manager's
//!   local zone, which a pure function cannot know). A `CRON_TZ=<zone> ` or `TZ=<zone> ` prefix
//!   sets the zone only when `time_zone` is `None`; with both, parsing fails, as Kubernetes
//!   validation rejects that combination. Zone names are case-sensitive as on Linux; `Local` and
//!   the empty name are rejected because they depend on the machine.
//! - **Day of week** is 0–6 (Sunday = 0); `7` is rejected, as robfig's bounds are 0–6.
//! - **Day of month and day of week**: if either field starts with `*` or `?` (a step above 1
//!   makes it restricted again, so `*/2` is not a star) both must match; otherwise either may.
//! - **`@every <duration>`** (Go duration syntax) has no phase: `next_after(t)` is `t + d`, with
//!   `d` truncated to whole seconds and at least 1 s as robfig does, and `prev_at_or_before` is
//!   `None` because no instant is privileged.
//! - **Horizon**: like robfig, the search gives up after the fifth calendar year following the
//!   start's local year (and symmetrically backwards).

use jiff::tz::{TimeZone, TimeZoneDatabase};
use std::sync::OnceLock;

mod eval;
mod parse;

use eval::Fields;
use parse::{parse_descriptor, parse_fields, parse_go_duration};

/// Years searched past the start's local year before giving up (robfig's `yearLimit`).
const HORIZON_YEARS: i32 = 5;
const NANOS_PER_MS: i128 = 1_000_000;
const NANOS_PER_SECOND: i128 = 1_000_000_000;

/// Why a schedule, zone or duration could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    /// The schedule is the empty string.
    #[error("empty schedule")]
    Empty,
    /// The schedule does not have the five fields minute, hour, day-of-month, month, day-of-week.
    #[error(
        "expected exactly 5 fields (minute hour day-of-month month day-of-week), found {found} in {spec:?}"
    )]
    FieldCount {
        /// How many whitespace-separated fields there were.
        found: usize,
        /// The schedule without its zone prefix.
        spec: String,
    },
    /// One field is malformed or out of range.
    #[error("invalid {field} field {expr:?}: {reason}")]
    Field {
        /// `minute`, `hour`, `day-of-month`, `month` or `day-of-week`.
        field: &'static str,
        /// The field's text.
        expr: String,
        /// What is wrong with it.
        reason: String,
    },
    /// An `@` descriptor that robfig does not know.
    #[error(
        "unknown descriptor {0:?} (expected @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly or @every <duration>)"
    )]
    UnknownDescriptor(String),
    /// The zone is not in the tz database, or is machine-dependent.
    #[error("unknown time zone {name:?}: {reason}")]
    UnknownTimeZone {
        /// The zone name as given.
        name: String,
        /// Why it was rejected.
        reason: String,
    },
    /// The schedule carries a `CRON_TZ=`/`TZ=` prefix although `spec.timeZone` is set.
    #[error(
        "schedule sets its zone with a {prefix} prefix but spec.timeZone is {time_zone:?}; use only spec.timeZone"
    )]
    TimeZoneConflict {
        /// `CRON_TZ=` or `TZ=`.
        prefix: &'static str,
        /// The `spec.timeZone` value.
        time_zone: String,
    },
    /// A `CRON_TZ=`/`TZ=` prefix with no space and schedule after the zone.
    #[error("{0:?}: a CRON_TZ=/TZ= prefix must be followed by a space and the schedule")]
    DanglingTimeZone(String),
    /// A duration (annotation override or `@every`) that cannot be used.
    #[error("invalid duration {text:?}: {reason}")]
    Duration {
        /// The duration's text.
        text: String,
        /// What is wrong with it.
        reason: String,
    },
}

/// A parsed CronJob schedule in its zone; see the module docs for the semantics.
#[derive(Debug, Clone, PartialEq)]
pub struct Schedule {
    kind: Kind,
    tz: TimeZone,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    Spec(Fields),
    /// `@every`: a constant delay with no phase.
    Every {
        delay_ms: i64,
    },
}

impl Schedule {
    /// Parses `spec.schedule` with the CronJob's `spec.timeZone` (`None` = UTC, or the zone of a
    /// `CRON_TZ=`/`TZ=` prefix, accepted only when `time_zone` is `None`).
    pub fn parse(spec: &str, time_zone: Option<&str>) -> Result<Schedule, ScheduleError> {
        if spec.is_empty() {
            return Err(ScheduleError::Empty);
        }
        let mut zone = time_zone;
        let mut rest = spec;
        if let Some(prefix) = ["CRON_TZ=", "TZ="].into_iter().find(|p| spec.starts_with(p)) {
            if let Some(time_zone) = time_zone {
                return Err(ScheduleError::TimeZoneConflict { prefix, time_zone: time_zone.to_owned() });
            }
            let after = &spec[prefix.len()..];
            let space = after.find(' ').ok_or_else(|| ScheduleError::DanglingTimeZone(spec.to_owned()))?;
            zone = Some(&after[..space]);
            rest = after[space..].trim();
        }
        let tz = match zone {
            Some(name) => load_zone(name)?,
            None => TimeZone::UTC,
        };
        let kind =
            if rest.starts_with('@') { parse_descriptor(rest)? } else { Kind::Spec(parse_fields(rest)?) };
        Ok(Schedule { kind, tz })
    }

    /// The first fire time strictly after `after_ms` (epoch ms), or `None` if there is none
    /// within the horizon (e.g. `0 0 30 2 *`).
    pub fn next_after(&self, after_ms: i64) -> Option<i64> {
        match &self.kind {
            Kind::Every { delay_ms } => after_ms.checked_add(*delay_ms),
            Kind::Spec(fields) => fields.next_after(&self.tz, after_ms),
        }
    }

    /// The latest fire time at or before `at_ms` (epoch ms) within the horizon; always `None`
    /// for `@every`, which has no phase (use [`Schedule::next_after`] from the last run).
    pub fn prev_at_or_before(&self, at_ms: i64) -> Option<i64> {
        match &self.kind {
            Kind::Every { .. } => None,
            Kind::Spec(fields) => fields.prev_at_or_before(&self.tz, at_ms),
        }
    }
}

/// Parses an annotation override such as `90m`, `2h`, `1h30m`, `45s` or `1d` into
/// milliseconds: Go `time.ParseDuration` syntax plus `d` (24 h); empty, negative, zero and
/// sub-millisecond durations and unknown units are errors.
pub fn parse_duration_ms(text: &str) -> Result<i64, ScheduleError> {
    let err = |reason: String| ScheduleError::Duration { text: text.to_owned(), reason };
    let trimmed = text.trim();
    if trimmed.starts_with('-') {
        return Err(err("must be positive".to_owned()));
    }
    let ms = parse_go_duration(trimmed, true).map_err(err)? / NANOS_PER_MS;
    if ms <= 0 {
        return Err(err("must be at least 1ms".to_owned()));
    }
    i64::try_from(ms).map_err(|_| err("out of range".to_owned()))
}

/// The bundled database, built once: lookups then never touch the file system.
fn bundled_db() -> &'static TimeZoneDatabase {
    static DB: OnceLock<TimeZoneDatabase> = OnceLock::new();
    DB.get_or_init(TimeZoneDatabase::bundled)
}

fn load_zone(name: &str) -> Result<TimeZone, ScheduleError> {
    let err = |reason: String| ScheduleError::UnknownTimeZone { name: name.to_owned(), reason };
    if name.is_empty() || name.eq_ignore_ascii_case("local") {
        return Err(err("name an IANA zone explicitly; the machine's local zone is not used".to_owned()));
    }
    let tz = bundled_db().get(name).map_err(|e| err(e.to_string()))?;
    // jiff matches names case-insensitively; Go on Linux (and so Kubernetes) does not.
    match tz.iana_name() {
        Some(canonical) if canonical != name => {
            Err(err(format!("zone names are case-sensitive (the database spells it {canonical:?})")))
        }
        _ => Ok(tz),
    }
}

#[cfg(test)]
mod tests;
