//! Fire times of a parsed schedule: the wall-clock search within each constant-offset segment
//! of the zone (see the parent module for the semantics).

use super::HORIZON_YEARS;
use jiff::civil::{Date, DateTime};
use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};

/// Bit sets of the accepted values (bit n = value n), as robfig stores them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Fields {
    pub(super) minutes: u64,
    pub(super) hours: u64,
    pub(super) doms: u64,
    pub(super) months: u64,
    pub(super) dows: u64,
    /// Whether the day-of-month / day-of-week field was a star: decides AND versus OR.
    pub(super) dom_star: bool,
    pub(super) dow_star: bool,
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

/// A date with the same calendar as `year-month-day`, inside jiff's year range: the Gregorian
/// calendar repeats every 400 years (146,097 days, a whole number of weeks), and the search can
/// step a few years past jiff's 9999.
fn calendar_date(year: i32, month: u8, day: u8) -> Option<Date> {
    let year = i16::try_from(2000 + year.rem_euclid(400)).ok()?;
    Date::new(year, i8::try_from(month).ok()?, i8::try_from(day).ok()?).ok()
}

fn days_in_month(year: i32, month: u8) -> u8 {
    // Callers pass months 1..=12, which always make a date.
    calendar_date(year, month, 1).map_or(31, |d| d.days_in_month().unsigned_abs())
}

/// Day of week, Sunday = 0.
fn weekday(year: i32, month: u8, day: u8) -> u8 {
    // Callers pass days within the month; 7 matches no day-of-week bit.
    calendar_date(year, month, day).map_or(7, |d| d.weekday().to_sunday_zero_offset().unsigned_abs())
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
    pub(super) fn next_after(&self, tz: &TimeZone, after_ms: i64) -> Option<i64> {
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
    pub(super) fn prev_at_or_before(&self, tz: &TimeZone, at_ms: i64) -> Option<i64> {
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
