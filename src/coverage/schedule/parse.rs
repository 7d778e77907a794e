//! The grammar of robfig/cron v3 `ParseStandard`: five fields, descriptors and Go durations.

use super::eval::Fields;
use super::{Kind, NANOS_PER_SECOND, ScheduleError};

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

pub(super) fn parse_descriptor(text: &str) -> Result<Kind, ScheduleError> {
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

pub(super) fn parse_fields(spec: &str) -> Result<Fields, ScheduleError> {
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
pub(super) fn parse_go_duration(text: &str, allow_days: bool) -> Result<i128, String> {
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
