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

use jiff::civil::DateTime;
use jiff::tz::{TimeZone, TimeZoneDatabase};
use jiff::{SignedDuration, Timestamp};
use std::sync::OnceLock;

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

/// Bit sets of the accepted values (bit n = value n), as robfig stores them.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Fields {
    minutes: u64,
    hours: u64,
    doms: u64,
    months: u64,
    dows: u64,
    /// Whether the day-of-month / day-of-week field was a star: decides AND versus OR.
    dom_star: bool,
    dow_star: bool,
}

struct Bounds {
    field: &'static str,
    min: i64,
    max: i64,
    names: &'static [(&'static str, i64)],
}

const MINUTES: Bounds = Bounds { field: "minute", min: 0, max: 59, names: &[] };
const HOURS: Bounds = Bounds { field: "hour", min: 0, max: 23, names: &[] };
const DOMS: Bounds = Bounds { field: "day-of-month", min: 1, max: 31, names: &[] };
const MONTHS: Bounds = Bounds {
    field: "month",
    min: 1,
    max: 12,
    names: &[
        ("jan", 1),
        ("feb", 2),
        ("mar", 3),
        ("apr", 4),
        ("may", 5),
        ("jun", 6),
        ("jul", 7),
        ("aug", 8),
        ("sep", 9),
        ("oct", 10),
        ("nov", 11),
        ("dec", 12),
    ],
};
const DOWS: Bounds = Bounds {
    field: "day-of-week",
    min: 0,
    max: 6,
    names: &[("sun", 0), ("mon", 1), ("tue", 2), ("wed", 3), ("thu", 4), ("fri", 5), ("sat", 6)],
};

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

fn parse_descriptor(text: &str) -> Result<Kind, ScheduleError> {
    // Values that robfig fills in for each descriptor; `all` sets are stars.
    let all = |b: &Bounds| bits(b.min, b.max, 1);
    let (minutes, hours) = (1, 1);
    let fields = match text {
        "@yearly" | "@annually" => Fields {
            minutes,
            hours,
            doms: 1 << 1,
            months: 1 << 1,
            dows: all(&DOWS),
            dom_star: false,
            dow_star: true,
        },
        "@monthly" => Fields {
            minutes,
            hours,
            doms: 1 << 1,
            months: all(&MONTHS),
            dows: all(&DOWS),
            dom_star: false,
            dow_star: true,
        },
        "@weekly" => Fields {
            minutes,
            hours,
            doms: all(&DOMS),
            months: all(&MONTHS),
            dows: 1,
            dom_star: true,
            dow_star: false,
        },
        "@daily" | "@midnight" => Fields {
            minutes,
            hours,
            doms: all(&DOMS),
            months: all(&MONTHS),
            dows: all(&DOWS),
            dom_star: true,
            dow_star: true,
        },
        "@hourly" => Fields {
            minutes,
            hours: all(&HOURS),
            doms: all(&DOMS),
            months: all(&MONTHS),
            dows: all(&DOWS),
            dom_star: true,
            dow_star: true,
        },
        _ => {
            // robfig: exactly one space after `@every`, then a Go duration.
            let Some(duration) = text.strip_prefix("@every ") else {
                return Err(ScheduleError::UnknownDescriptor(text.to_owned()));
            };
            let nanos = parse_go_duration(duration, false)
                .map_err(|reason| ScheduleError::Duration { text: duration.to_owned(), reason })?;
            // robfig's Every: below a second becomes a second, otherwise truncated to seconds.
            let seconds = (nanos / NANOS_PER_SECOND).max(1);
            let delay_ms = i64::try_from(seconds * 1_000).map_err(|_| ScheduleError::Duration {
                text: duration.to_owned(),
                reason: "out of range".to_owned(),
            })?;
            return Ok(Kind::Every { delay_ms });
        }
    };
    Ok(Kind::Spec(fields))
}

fn parse_fields(spec: &str) -> Result<Fields, ScheduleError> {
    let parts: Vec<&str> = spec.split_whitespace().collect();
    let [minute, hour, dom, month, dow] = parts[..] else {
        return Err(ScheduleError::FieldCount { found: parts.len(), spec: spec.to_owned() });
    };
    let (minutes, _) = parse_field(minute, &MINUTES)?;
    let (hours, _) = parse_field(hour, &HOURS)?;
    let (doms, dom_star) = parse_field(dom, &DOMS)?;
    let (months, _) = parse_field(month, &MONTHS)?;
    let (dows, dow_star) = parse_field(dow, &DOWS)?;
    Ok(Fields { minutes, hours, doms, months, dows, dom_star, dow_star })
}

/// A comma list of ranges; returns the bit set and whether any item was a star.
fn parse_field(expr: &str, bounds: &Bounds) -> Result<(u64, bool), ScheduleError> {
    let mut set = 0;
    let mut star = false;
    // robfig splits with FieldsFunc, which drops empty items: "1,,2" is "1,2" and "," is empty.
    for item in expr.split(',').filter(|item| !item.is_empty()) {
        let (item_set, item_star) = parse_range(item, bounds).map_err(|reason| ScheduleError::Field {
            field: bounds.field,
            expr: expr.to_owned(),
            reason,
        })?;
        set |= item_set;
        star |= item_star;
    }
    Ok((set, star))
}

/// One item: `*`/`?`, `a`, `a-b`, each optionally `/step`; `a/step` means `a-max/step`.
fn parse_range(item: &str, bounds: &Bounds) -> Result<(u64, bool), String> {
    let range_and_step: Vec<&str> = item.split('/').collect();
    let low_and_high: Vec<&str> = range_and_step[0].split('-').collect();
    let (start, mut end, mut star) = if low_and_high[0] == "*" || low_and_high[0] == "?" {
        // robfig ignores anything after a star's hyphen ("*-5" is "*").
        (bounds.min, bounds.max, true)
    } else {
        let start = parse_int_or_name(low_and_high[0], bounds)?;
        let end = match low_and_high[..] {
            [_] => start,
            [_, high] => parse_int_or_name(high, bounds)?,
            _ => return Err(format!("too many hyphens in {item:?}")),
        };
        (start, end, false)
    };
    let step = match range_and_step[..] {
        [_] => 1,
        [_, step] => {
            let step = parse_int(step)?;
            if low_and_high.len() == 1 {
                end = bounds.max;
            }
            // "*/2" restricts the field, which matters for the day-of-month/day-of-week rule.
            if step > 1 {
                star = false;
            }
            step
        }
        _ => return Err(format!("too many slashes in {item:?}")),
    };
    if start < bounds.min {
        return Err(format!("{start} is below the minimum {}", bounds.min));
    }
    if end > bounds.max {
        return Err(format!("{end} is above the maximum {}", bounds.max));
    }
    if start > end {
        return Err(format!("range start {start} is beyond its end {end}"));
    }
    if step == 0 {
        return Err("step must be a positive number".to_owned());
    }
    Ok((bits(start, end, step), star))
}

fn parse_int_or_name(text: &str, bounds: &Bounds) -> Result<i64, String> {
    let lower = text.to_ascii_lowercase();
    match bounds.names.iter().find(|(name, _)| *name == lower) {
        Some(&(_, value)) => Ok(value),
        None => parse_int(text),
    }
}

/// Go `strconv.Atoi` then robfig's non-negative check.
fn parse_int(text: &str) -> Result<i64, String> {
    let value: i64 = text.parse().map_err(|_| format!("{text:?} is not a number"))?;
    if value < 0 {
        return Err(format!("negative number {value} not allowed"));
    }
    Ok(value)
}

/// Bits `start, start+step, …, end`; callers keep `0 <= start <= end <= 63`, `step >= 1`.
fn bits(start: i64, end: i64, step: i64) -> u64 {
    (start..=end).step_by(usize::try_from(step).unwrap_or(usize::MAX)).fold(0, |set, v| set | 1 << v)
}

/// Go `time.ParseDuration` (optionally with `d` = 24 h), in nanoseconds.
fn parse_go_duration(text: &str, allow_days: bool) -> Result<i128, String> {
    let (negative, mut rest) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    if rest == "0" {
        return Ok(0);
    }
    if rest.is_empty() {
        return Err("empty duration".to_owned());
    }
    let mut total: i128 = 0;
    while !rest.is_empty() {
        let int_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        let (int_part, after) = rest.split_at(int_len);
        let (frac_part, after) = match after.strip_prefix('.') {
            Some(after) => after.split_at(after.bytes().take_while(u8::is_ascii_digit).count()),
            None => ("", after),
        };
        if int_part.is_empty() && frac_part.is_empty() {
            return Err(format!("expected a number at {rest:?}"));
        }
        let unit_len = after.find(|c: char| c == '.' || c.is_ascii_digit()).unwrap_or(after.len());
        let (unit, tail) = after.split_at(unit_len);
        let scale: i128 = match unit {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => NANOS_PER_SECOND,
            "m" => 60 * NANOS_PER_SECOND,
            "h" => 3_600 * NANOS_PER_SECOND,
            "d" if allow_days => 86_400 * NANOS_PER_SECOND,
            "" => return Err(format!("missing unit after {:?}", &rest[..rest.len() - after.len()])),
            _ if allow_days => return Err(format!("unknown unit {unit:?} (use ns, us, ms, s, m, h or d)")),
            _ => return Err(format!("unknown unit {unit:?} (use ns, us, ms, s, m or h)")),
        };
        let overflow = || "out of range".to_owned();
        let int: i128 = if int_part.is_empty() { 0 } else { int_part.parse().map_err(|_| overflow())? };
        let mut value = int.checked_mul(scale).ok_or_else(overflow)?;
        // Nanoseconds cannot use more than 18 fraction digits of any unit here.
        let frac = &frac_part[..frac_part.len().min(18)];
        if !frac.is_empty() {
            let numerator: i128 = frac.parse().map_err(|_| overflow())?;
            value =
                value.checked_add(numerator * scale / 10_i128.pow(frac.len() as u32)).ok_or_else(overflow)?;
        }
        total = total.checked_add(value).filter(|t| *t <= i128::from(i64::MAX)).ok_or_else(overflow)?;
        rest = tail;
    }
    Ok(if negative { -total } else { total })
}

/// A wall-clock minute; the derived order is chronological.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Civil {
    year: i32,
    month: u8,
    day: u8,
    hour: u8,
    minute: u8,
}

impl Civil {
    fn new(year: i32, month: u8, day: u8, hour: u8, minute: u8) -> Civil {
        Civil { year, month, day, hour, minute }
    }

    fn year_start(year: i32) -> Civil {
        Civil::new(year, 1, 1, 0, 0)
    }

    /// The minute containing `dt`.
    fn floor(dt: DateTime) -> Civil {
        Civil::new(
            i32::from(dt.year()),
            dt.month().unsigned_abs(),
            dt.day().unsigned_abs(),
            dt.hour().unsigned_abs(),
            dt.minute().unsigned_abs(),
        )
    }

    /// The first whole minute at or after `dt`.
    fn ceil(dt: DateTime) -> Civil {
        let floor = Civil::floor(dt);
        if dt.second() == 0 && dt.subsec_nanosecond() == 0 { floor } else { floor.next_minute() }
    }

    fn to_datetime(self) -> Option<DateTime> {
        let narrow = |v: u8| i8::try_from(v).ok();
        DateTime::new(
            i16::try_from(self.year).ok()?,
            narrow(self.month)?,
            narrow(self.day)?,
            narrow(self.hour)?,
            narrow(self.minute)?,
            0,
            0,
        )
        .ok()
    }

    fn next_month(self) -> Civil {
        if self.month == 12 {
            Civil::year_start(self.year + 1)
        } else {
            Civil::new(self.year, self.month + 1, 1, 0, 0)
        }
    }

    fn next_day(self) -> Civil {
        if self.day >= days_in_month(self.year, self.month) {
            self.next_month()
        } else {
            Civil::new(self.year, self.month, self.day + 1, 0, 0)
        }
    }

    fn next_hour(self) -> Civil {
        if self.hour == 23 { self.next_day() } else { Civil { hour: self.hour + 1, minute: 0, ..self } }
    }

    fn next_minute(self) -> Civil {
        if self.minute == 59 { self.next_hour() } else { Civil { minute: self.minute + 1, ..self } }
    }

    fn prev_month_end(self) -> Civil {
        let (year, month) = if self.month == 1 { (self.year - 1, 12) } else { (self.year, self.month - 1) };
        Civil::new(year, month, days_in_month(year, month), 23, 59)
    }

    fn prev_day_end(self) -> Civil {
        if self.day <= 1 {
            self.prev_month_end()
        } else {
            Civil::new(self.year, self.month, self.day - 1, 23, 59)
        }
    }

    fn prev_hour_end(self) -> Civil {
        if self.hour == 0 { self.prev_day_end() } else { Civil { hour: self.hour - 1, minute: 59, ..self } }
    }
}

fn is_leap(year: i32) -> bool {
    year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
}

fn days_in_month(year: i32, month: u8) -> u8 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Day of week, Sunday = 0 (days-from-civil; 1970-01-01 was a Thursday).
fn weekday(year: i32, month: u8, day: u8) -> u8 {
    let (m, d) = (i64::from(month), i64::from(day));
    let y = i64::from(year) - i64::from(m <= 2);
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    // rem_euclid(7) is in 0..7, so the cast is lossless.
    (days + 4).rem_euclid(7) as u8
}

/// The lowest set bit at or above `from`.
fn next_bit(set: u64, from: u8) -> Option<u8> {
    let masked = set.checked_shr(u32::from(from)).map_or(0, |s| s << from);
    (masked != 0).then(|| masked.trailing_zeros() as u8)
}

/// The highest set bit at or below `upto`.
fn prev_bit(set: u64, upto: u8) -> Option<u8> {
    let masked = if upto >= 63 { set } else { set & ((1 << (upto + 1)) - 1) };
    (masked != 0).then(|| (63 - masked.leading_zeros()) as u8)
}

fn add_nanos(ts: Timestamp, nanos: i64) -> Option<Timestamp> {
    ts.checked_add(SignedDuration::from_nanos(nanos)).ok()
}

impl Fields {
    fn day_matches(&self, year: i32, month: u8, day: u8) -> bool {
        let dom = self.doms & 1 << day != 0;
        let dow = self.dows & 1 << weekday(year, month, day) != 0;
        // robfig (and Vixie cron): a star in either field means both must match, else either.
        if self.dom_star || self.dow_star { dom && dow } else { dom || dow }
    }

    fn never_fires(&self) -> bool {
        self.minutes == 0 || self.hours == 0 || self.months == 0 || (self.doms == 0 && self.dows == 0)
    }

    /// The first matching wall-clock minute in `[from, limit)`, advancing each field to its next
    /// accepted value and carrying into the coarser one, as robfig does.
    fn next_civil(&self, mut c: Civil, limit: Civil) -> Option<Civil> {
        if self.never_fires() {
            return None;
        }
        loop {
            if c >= limit {
                return None;
            }
            match next_bit(self.months, c.month) {
                None => c = Civil::year_start(c.year + 1),
                Some(m) if m != c.month => c = Civil::new(c.year, m, 1, 0, 0),
                Some(_) => match (c.day..=days_in_month(c.year, c.month))
                    .find(|&d| self.day_matches(c.year, c.month, d))
                {
                    None => c = c.next_month(),
                    Some(d) if d != c.day => c = Civil::new(c.year, c.month, d, 0, 0),
                    Some(_) => match next_bit(self.hours, c.hour) {
                        None => c = c.next_day(),
                        Some(h) if h != c.hour => c = Civil { hour: h, minute: 0, ..c },
                        Some(_) => match next_bit(self.minutes, c.minute) {
                            None => c = c.next_hour(),
                            Some(m) => {
                                let found = Civil { minute: m, ..c };
                                return (found < limit).then_some(found);
                            }
                        },
                    },
                },
            }
        }
    }

    /// The last matching wall-clock minute in `[lower, c]`.
    fn prev_civil(&self, mut c: Civil, lower: Civil) -> Option<Civil> {
        if self.never_fires() {
            return None;
        }
        loop {
            if c < lower {
                return None;
            }
            match prev_bit(self.months, c.month) {
                None => c = Civil::new(c.year - 1, 12, 31, 23, 59),
                Some(m) if m != c.month => c = Civil::new(c.year, m, days_in_month(c.year, m), 23, 59),
                Some(_) => match (1..=c.day.min(days_in_month(c.year, c.month)))
                    .rev()
                    .find(|&d| self.day_matches(c.year, c.month, d))
                {
                    None => c = c.prev_month_end(),
                    Some(d) if d != c.day => c = Civil::new(c.year, c.month, d, 23, 59),
                    Some(_) => match prev_bit(self.hours, c.hour) {
                        None => c = c.prev_day_end(),
                        Some(h) if h != c.hour => c = Civil { hour: h, minute: 59, ..c },
                        Some(_) => match prev_bit(self.minutes, c.minute) {
                            None => c = c.prev_hour_end(),
                            Some(m) => {
                                let found = Civil { minute: m, ..c };
                                return (found >= lower).then_some(found);
                            }
                        },
                    },
                },
            }
        }
    }

    /// Walks the zone's constant-offset segments forward from `after_ms`: within a segment the
    /// wall clock is monotonic, so the first matching wall minute there is the next fire time.
    /// Gaps then never match and repeated wall times match once per segment.
    fn next_after(&self, tz: &TimeZone, after_ms: i64) -> Option<i64> {
        let after = Timestamp::from_millisecond(after_ms).ok()?;
        let mut offset = tz.to_offset(after);
        let mut from = Civil::floor(offset.to_datetime(after)).next_minute();
        let limit = Civil::year_start(from.year.checked_add(HORIZON_YEARS + 1)?);
        let mut seg_start = after;
        loop {
            let transition = tz.following(seg_start).next().map(|t| t.timestamp());
            let seg_limit = match transition {
                Some(t) => Civil::ceil(offset.to_datetime(t)).min(limit),
                None => limit,
            };
            if let Some(found) = self.next_civil(from, seg_limit) {
                return Some(offset.to_timestamp(found.to_datetime()?).ok()?.as_millisecond());
            }
            let t = transition?;
            offset = tz.to_offset(t);
            from = Civil::ceil(offset.to_datetime(t));
            if from >= limit {
                return None;
            }
            seg_start = t;
        }
    }

    /// The mirror of [`Fields::next_after`], walking segments backwards from `at_ms` inclusive.
    fn prev_at_or_before(&self, tz: &TimeZone, at_ms: i64) -> Option<i64> {
        let at = Timestamp::from_millisecond(at_ms).ok()?;
        let mut offset = tz.to_offset(at);
        let mut upper = Civil::floor(offset.to_datetime(at));
        let lower = Civil::year_start(upper.year.checked_sub(HORIZON_YEARS)?);
        // `preceding` is strict, so ask from just after `at` to see a transition exactly at it.
        let mut query = add_nanos(at, 1).unwrap_or(at);
        loop {
            let transition = tz.preceding(query).next().map(|t| t.timestamp());
            let seg_lower = match transition {
                Some(t) => Civil::ceil(offset.to_datetime(t)).max(lower),
                None => lower,
            };
            if let Some(found) = self.prev_civil(upper, seg_lower) {
                return Some(offset.to_timestamp(found.to_datetime()?).ok()?.as_millisecond());
            }
            let t = transition?;
            let before = add_nanos(t, -1)?;
            offset = tz.to_offset(before);
            upper = Civil::floor(offset.to_datetime(before));
            if upper < lower {
                return None;
            }
            query = t;
        }
    }
}

#[cfg(test)]
mod tests;
