//! Kubernetes timestamps, parsed fast in the form the API server writes them.
//!
//! The API server writes every `Time` as `YYYY-MM-DDTHH:MM:SSZ` (k8s-openapi serializes it
//! so too). That form is read here by hand; anything else (fractions, offsets, a leap
//! second, an invalid date) goes to jiff's parser, which k8s-openapi's `Time` uses, so what
//! is accepted, and as what, is exactly as before. jiff's general parser was a twentieth of
//! a Job's decoding.

use std::fmt;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::{
    Deserializer,
    de::{Error, Visitor},
};

/// An optional `Time` (`null` or absent: `None`), as k8s-openapi reads it.
pub(super) fn opt<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Time>, D::Error> {
    struct Opt;
    impl<'de> Visitor<'de> for Opt {
        type Value = Option<Time>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("an RFC 3339 timestamp")
        }
        fn visit_none<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_str(self)
        }
        fn visit_str<E: Error>(self, s: &str) -> Result<Self::Value, E> {
            parse(s).map(|t| Some(Time(t))).map_err(E::custom)
        }
    }
    d.deserialize_option(Opt)
}

/// `s` as a timestamp: the API server's form by hand, any other through jiff.
fn parse(s: &str) -> Result<Timestamp, jiff::Error> {
    match api_server_form(s.as_bytes()) {
        Some(t) => Ok(t),
        None => s.parse(),
    }
}

/// `YYYY-MM-DDTHH:MM:SSZ` with a valid date and time (seconds 00–59), else `None`.
fn api_server_form(b: &[u8]) -> Option<Timestamp> {
    if b.len() != 20
        || b[4] != b'-'
        || b[7] != b'-'
        || b[10] != b'T'
        || b[13] != b':'
        || b[16] != b':'
        || b[19] != b'Z'
    {
        return None;
    }
    let num = |range: std::ops::Range<usize>| -> Option<i64> {
        b[range].iter().try_fold(0i64, |n, &c| c.is_ascii_digit().then(|| n * 10 + i64::from(c - b'0')))
    };
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let month_days = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return None,
    };
    if day < 1 || day > month_days || hour > 23 || minute > 59 || second > 59 {
        return None;
    }
    let days = days_from_civil(year, month, day);
    Timestamp::from_second(days * 86_400 + hour * 3_600 + minute * 60 + second).ok()
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn the_api_server_form_reads_as_jiff_reads_it() {
        for s in
            ["1970-01-01T00:00:00Z", "2026-11-01T12:34:56Z", "2024-02-29T23:59:59Z", "0000-03-01T00:00:00Z"]
        {
            assert_eq!(api_server_form(s.as_bytes()), Some(s.parse().unwrap()), "{s}");
        }
        // Not the API server's form, or not a valid instant: jiff decides.
        for s in [
            "2023-02-29T00:00:00Z",
            "2026-11-01T12:34:60Z",
            "2026-11-01T24:00:00Z",
            "2026-13-01T00:00:00Z",
            "2026-11-01T12:34:56.5Z",
            "2026-11-01T12:34:56+01:00",
            "2026-11-01 12:34:56Z",
            "+2026-11-01T12:34:5Z",
        ] {
            assert_eq!(api_server_form(s.as_bytes()), None, "{s}");
        }
        assert_eq!(parse("2026-11-01T12:34:56.5Z").unwrap(), "2026-11-01T12:34:56.5Z".parse().unwrap());
        assert!(parse("2023-02-29T00:00:00Z").is_err());
    }

    proptest! {
        #[test]
        fn any_string_of_the_shape_parses_as_jiff_parses_it(
            y in 0u32..10_000, mo in 0u32..14, d in 0u32..33, h in 0u32..26, mi in 0u32..61, s in 0u32..62,
        ) {
            let text = format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}Z");
            let jiff: Result<Timestamp, _> = text.parse();
            match parse(&text) {
                Ok(t) => prop_assert_eq!(Ok(t), jiff.map_err(|e| e.to_string()), "{}", text),
                Err(_) => prop_assert!(jiff.is_err(), "{}", text),
            }
        }
    }
}
