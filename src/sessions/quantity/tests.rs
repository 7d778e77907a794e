use super::*;
use proptest::prelude::*;

/// `x` units in nanos.
const fn u(x: i128) -> i128 {
    x * NANOS_PER_UNIT
}

/// Parse or fail the test with the text and the error.
fn nanos(text: &str) -> i128 {
    match Quantity::parse(text) {
        Ok(q) => q.nanos(),
        Err(e) => panic!("{text:?} should parse: {e}"),
    }
}

/// `Err` reduced to `None`, so rows can say "does not fit" without naming the variant.
fn ok(result: Result<i64, QuantityError>) -> Option<i64> {
    result.ok()
}

/// One row: input, exact value in nanos, `cpu_millicores`, `memory_bytes` (`None`: error).
type Row = (&'static str, i128, Option<i64>, Option<i64>);

/// The valid inputs of `TestQuantityParse` in kubernetes/apimachinery
/// `pkg/api/resource/quantity_test.go`, in its order, its expected quantity (the
/// `decQuantity(mantissa, exponent, ...)`) written in nanos, plus what `MilliValue()` and
/// `Value()` give for it (ceil), with `None` where that overflows an i64 — Kubernetes would
/// wrap silently, we refuse.
fn kubernetes_parse_table() -> Vec<Row> {
    const MAX: i64 = i64::MAX;
    vec![
        ("0", 0, Some(0), Some(0)),
        ("0n", 0, Some(0), Some(0)),
        ("0u", 0, Some(0), Some(0)),
        ("0m", 0, Some(0), Some(0)),
        ("0Ki", 0, Some(0), Some(0)),
        ("0k", 0, Some(0), Some(0)),
        ("0Mi", 0, Some(0), Some(0)),
        ("0M", 0, Some(0), Some(0)),
        ("0Gi", 0, Some(0), Some(0)),
        ("0G", 0, Some(0), Some(0)),
        ("0Ti", 0, Some(0), Some(0)),
        ("0T", 0, Some(0), Some(0)),
        // Quantity less numbers are allowed
        ("1", u(1), Some(1000), Some(1)),
        // Binary suffixes
        ("1Ki", u(1024), Some(1_024_000), Some(1024)),
        ("8Ki", u(8192), Some(8_192_000), Some(8192)),
        ("7Mi", u(7 << 20), Some(7_340_032_000), Some(7_340_032)),
        ("6Gi", u(6 << 30), Some(6_442_450_944_000), Some(6_442_450_944)),
        ("5Ti", u(5 << 40), Some(5_497_558_138_880_000), Some(5_497_558_138_880)),
        ("4Pi", u(4 << 50), Some(4_503_599_627_370_496_000), Some(4_503_599_627_370_496)),
        ("3Ei", u(3 << 60), None, Some(3_458_764_513_820_540_928)),
        ("10Ti", u(10 << 40), Some(10_995_116_277_760_000), Some(10_995_116_277_760)),
        ("100Ti", u(100 << 40), Some(109_951_162_777_600_000), Some(109_951_162_777_600)),
        // Decimal suffixes
        ("5n", 5, Some(1), Some(1)),
        ("4u", 4_000, Some(1), Some(1)),
        ("3m", 3_000_000, Some(3), Some(1)),
        ("9", u(9), Some(9000), Some(9)),
        ("8k", u(8_000), Some(8_000_000), Some(8000)),
        ("50k", u(50_000), Some(50_000_000), Some(50_000)),
        ("7M", u(7_000_000), Some(7_000_000_000), Some(7_000_000)),
        ("6G", u(6_000_000_000), Some(6_000_000_000_000), Some(6_000_000_000)),
        ("5T", u(5 * 10i128.pow(12)), Some(5 * 10i64.pow(15)), Some(5 * 10i64.pow(12))),
        ("40T", u(4 * 10i128.pow(13)), Some(4 * 10i64.pow(16)), Some(4 * 10i64.pow(13))),
        ("300T", u(3 * 10i128.pow(14)), Some(3 * 10i64.pow(17)), Some(3 * 10i64.pow(14))),
        ("2P", u(2 * 10i128.pow(15)), Some(2 * 10i64.pow(18)), Some(2 * 10i64.pow(15))),
        ("1E", u(10i128.pow(18)), None, Some(10i64.pow(18))),
        // Decimal exponents
        ("1E-3", 1_000_000, Some(1), Some(1)),
        ("1e3", u(1000), Some(1_000_000), Some(1000)),
        ("1E6", u(10i128.pow(6)), Some(10i64.pow(9)), Some(10i64.pow(6))),
        ("1e9", u(10i128.pow(9)), Some(10i64.pow(12)), Some(10i64.pow(9))),
        ("1E12", u(10i128.pow(12)), Some(10i64.pow(15)), Some(10i64.pow(12))),
        ("1e15", u(10i128.pow(15)), Some(10i64.pow(18)), Some(10i64.pow(15))),
        ("1E18", u(10i128.pow(18)), None, Some(10i64.pow(18))),
        // Nonstandard but still parsable
        ("1e14", u(10i128.pow(14)), Some(10i64.pow(17)), Some(10i64.pow(14))),
        ("1e13", u(10i128.pow(13)), Some(10i64.pow(16)), Some(10i64.pow(13))),
        ("1e3", u(1000), Some(1_000_000), Some(1000)),
        ("100.035k", u(100_035), Some(100_035_000), Some(100_035)),
        // Things that look like floating point
        ("0.001", 1_000_000, Some(1), Some(1)),
        ("0.0005k", 500_000_000, Some(500), Some(1)),
        ("0.005", 5_000_000, Some(5), Some(1)),
        ("0.05", 50_000_000, Some(50), Some(1)),
        ("0.5", 500_000_000, Some(500), Some(1)),
        ("0.00050k", 500_000_000, Some(500), Some(1)),
        ("0.00500", 5_000_000, Some(5), Some(1)),
        ("0.05000", 50_000_000, Some(50), Some(1)),
        ("0.50000", 500_000_000, Some(500), Some(1)),
        ("0.5e0", 500_000_000, Some(500), Some(1)),
        ("0.5e-1", 50_000_000, Some(50), Some(1)),
        ("0.5e-2", 5_000_000, Some(5), Some(1)),
        ("0.5e0", 500_000_000, Some(500), Some(1)),
        ("10.035M", u(10_035_000), Some(10_035_000_000), Some(10_035_000)),
        ("1.2e3", u(1200), Some(1_200_000), Some(1200)),
        ("1.3E+6", u(1_300_000), Some(1_300_000_000), Some(1_300_000)),
        ("1.40e9", u(1_400_000_000), Some(1_400_000_000_000), Some(1_400_000_000)),
        ("1.53E12", u(153 * 10i128.pow(10)), Some(153 * 10i64.pow(13)), Some(153 * 10i64.pow(10))),
        ("1.6e15", u(16 * 10i128.pow(14)), Some(16 * 10i64.pow(17)), Some(16 * 10i64.pow(14))),
        ("1.7E18", u(17 * 10i128.pow(17)), None, Some(17 * 10i64.pow(17))),
        ("9.01", 9_010_000_000, Some(9010), Some(10)),
        ("8.1k", u(8100), Some(8_100_000), Some(8100)),
        ("7.123456M", u(7_123_456), Some(7_123_456_000), Some(7_123_456)),
        ("6.987654321G", u(6_987_654_321), Some(6_987_654_321_000), Some(6_987_654_321)),
        ("5.444T", u(5444 * 10i128.pow(9)), Some(5444 * 10i64.pow(12)), Some(5444 * 10i64.pow(9))),
        ("40.1T", u(401 * 10i128.pow(11)), Some(401 * 10i64.pow(14)), Some(401 * 10i64.pow(11))),
        ("300.2T", u(3002 * 10i128.pow(11)), Some(3002 * 10i64.pow(14)), Some(3002 * 10i64.pow(11))),
        ("2.5P", u(25 * 10i128.pow(14)), Some(25 * 10i64.pow(17)), Some(25 * 10i64.pow(14))),
        ("1.01E", u(101 * 10i128.pow(16)), None, Some(101 * 10i64.pow(16))),
        // Things that saturate/round
        ("3.001n", 4, Some(1), Some(1)),
        ("1.1E-9", 2, Some(1), Some(1)),
        ("0.0000000001", 1, Some(1), Some(1)),
        ("0.0000000005", 1, Some(1), Some(1)),
        ("0.00000000050", 1, Some(1), Some(1)),
        ("0.5e-9", 1, Some(1), Some(1)),
        ("0.9n", 1, Some(1), Some(1)),
        ("0.00000012345", 124, Some(1), Some(1)),
        ("0.00000012354", 124, Some(1), Some(1)),
        ("9Ei", u(MAX as i128), None, Some(MAX)),
        ("9223372036854775807Ki", u(MAX as i128), None, Some(MAX)),
        ("12E", u(12 * 10i128.pow(18)), None, None),
        // We'll accept fractional binary stuff, too.
        ("100.035Ki", 102_435_840_000_000, Some(102_435_840), Some(102_436)),
        ("0.5Mi", u(524_288), Some(524_288_000), Some(524_288)),
        ("0.05Gi", 53_687_091_200_000_000, Some(53_687_091_200), Some(53_687_092)),
        ("0.025Ti", 27_487_790_694_400_000_000, Some(27_487_790_694_400), Some(27_487_790_695)),
        // Things written by trolls
        ("0.000000000001Ki", 2, Some(1), Some(1)),
        (".001", 1_000_000, Some(1), Some(1)),
        (".0001k", 100_000_000, Some(100), Some(1)),
        ("1.", u(1), Some(1000), Some(1)),
        ("1.G", u(10i128.pow(9)), Some(10i64.pow(12)), Some(10i64.pow(9))),
    ]
}

/// The `invalid` list of `TestQuantityParse` (same file), plus its empty-string check.
const KUBERNETES_INVALID: &[&str] = &[
    "1.1.M", "1+1.0M", "0.1mi", "0.1am", "aoeu", ".5i", "1i", "-3.01i", "-3.01e-",
    // trailing whitespace is forbidden
    " 1", "1 ", "",
];

#[test]
fn kubernetes_parse_table_values_millicores_and_bytes() {
    let table = kubernetes_parse_table();
    assert_eq!(table.len(), 96, "every row of TestQuantityParse is transcribed");
    for (text, want_nanos, want_millis, want_bytes) in table {
        assert_eq!(nanos(text), want_nanos, "{text:?} nanos");
        assert_eq!(ok(cpu_millicores(text)), want_millis, "{text:?} millicores");
        assert_eq!(ok(memory_bytes(text)), want_bytes, "{text:?} bytes");
    }
}

#[test]
fn kubernetes_parse_table_signed() {
    // Kubernetes re-runs its table with "-" and "+" prepended.
    for (text, want_nanos, want_millis, want_bytes) in kubernetes_parse_table() {
        let plus = format!("+{text}");
        assert_eq!(nanos(&plus), want_nanos, "{plus:?}");
        assert_eq!(ok(cpu_millicores(&plus)), want_millis, "{plus:?}");
        assert_eq!(ok(memory_bytes(&plus)), want_bytes, "{plus:?}");
        let minus = format!("-{text}");
        assert_eq!(nanos(&minus), -want_nanos, "{minus:?}");
        // A negative zero is zero; anything else negative is not a request.
        let zero = (want_nanos == 0).then_some(0);
        assert_eq!(ok(cpu_millicores(&minus)), zero, "{minus:?}");
        assert_eq!(ok(memory_bytes(&minus)), zero, "{minus:?}");
    }
}

#[test]
fn kubernetes_invalid_inputs_are_errors() {
    for text in KUBERNETES_INVALID {
        assert!(Quantity::parse(text).is_err(), "{text:?} must not parse");
        assert!(cpu_millicores(text).is_err(), "{text:?}");
        assert!(memory_bytes(text).is_err(), "{text:?}");
    }
}

#[test]
fn brief_examples() {
    let cpu = [
        ("100m", 100),
        ("0.5", 500),
        ("1", 1000),
        ("2.5", 2500),
        ("0.1", 100),
        ("1n", 1),
        ("1e3", 1_000_000),
        ("0", 0),
        ("0m", 0),
    ];
    for (text, want) in cpu {
        assert_eq!(cpu_millicores(text), Ok(want), "{text:?}");
    }
    let memory = [
        ("1Gi", 1_073_741_824),
        ("500M", 500_000_000),
        ("1e3", 1000),
        ("128974848", 128_974_848),
        ("129e6", 129_000_000),
        ("123Mi", 128_974_848),
        ("1.5Gi", 1_610_612_736),
        ("0.5Gi", 536_870_912),
        ("100m", 1),
        ("0", 0),
    ];
    for (text, want) in memory {
        assert_eq!(memory_bytes(text), Ok(want), "{text:?}");
    }
}

#[test]
fn zero_in_every_spelling_is_zero() {
    for text in ["0", "0m", "0Gi", "0.0", "-0", "+0", "0e5", "0e-2147483648", "000.000Ei"] {
        assert_eq!(nanos(text), 0, "{text:?}");
        assert_eq!(cpu_millicores(text), Ok(0), "{text:?}");
        assert_eq!(memory_bytes(text), Ok(0), "{text:?}");
    }
}

#[test]
fn numberless_forms_are_zero_as_in_kubernetes() {
    // apimachinery's scanner lets the number be empty (its TestParseQuantityString has
    // "." and "-."); the suffix still has to be valid.
    for text in [".", "-.", "+.", "+", "-", "m", "Ki", "-Mi", "e3"] {
        assert_eq!(nanos(text), 0, "{text:?}");
    }
    assert!(Quantity::parse("i").is_err());
}

#[test]
fn rounds_up_never_down() {
    assert_eq!(cpu_millicores("1n"), Ok(1));
    assert_eq!(cpu_millicores("1000001n"), Ok(2));
    assert_eq!(cpu_millicores("1000000n"), Ok(1));
    assert_eq!(cpu_millicores("0.0011"), Ok(2));
    assert_eq!(memory_bytes("100m"), Ok(1));
    assert_eq!(memory_bytes("1001m"), Ok(2));
    assert_eq!(memory_bytes("1.000000001"), Ok(2));
    assert_eq!(memory_bytes("0.1Ki"), Ok(103)); // 102.4 bytes
    // Finer than a nano rounds away from zero at parse time, like Kubernetes.
    assert_eq!(nanos("0.1n"), 1);
    assert_eq!(nanos("-0.1n"), -1);
    assert_eq!(nanos("1e-30"), 1);
    assert_eq!(nanos("0.0000000000000000000000000000000000000000000001"), 1);
}

#[test]
fn exact_without_floating_point() {
    assert_eq!(nanos("0.1"), 100_000_000);
    assert_eq!(nanos("0.3"), 300_000_000);
    assert_eq!(cpu_millicores("0.3"), Ok(300));
    assert_eq!(memory_bytes("1.1Gi"), Ok(1_181_116_007)); // 1181116006.4
    assert_eq!(nanos("1.1Gi"), 1_181_116_006_400_000_000);
    assert_eq!(nanos("123456789.123456789"), 123_456_789_123_456_789);
    // Many fractional digits: exact and rounded once, at the end.
    assert_eq!(nanos("1.0000000000000000000000000000000000000000001"), u(1) + 1);
    assert_eq!(nanos("1.0000000000000000000000000000000000000000000"), u(1));
    assert_eq!(
        nanos("0.12345678901234567890123456789012345678901234567890Ei"),
        142_335_986_942_043_633_765_524_428 // ceil(2^60 * 10^9 * 0.1234...), by Python Fraction
    );
}

#[test]
fn sign_handling() {
    assert_eq!(cpu_millicores("+100m"), Ok(100));
    assert_eq!(memory_bytes("+1Gi"), Ok(1 << 30));
    assert_eq!(nanos("-1"), -u(1));
    let negative = QuantityError::Negative { text: "-1".into(), unit: Unit::Millicores };
    assert_eq!(cpu_millicores("-1"), Err(negative));
    assert!(matches!(memory_bytes("-1n"), Err(QuantityError::Negative { unit: Unit::Bytes, .. })));
    // Without the text, the error names the value.
    let q = Quantity::parse("-1.5").expect("parses");
    assert_eq!(q.millicores(), Err(QuantityError::Negative { text: "-1.5".into(), unit: Unit::Millicores }));
    assert!(Quantity::parse("--1").is_err());
    assert!(Quantity::parse("+-1").is_err());
}

#[test]
fn huge_exponents_and_overflow_are_errors() {
    for text in ["1e1000", "1E2147483647", "99999999999999999999999999999999999999999"] {
        assert_eq!(Quantity::parse(text), Err(QuantityError::TooLarge { text: text.into() }), "{text:?}");
    }
    // The exponent must be an int32, as in Go's ParseInt(_, 10, 32).
    assert!(matches!(Quantity::parse("1e2147483648"), Err(QuantityError::UnknownSuffix { .. })));
    // Tiny exponents are fine: the value rounds up to a nano.
    assert_eq!(nanos("1e-2147483648"), 1);
    // Fits the representation but not an i64 of the unit.
    assert_eq!(
        memory_bytes("9223372036854775808"),
        Err(QuantityError::Overflow { text: "9223372036854775808".into(), unit: Unit::Bytes })
    );
    assert_eq!(memory_bytes("9223372036854775807"), Ok(i64::MAX));
    assert_eq!(cpu_millicores("9223372036854775807m"), Ok(i64::MAX));
    assert!(cpu_millicores("9223372036854775808m").is_err());
    assert!(cpu_millicores("9223372036854776").is_err());
    // Binary SI caps silently at 2^63-1 units however large, as Kubernetes does.
    let huge_binary = format!("{}Ei", "9".repeat(100));
    assert_eq!(memory_bytes(&huge_binary), Ok(i64::MAX));
    assert_eq!(nanos(&format!("-{huge_binary}")), -u(i64::MAX as i128));
}

#[test]
fn unknown_suffixes_malformed_and_whitespace_are_errors() {
    for (text, suffix) in [
        ("1KB", None),
        ("1kb", None),
        ("1K", Some("K")),
        ("1gi", None),
        ("1Gib", None),
        ("1kM", Some("kM")),
        ("1MiGi", Some("MiGi")),
        ("1Mi Gi", None),
        ("1e", Some("e")),
        ("1e+", Some("e+")),
        ("1ee3", Some("ee3")),
        ("1Ki3", Some("Ki3")),
        ("1me3", Some("me3")),
        ("1e3.5", None),
        ("1e3m", None),
        ("1,5", None),
        ("1_000", None),
        ("\t1", None),
        ("1\n", None),
        ("١", None), // a non-ASCII digit
        ("1µ", None),
        ("0x10", None),
        ("NaN", None),
        ("inf", None),
        ("in", Some("in")),
    ] {
        let error = Quantity::parse(text).expect_err(text);
        match suffix {
            Some(suffix) => assert_eq!(
                error,
                QuantityError::UnknownSuffix { text: text.into(), suffix: suffix.into() },
                "{text:?}"
            ),
            None => assert_eq!(error, QuantityError::Malformed { text: text.into() }, "{text:?}"),
        }
    }
}

#[test]
fn errors_name_the_text() {
    let message = memory_bytes("1KB").expect_err("invalid").to_string();
    assert!(message.contains("\"1KB\""), "{message}");
    let message = cpu_millicores("1K").expect_err("invalid").to_string();
    assert!(message.contains("\"1K\"") && message.contains("\"K\""), "{message}");
}

#[test]
fn display_is_the_exact_unit_value() {
    for (text, shown) in
        [("1.5Gi", "1610612736"), ("100m", "0.1"), ("-1n", "-0.000000001"), ("0", "0"), ("1.25", "1.25")]
    {
        assert_eq!(Quantity::parse(text).map(|q| q.to_string()), Ok(shown.into()));
    }
}

/// Characters Kubernetes' scanner cares about, so generated strings reach deep paths.
const ALPHABET: &[char] = &[
    '0', '1', '5', '9', '.', '+', '-', 'e', 'E', 'i', 'n', 'u', 'm', 'k', 'K', 'M', 'G', 'T', 'P', ' ', 'x',
];

proptest! {
    #[test]
    fn parse_never_panics_on_arbitrary_text(text in any::<String>()) {
        if let Ok(q) = Quantity::parse(&text) {
            let _ = (q.millicores(), q.bytes(), q.to_string());
        }
    }

    #[test]
    fn parse_never_panics_on_quantity_like_text(
        chars in proptest::collection::vec(proptest::sample::select(ALPHABET), 0..40)
    ) {
        let text: String = chars.into_iter().collect();
        if let Ok(q) = Quantity::parse(&text) {
            let _ = (q.millicores(), q.bytes(), q.to_string());
        }
    }

    #[test]
    fn plain_integers_are_bytes_and_m_integers_are_millicores(n in 0i64..1_000_000_000_000) {
        prop_assert_eq!(memory_bytes(&n.to_string()), Ok(n));
        prop_assert_eq!(cpu_millicores(&format!("{n}m")), Ok(n));
    }

    #[test]
    fn decimal_forms_agree(n in 0i64..1_000_000_000_000) {
        // The same value written three ways is the same quantity.
        let plain = Quantity::parse(&n.to_string());
        prop_assert_eq!(Quantity::parse(&format!("{n}000m")), plain.clone());
        prop_assert_eq!(Quantity::parse(&format!("{n}e0")), plain.clone());
        prop_assert_eq!(Quantity::parse(&format!("{}.{:03}k", n / 1000, n % 1000)), plain);
    }

    #[test]
    fn binary_suffixes_multiply_by_powers_of_1024(n in 0i64..8192) {
        prop_assert_eq!(memory_bytes(&format!("{n}Ki")), Ok(n << 10));
        prop_assert_eq!(memory_bytes(&format!("{n}Mi")), Ok(n << 20));
        prop_assert_eq!(memory_bytes(&format!("{n}Gi")), Ok(n << 30));
        prop_assert_eq!(memory_bytes(&format!("{n}Ti")), Ok(n << 40));
    }
}
