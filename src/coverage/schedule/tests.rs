use super::*;
use jiff::Timestamp;
use jiff::civil::DateTime;
use proptest::prelude::*;

/// Epoch ms of an RFC 3339 instant.
fn ms(text: &str) -> i64 {
    text.parse::<Timestamp>().expect("test instant").as_millisecond()
}

fn parse(spec: &str) -> Schedule {
    Schedule::parse(spec, None).expect("test spec")
}

fn parse_in(spec: &str, zone: &str) -> Schedule {
    Schedule::parse(spec, Some(zone)).expect("test spec")
}

/// Epoch ms of a wall-clock time in `zone` (earlier instant if repeated).
fn local(text: &str, zone: &str) -> i64 {
    let dt: DateTime = text.parse().expect("test datetime");
    dt.to_zoned(load_zone(zone).expect("test zone")).expect("in range").timestamp().as_millisecond()
}

/// robfig/cron v3 `spec_test.go` `TestActivation`: `Next(time - 1s) == time` iff `fires`.
/// robfig evaluates these in `time.Local` for both the time and the schedule; UTC here.
#[test]
fn robfig_activation_table() {
    #[rustfmt::skip]
    let rows: &[(&str, &str, bool)] = &[
        // Every fifteen minutes.
        ("2012-07-09T15:00:00Z", "0/15 * * * *", true),
        ("2012-07-09T15:45:00Z", "0/15 * * * *", true),
        ("2012-07-09T15:40:00Z", "0/15 * * * *", false),
        // Every fifteen minutes, starting at 5 minutes.
        ("2012-07-09T15:05:00Z", "5/15 * * * *", true),
        ("2012-07-09T15:20:00Z", "5/15 * * * *", true),
        ("2012-07-09T15:50:00Z", "5/15 * * * *", true),
        // Named months
        ("2012-07-15T15:00:00Z", "0/15 * * Jul *", true),
        ("2012-07-15T15:00:00Z", "0/15 * * Jun *", false),
        // Everything set.
        ("2012-07-15T08:30:00Z", "30 08 ? Jul Sun", true),
        ("2012-07-15T08:30:00Z", "30 08 15 Jul ?", true),
        ("2012-07-16T08:30:00Z", "30 08 ? Jul Sun", false),
        ("2012-07-16T08:30:00Z", "30 08 15 Jul ?", false),
        // Predefined schedules
        ("2012-07-09T15:00:00Z", "@hourly", true),
        ("2012-07-09T15:04:00Z", "@hourly", false),
        ("2012-07-09T15:00:00Z", "@daily", false),
        ("2012-07-09T00:00:00Z", "@daily", true),
        ("2012-07-09T00:00:00Z", "@weekly", false),
        ("2012-07-08T00:00:00Z", "@weekly", true),
        ("2012-07-08T01:00:00Z", "@weekly", false),
        ("2012-07-08T00:00:00Z", "@monthly", false),
        ("2012-07-01T00:00:00Z", "@monthly", true),
        // If both are restricted, then only one needs to match.
        ("2012-07-15T00:00:00Z", "* * 1,15 * Sun", true),
        ("2012-06-15T00:00:00Z", "* * 1,15 * Sun", true),
        ("2012-08-01T00:00:00Z", "* * 1,15 * Sun", true),
        ("2012-07-15T00:00:00Z", "* * */10 * Sun", true),
        // However, if one has a star, then both need to match.
        ("2012-07-15T00:00:00Z", "* * * * Mon", false),
        ("2012-07-09T00:00:00Z", "* * 1,15 * *", false),
        ("2012-07-15T00:00:00Z", "* * 1,15 * *", true),
        ("2012-07-15T00:00:00Z", "* * */2 * Sun", true),
    ];
    assert_eq!(rows.len(), 29);
    for &(time, spec, fires) in rows {
        let t = ms(time);
        let got = parse(spec).next_after(t - 1_000);
        assert_eq!(got == Some(t), fires, "{spec} at {time}: got {got:?}");
    }
}

/// robfig/cron v3 `spec_test.go` `TestNext` (6-field rows whose seconds field is 0, seconds
/// dropped; rows with other seconds skipped) and `TestNextWithTz`. robfig's `time.Local` rows are
/// UTC here; rows whose start time carries `TZ=America/New_York` (schedule in the time's zone) pass
/// the zone as `spec.timeZone`; `TestNextWithTz`'s fixed +05:30 is Asia/Kolkata.
#[test]
fn robfig_next_table() {
    const NY: Option<&str> = Some("America/New_York");
    #[rustfmt::skip]
    let rows: &[(&str, &str, Option<&str>, Option<&str>)] = &[
        // Simple cases
        ("2012-07-09T14:45:00Z", "0/15 * * * *", None, Some("2012-07-09T15:00:00Z")),
        ("2012-07-09T14:59:00Z", "0/15 * * * *", None, Some("2012-07-09T15:00:00Z")),
        ("2012-07-09T14:59:59Z", "0/15 * * * *", None, Some("2012-07-09T15:00:00Z")),
        // Wrap around hours
        ("2012-07-09T15:45:00Z", "20-35/15 * * * *", None, Some("2012-07-09T16:20:00Z")),
        // Wrap around days
        ("2012-07-09T23:46:00Z", "*/15 * * * *", None, Some("2012-07-10T00:00:00Z")),
        ("2012-07-09T23:45:00Z", "20-35/15 * * * *", None, Some("2012-07-10T00:20:00Z")),
        // Wrap around months
        ("2012-07-09T23:35:00Z", "0 0 9 Apr-Oct ?", None, Some("2012-08-09T00:00:00Z")),
        ("2012-07-09T23:35:00Z", "0 0 */5 Apr,Aug,Oct Mon", None, Some("2012-08-01T00:00:00Z")),
        ("2012-07-09T23:35:00Z", "0 0 */5 Oct Mon", None, Some("2012-10-01T00:00:00Z")),
        // Wrap around years
        ("2012-07-09T23:35:00Z", "0 0 * Feb Mon", None, Some("2013-02-04T00:00:00Z")),
        ("2012-07-09T23:35:00Z", "0 0 * Feb Mon/2", None, Some("2013-02-01T00:00:00Z")),
        // Wrap around minute, hour, day, month, and year
        ("2012-12-31T23:59:45Z", "* * * * *", None, Some("2013-01-01T00:00:00Z")),
        // Leap year
        ("2012-07-09T23:35:00Z", "0 0 29 Feb ?", None, Some("2016-02-29T00:00:00Z")),
        // Daylight savings time 2am EST (-5) -> 3am EDT (-4)
        ("2012-03-11T00:00:00-05:00", "TZ=America/New_York 30 2 11 Mar ?", None, Some("2013-03-11T02:30:00-04:00")),
        // hourly job
        ("2012-03-11T00:00:00-05:00", "TZ=America/New_York 0 * * * ?", None, Some("2012-03-11T01:00:00-05:00")),
        ("2012-03-11T01:00:00-05:00", "TZ=America/New_York 0 * * * ?", None, Some("2012-03-11T03:00:00-04:00")),
        ("2012-03-11T03:00:00-04:00", "TZ=America/New_York 0 * * * ?", None, Some("2012-03-11T04:00:00-04:00")),
        ("2012-03-11T04:00:00-04:00", "TZ=America/New_York 0 * * * ?", None, Some("2012-03-11T05:00:00-04:00")),
        // hourly job using CRON_TZ
        ("2012-03-11T00:00:00-05:00", "CRON_TZ=America/New_York 0 * * * ?", None, Some("2012-03-11T01:00:00-05:00")),
        ("2012-03-11T01:00:00-05:00", "CRON_TZ=America/New_York 0 * * * ?", None, Some("2012-03-11T03:00:00-04:00")),
        ("2012-03-11T03:00:00-04:00", "CRON_TZ=America/New_York 0 * * * ?", None, Some("2012-03-11T04:00:00-04:00")),
        ("2012-03-11T04:00:00-04:00", "CRON_TZ=America/New_York 0 * * * ?", None, Some("2012-03-11T05:00:00-04:00")),
        // 1am nightly job
        ("2012-03-11T00:00:00-05:00", "TZ=America/New_York 0 1 * * ?", None, Some("2012-03-11T01:00:00-05:00")),
        ("2012-03-11T01:00:00-05:00", "TZ=America/New_York 0 1 * * ?", None, Some("2012-03-12T01:00:00-04:00")),
        // 2am nightly job (skipped)
        ("2012-03-11T00:00:00-05:00", "TZ=America/New_York 0 2 * * ?", None, Some("2012-03-12T02:00:00-04:00")),
        // Daylight savings time 2am EDT (-4) => 1am EST (-5)
        ("2012-11-04T00:00:00-04:00", "TZ=America/New_York 30 2 04 Nov ?", None, Some("2012-11-04T02:30:00-05:00")),
        ("2012-11-04T01:45:00-04:00", "TZ=America/New_York 30 1 04 Nov ?", None, Some("2012-11-04T01:30:00-05:00")),
        // hourly job
        ("2012-11-04T00:00:00-04:00", "TZ=America/New_York 0 * * * ?", None, Some("2012-11-04T01:00:00-04:00")),
        ("2012-11-04T01:00:00-04:00", "TZ=America/New_York 0 * * * ?", None, Some("2012-11-04T01:00:00-05:00")),
        ("2012-11-04T01:00:00-05:00", "TZ=America/New_York 0 * * * ?", None, Some("2012-11-04T02:00:00-05:00")),
        // 1am nightly job (runs twice)
        ("2012-11-04T00:00:00-04:00", "TZ=America/New_York 0 1 * * ?", None, Some("2012-11-04T01:00:00-04:00")),
        ("2012-11-04T01:00:00-04:00", "TZ=America/New_York 0 1 * * ?", None, Some("2012-11-04T01:00:00-05:00")),
        ("2012-11-04T01:00:00-05:00", "TZ=America/New_York 0 1 * * ?", None, Some("2012-11-05T01:00:00-05:00")),
        // 2am nightly job
        ("2012-11-04T00:00:00-04:00", "TZ=America/New_York 0 2 * * ?", None, Some("2012-11-04T02:00:00-05:00")),
        ("2012-11-04T02:00:00-05:00", "TZ=America/New_York 0 2 * * ?", None, Some("2012-11-05T02:00:00-05:00")),
        // 3am nightly job
        ("2012-11-04T00:00:00-04:00", "TZ=America/New_York 0 3 * * ?", None, Some("2012-11-04T03:00:00-05:00")),
        ("2012-11-04T03:00:00-05:00", "TZ=America/New_York 0 3 * * ?", None, Some("2012-11-05T03:00:00-05:00")),
        // hourly job (zone from the start time)
        ("2012-11-04T00:00:00-04:00", "0 * * * ?", NY, Some("2012-11-04T01:00:00-04:00")),
        ("2012-11-04T01:00:00-04:00", "0 * * * ?", NY, Some("2012-11-04T01:00:00-05:00")),
        ("2012-11-04T01:00:00-05:00", "0 * * * ?", NY, Some("2012-11-04T02:00:00-05:00")),
        // 1am nightly job (runs twice)
        ("2012-11-04T00:00:00-04:00", "0 1 * * ?", NY, Some("2012-11-04T01:00:00-04:00")),
        ("2012-11-04T01:00:00-04:00", "0 1 * * ?", NY, Some("2012-11-04T01:00:00-05:00")),
        ("2012-11-04T01:00:00-05:00", "0 1 * * ?", NY, Some("2012-11-05T01:00:00-05:00")),
        // 2am nightly job
        ("2012-11-04T00:00:00-04:00", "0 2 * * ?", NY, Some("2012-11-04T02:00:00-05:00")),
        ("2012-11-04T02:00:00-05:00", "0 2 * * ?", NY, Some("2012-11-05T02:00:00-05:00")),
        // 3am nightly job
        ("2012-11-04T00:00:00-04:00", "0 3 * * ?", NY, Some("2012-11-04T03:00:00-05:00")),
        ("2012-11-04T03:00:00-05:00", "0 3 * * ?", NY, Some("2012-11-05T03:00:00-05:00")),
        // Unsatisfiable
        ("2012-07-09T23:35:00Z", "0 0 30 Feb ?", None, None),
        ("2012-07-09T23:35:00Z", "0 0 31 Apr ?", None, None),
        // Monthly job
        ("2012-11-04T00:00:00-04:00", "0 3 3 * ?", NY, Some("2012-12-03T03:00:00-05:00")),
        // DST resulting in midnight not being a valid time (robfig issue #157)
        ("2018-10-17T05:00:00-04:00", "TZ=America/Sao_Paulo 0 9 10 * ?", None, Some("2018-11-10T06:00:00-05:00")),
        ("2018-02-14T05:00:00-05:00", "TZ=America/Sao_Paulo 0 9 22 * ?", None, Some("2018-02-22T07:00:00-05:00")),
        // TestNextWithTz
        ("2016-01-03T13:09:03+05:30", "14 14 * * *", Some("Asia/Kolkata"), Some("2016-01-03T14:14:00+05:30")),
        ("2016-01-03T04:09:03+05:30", "14 14 * * ?", Some("Asia/Kolkata"), Some("2016-01-03T14:14:00+05:30")),
        ("2016-01-03T14:09:03+05:30", "14 14 * * *", Some("Asia/Kolkata"), Some("2016-01-03T14:14:00+05:30")),
        ("2016-01-03T14:00:00+05:30", "14 14 * * ?", Some("Asia/Kolkata"), Some("2016-01-03T14:14:00+05:30")),
    ];
    assert_eq!(rows.len(), 56);
    for &(start, spec, zone, expected) in rows {
        let schedule = Schedule::parse(spec, zone).expect(spec);
        let got = schedule.next_after(ms(start));
        assert_eq!(got, expected.map(ms), "{spec} ({zone:?}) after {start}");
        // Every expected fire time is also the latest one at or before itself.
        if let Some(fire) = got {
            assert_eq!(schedule.prev_at_or_before(fire), Some(fire), "{spec} prev of {fire}");
        }
    }
}

/// robfig/cron v3 `spec_test.go` `TestErrors` and `parser_test.go` `TestParseScheduleErrors` /
/// `TestStandardSpecSchedule` (the 5-field and descriptor rows), plus our own invalid specs.
#[test]
fn invalid_specs_are_errors() {
    let robfig = [
        "xyz",
        "60 0 * * *",
        "0 60 * * *",
        "0 0 * * XYZ",
        "5 j * * *",
        "* * * *",
        "@every Xm",
        "@unrecognized",
        "",
    ];
    let ours = [
        "* * * * * *",
        "0 24 * * *",
        "0 0 0 * *",
        "0 0 32 * *",
        "0 0 * 13 *",
        "0 0 * 0 *",
        "0 0 * * 7",
        "*/0 * * * *",
        "5-3 * * * *",
        "5--5 * * * *",
        "*//2 * * * *",
        "*/-12 * * * *",
        "-1 * * * *",
        "@daily ",
        "@every 1d",
        "@every",
        "TZ=America/New_York",
        "CRON_TZ=Mars/Olympus 0 * * * *",
        "TZ=Local 0 * * * *",
        "TZ=america/new_york 0 * * * *",
    ];
    for spec in robfig.into_iter().chain(ours) {
        assert!(Schedule::parse(spec, None).is_err(), "{spec:?} should not parse");
    }
    for zone in ["Mars/Olympus", "", "Local"] {
        let err = Schedule::parse("0 * * * *", Some(zone)).unwrap_err();
        assert!(matches!(err, ScheduleError::UnknownTimeZone { .. }), "{zone}: {err}");
    }
}

#[test]
fn error_messages_name_the_problem() {
    let message = |spec: &str| Schedule::parse(spec, None).unwrap_err().to_string();
    assert!(message("0 0 * * 7").contains("day-of-week"), "{}", message("0 0 * * 7"));
    assert!(message("0 0 * * 7").contains("above the maximum 6"));
    assert!(message("*/0 * * * *").contains("minute"));
    assert!(message("*/0 * * * *").contains("step"));
    assert!(message("* * * *").contains("exactly 5 fields"));
    assert!(message("@fortnightly").contains("unknown descriptor"));
    assert!(message("CRON_TZ=Mars/Olympus 0 * * * *").contains("Mars/Olympus"));
    let conflict = Schedule::parse("CRON_TZ=Asia/Tokyo 0 * * * *", Some("UTC")).unwrap_err();
    assert!(matches!(conflict, ScheduleError::TimeZoneConflict { prefix: "CRON_TZ=", .. }), "{conflict}");
}

/// robfig/cron v3 `parser_test.go` `TestParseSchedule`: prefixes and descriptors parse to the
/// same schedule as the explicit spec.
#[test]
fn equivalent_spellings() {
    assert_eq!(parse("CRON_TZ=UTC  5 * * * *"), parse("5 * * * *"));
    assert_eq!(parse("TZ=Asia/Tokyo @midnight"), parse_in("0 0 * * *", "Asia/Tokyo"));
    assert_eq!(parse("CRON_TZ=Asia/Tokyo 5 * * * *"), parse_in("5 * * * *", "Asia/Tokyo"));
    assert_eq!(parse("@yearly"), parse("@annually"));
    assert_eq!(parse("@yearly"), parse("0 0 1 1 *"));
    assert_eq!(parse("@monthly"), parse("0 0 1 * *"));
    assert_eq!(parse("@weekly"), parse("0 0 * * 0"));
    assert_eq!(parse("@daily"), parse("0 0 * * *"));
    assert_eq!(parse("@midnight"), parse("0 0 * * *"));
    assert_eq!(parse("@hourly"), parse("0 * * * *"));
    assert_eq!(parse("0 0 * jan-MAR mon-FRI"), parse("0 0 * 1-3 1-5"));
    assert_eq!(parse("0 0 * * SUN,sat"), parse("0 0 * * 0,6"));
    assert_eq!(parse("5/20 * * * *"), parse("5,25,45 * * * *"));
    assert_eq!(parse("1,5-7/2,3 * * * *"), parse("1,3,5,7 * * * *"));
    assert_eq!(parse("*-5 * * * *"), parse("* * * * *"));
    assert_eq!(parse("*/1 * * * *"), parse("* * * * *"));
}

#[test]
fn daily_hourly_steps_ranges() {
    let t = ms("2026-03-04T10:17:30Z");
    assert_eq!(parse("@daily").next_after(t), Some(ms("2026-03-05T00:00:00Z")));
    assert_eq!(parse("@hourly").next_after(t), Some(ms("2026-03-04T11:00:00Z")));
    assert_eq!(parse("@daily").prev_at_or_before(t), Some(ms("2026-03-04T00:00:00Z")));
    assert_eq!(parse("@hourly").prev_at_or_before(t), Some(ms("2026-03-04T10:00:00Z")));
    assert_eq!(parse("*/7 * * * *").next_after(t), Some(ms("2026-03-04T10:21:00Z")));
    assert_eq!(parse("0 9-17/4 * * MON-FRI").next_after(t), Some(ms("2026-03-04T13:00:00Z")));
    // 2026-03-07 is a Saturday: the next weekday run is Monday the 9th.
    assert_eq!(
        parse("0 9-17/4 * * MON-FRI").next_after(ms("2026-03-06T17:00:00Z")),
        Some(ms("2026-03-09T09:00:00Z"))
    );
    assert_eq!(
        parse("30 2 * * *").prev_at_or_before(ms("2026-03-04T02:30:00Z")),
        Some(ms("2026-03-04T02:30:00Z"))
    );
    assert_eq!(
        parse("30 2 * * *").prev_at_or_before(ms("2026-03-04T02:29:59.999Z")),
        Some(ms("2026-03-03T02:30:00Z"))
    );
    // Strictly after: a time exactly on a fire time moves on.
    assert_eq!(parse("@hourly").next_after(ms("2026-03-04T11:00:00Z")), Some(ms("2026-03-04T12:00:00Z")));
}

#[test]
fn dom_dow_or_when_both_restricted_and_when_one_is_star() {
    // 2026-11-13 is a Friday; the 1st of December a Tuesday.
    let from = ms("2026-11-02T00:00:00Z");
    // Both restricted: the 13th OR any Friday, so Friday the 6th comes first.
    assert_eq!(parse("0 0 13 * FRI").next_after(from), Some(ms("2026-11-06T00:00:00Z")));
    assert_eq!(parse("0 0 1 * MON").next_after(ms("2026-11-30T00:00:00Z")), Some(ms("2026-12-01T00:00:00Z")));
    // A star (even `?` or `*/1`) in the day-of-month makes it AND: Fridays only.
    assert_eq!(parse("0 0 * * FRI").next_after(from), Some(ms("2026-11-06T00:00:00Z")));
    assert_eq!(parse("0 0 ? * FRI").next_after(from), Some(ms("2026-11-06T00:00:00Z")));
    // A star in the day-of-week: Friday the 13th is not required, just the 13th.
    assert_eq!(parse("0 0 13 * *").next_after(from), Some(ms("2026-11-13T00:00:00Z")));
    // `*/2` in the day-of-month is restricted, so OR: odd days or Fridays.
    assert_eq!(
        parse("0 0 */2 * FRI").next_after(ms("2026-11-03T00:00:00Z")),
        Some(ms("2026-11-05T00:00:00Z"))
    );
    assert_eq!(
        parse("0 0 */2 * TUE").next_after(ms("2026-11-02T00:00:00Z")),
        Some(ms("2026-11-03T00:00:00Z"))
    );
    // Previous direction follows the same rule.
    assert_eq!(
        parse("0 0 13 * FRI").prev_at_or_before(ms("2026-11-12T00:00:00Z")),
        Some(ms("2026-11-06T00:00:00Z"))
    );
}

#[test]
fn new_york_2026_transitions() {
    let ny = "America/New_York";
    // Spring forward Sun 2026-03-08 02:00 EST -> 03:00 EDT: 02:30 does not exist that day.
    let daily_0230 = parse_in("30 2 * * *", ny);
    assert_eq!(daily_0230.next_after(local("2026-03-07T03:00", ny)), Some(ms("2026-03-09T02:30:00-04:00")));
    assert_eq!(
        daily_0230.prev_at_or_before(ms("2026-03-09T00:00:00-04:00")),
        Some(ms("2026-03-07T02:30:00-05:00"))
    );
    let hourly = parse_in("@hourly", ny);
    assert_eq!(hourly.next_after(ms("2026-03-08T01:00:00-05:00")), Some(ms("2026-03-08T03:00:00-04:00")));
    assert_eq!(
        hourly.prev_at_or_before(ms("2026-03-08T02:59:00-04:00")),
        Some(ms("2026-03-08T01:00:00-05:00"))
    );
    // Fall back Sun 2026-11-01 02:00 EDT -> 01:00 EST: 01:30 happens twice and fires twice.
    let daily_0130 = parse_in("30 1 * * *", ny);
    let first = daily_0130.next_after(ms("2026-11-01T00:00:00-04:00"));
    assert_eq!(first, Some(ms("2026-11-01T01:30:00-04:00")));
    let second = first.and_then(|t| daily_0130.next_after(t));
    assert_eq!(second, Some(ms("2026-11-01T01:30:00-05:00")));
    assert_eq!(second.and_then(|t| daily_0130.next_after(t)), Some(ms("2026-11-02T01:30:00-05:00")));
    assert_eq!(daily_0130.prev_at_or_before(ms("2026-11-01T01:45:00-05:00")), second);
    assert_eq!(daily_0130.prev_at_or_before(ms("2026-11-01T01:15:00-05:00")), first);
    // Midnight daily is unaffected; the instant differs by an hour across the change.
    let daily = parse_in("@daily", ny);
    assert_eq!(daily.next_after(ms("2026-11-01T12:00:00-05:00")), Some(ms("2026-11-02T00:00:00-05:00")));
    assert_eq!(daily.next_after(ms("2026-10-31T12:00:00-04:00")), Some(ms("2026-11-01T00:00:00-04:00")));
}

#[test]
fn berlin_2026_transitions() {
    let berlin = "Europe/Berlin";
    // 2026-03-29 02:00 CET -> 03:00 CEST; 2026-10-25 03:00 CEST -> 02:00 CET.
    let at_0215 = parse_in("15 2 * * *", berlin);
    assert_eq!(at_0215.next_after(ms("2026-03-28T12:00:00+01:00")), Some(ms("2026-03-30T02:15:00+02:00")));
    assert_eq!(at_0215.next_after(ms("2026-10-25T00:00:00+02:00")), Some(ms("2026-10-25T02:15:00+02:00")));
    assert_eq!(at_0215.next_after(ms("2026-10-25T02:15:00+02:00")), Some(ms("2026-10-25T02:15:00+01:00")));
    assert_eq!(at_0215.next_after(ms("2026-10-25T02:15:00+01:00")), Some(ms("2026-10-26T02:15:00+01:00")));
    let every_30 = parse_in("*/30 * * * *", berlin);
    assert_eq!(every_30.next_after(ms("2026-03-29T01:30:00+01:00")), Some(ms("2026-03-29T03:00:00+02:00")));
}

#[test]
fn tokyo_and_kolkata_have_no_dst() {
    let tokyo = parse_in("0 9 * * *", "Asia/Tokyo");
    assert_eq!(tokyo.next_after(ms("2026-05-31T23:00:00Z")), Some(ms("2026-06-01T09:00:00+09:00")));
    assert_eq!(tokyo.next_after(ms("2026-06-01T00:00:00Z")), Some(ms("2026-06-02T09:00:00+09:00")));
    let kolkata = parse_in("30 23 * * *", "Asia/Kolkata");
    assert_eq!(kolkata.next_after(ms("2026-06-01T17:00:00Z")), Some(ms("2026-06-01T18:00:00Z")));
    assert_eq!(kolkata.next_after(ms("2026-06-01T17:00:00Z")), Some(ms("2026-06-01T23:30:00+05:30")));
    assert_eq!(kolkata.prev_at_or_before(ms("2026-06-01T17:59:59Z")), Some(ms("2026-05-31T23:30:00+05:30")));
}

#[test]
fn every_is_a_constant_delay_without_phase() {
    let every = parse("@every 1h30m");
    assert_eq!(every.next_after(1_000), Some(1_000 + 90 * 60_000));
    assert_eq!(every.prev_at_or_before(1_000), None);
    // robfig rounds down to whole seconds, with one second as the floor.
    assert_eq!(parse("@every 1500ms").next_after(0), Some(1_000));
    assert_eq!(parse("@every 10ms").next_after(0), Some(1_000));
    assert_eq!(parse("@every 2.5m").next_after(0), Some(150_000));
    assert_eq!(parse("TZ=Asia/Tokyo @every 5m").next_after(0), Some(300_000));
}

#[test]
fn unsatisfiable_and_horizon() {
    let feb30 = parse("0 0 30 2 *");
    assert_eq!(feb30.next_after(0), None);
    assert_eq!(feb30.prev_at_or_before(ms("2026-01-01T00:00:00Z")), None);
    assert_eq!(parse("0 0 31 4,6,9,11 *").next_after(0), None);
    // Feb 29 with a Monday OR: fires on Mondays too.
    assert_eq!(
        parse("0 0 29 2 MON").next_after(ms("2026-11-29T00:00:00Z")),
        Some(ms("2027-02-01T00:00:00Z"))
    );
    assert_eq!(
        parse("0 0 29 2 *").prev_at_or_before(ms("2026-11-29T00:00:00Z")),
        Some(ms("2024-02-29T00:00:00Z"))
    );
    // Out of jiff's range: None, no panic.
    assert_eq!(parse("* * * * *").next_after(i64::MAX), None);
    assert_eq!(parse("* * * * *").prev_at_or_before(i64::MIN), None);
    // An empty list item leaves nothing to match (robfig accepts "," and never fires).
    assert_eq!(parse(", * * * *").next_after(0), None);
}

#[test]
fn leap_day_is_fast() {
    let schedule = parse("0 0 29 2 *");
    let start = std::time::Instant::now();
    let t = ms("2026-11-29T00:00:00Z");
    for i in 0..10_000_i64 {
        assert_eq!(schedule.next_after(t + i * 3_600_000), Some(ms("2028-02-29T00:00:00Z")));
    }
    assert!(start.elapsed() < std::time::Duration::from_secs(2), "{:?}", start.elapsed());
}

#[test]
fn durations() {
    assert_eq!(parse_duration_ms("90m"), Ok(90 * 60_000));
    assert_eq!(parse_duration_ms("2h"), Ok(7_200_000));
    assert_eq!(parse_duration_ms("1h30m"), Ok(5_400_000));
    assert_eq!(parse_duration_ms("45s"), Ok(45_000));
    assert_eq!(parse_duration_ms("1d"), Ok(86_400_000));
    assert_eq!(parse_duration_ms("1.5h"), Ok(5_400_000));
    assert_eq!(parse_duration_ms(" 250ms "), Ok(250));
    for bad in [
        "",
        " ",
        "0",
        "0s",
        "-5m",
        "5",
        "5x",
        "h",
        "1w",
        "500us",
        "1h-5m",
        ".",
        "9999999999999h",
        "99999999999999999999999999999999999999.9ns",
    ] {
        assert!(parse_duration_ms(bad).is_err(), "{bad:?} should be rejected");
    }
    let err = parse_duration_ms("5x").unwrap_err().to_string();
    assert!(err.contains("\"x\"") && err.contains("5x"), "{err}");
}

fn arbitrary_spec() -> impl Strategy<Value = String> {
    let pick = |values: &[&'static str]| prop::sample::select(values.to_vec());
    (
        pick(&["*", "?", "0", "5", "*/7", "10-40/3", "0,15,30,45", "2/5"]),
        pick(&["*", "0", "2", "23", "1-5", "*/5", "9-17/4"]),
        pick(&["*", "?", "1", "13", "29", "31", "*/2", "1-5", "2/10"]),
        pick(&["*", "2", "12", "JAN-MAR", "*/3", "feb,aug"]),
        pick(&["*", "?", "0", "6", "sun,wed", "MON-FRI", "1/2"]),
    )
        .prop_map(|(minute, hour, dom, month, dow)| format!("{minute} {hour} {dom} {month} {dow}"))
}

proptest! {
    #[test]
    fn parse_never_panics(spec in ".{0,40}", zone in prop::option::of("[A-Za-z_/]{0,20}")) {
        let _ = Schedule::parse(&spec, zone.as_deref());
        let _ = parse_duration_ms(&spec);
    }

    #[test]
    fn parse_never_panics_on_cron_like(spec in "[0-9*?/,\\- A-Za-z@]{0,30}") {
        if let Ok(schedule) = Schedule::parse(&spec, None) {
            let _ = schedule.next_after(0);
            let _ = schedule.prev_at_or_before(0);
        }
    }

    #[test]
    fn next_is_increasing_and_a_fire_time(
        spec in arbitrary_spec(),
        zone in prop::sample::select(vec!["UTC", "America/New_York", "Europe/Berlin", "Asia/Kolkata", "Australia/Lord_Howe"]),
        start in ms("2020-01-01T00:00:00Z")..ms("2030-01-01T00:00:00Z"),
    ) {
        let schedule = Schedule::parse(&spec, Some(zone)).expect("generated spec");
        let mut t = start;
        for _ in 0..5 {
            let Some(next) = schedule.next_after(t) else { break };
            prop_assert!(next > t);
            prop_assert_eq!(schedule.prev_at_or_before(next), Some(next));
            // Nothing fires strictly between t and next.
            prop_assert!(schedule.prev_at_or_before(next - 1).is_none_or(|p| p <= t));
            t = next;
        }
    }
}
