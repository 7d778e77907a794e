//! Exact parsing of Kubernetes resource quantities (`100m`, `1.5Gi`, `129e6`, ...).
//!
//! Follows `ParseQuantity` in `k8s.io/apimachinery/pkg/api/resource/quantity.go`:
//!
//! ```text
//! <quantity>        ::= <signedNumber><suffix>
//! <number>          ::= <digits> | <digits>.<digits> | <digits>. | .<digits>
//! <suffix>          ::= <binarySI> | <decimalExponent> | <decimalSI>
//! <binarySI>        ::= Ki | Mi | Gi | Ti | Pi | Ei
//! <decimalSI>       ::= n | u | m | "" | k | M | G | T | P | E
//! <decimalExponent> ::= "e" <signedNumber> | "E" <signedNumber>   (an int32)
//! ```
//!
//! Like Kubernetes, a non-zero value finer than a nano-unit rounds *away from zero* to
//! the next nano-unit (`0.9n` is `1n`), and a binary-SI value is capped, silently, at
//! 2^63-1 units (`9Ei`). Kubernetes' own scanner is more permissive than the grammar:
//! the number may be empty, so `.`, `+`, `-` and a bare suffix such as `m` all parse as
//! zero there, and so they do here (only the empty string is an error).
//!
//! The one deliberate difference: Kubernetes keeps decimal quantities of any size (an
//! `inf.Dec`), we hold an `i128` of nano-units, so a value beyond about ±1.7·10^20 units
//! (`1e1000`) is [`QuantityError::TooLarge`] at parse time. Nothing that large fits an
//! `i64` of millicores or bytes anyway, which is all the callers ask for.
//!
//! No floating point anywhere: the arithmetic is on decimal digit strings and `i128`.

use std::fmt;

/// Nano-units per unit: the finest precision a Kubernetes quantity keeps.
const NANOS_PER_UNIT: i128 = 1_000_000_000;
/// Nano-units per milli-unit.
const NANOS_PER_MILLI: i128 = 1_000_000;
/// Kubernetes caps binary-SI quantities at `maxAllowed` = 2^63-1 units.
const BINARY_CAP_NANOS: i128 = i64::MAX as i128 * NANOS_PER_UNIT;

/// A parsed quantity, held exactly as an integer number of nano-units.
///
/// Equality is on value: `1Ki` and `1024` are the same quantity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quantity {
    nanos: i128,
}

/// What [`Quantity::millicores`] or [`Quantity::bytes`] was converting to, for errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// CPU millicores.
    Millicores,
    /// Memory bytes.
    Bytes,
}

impl fmt::Display for Unit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Unit::Millicores => "millicores",
            Unit::Bytes => "bytes",
        })
    }
}

/// Why a quantity could not be parsed or converted; every variant names the text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    /// The text is not `<sign><number><suffix>` (empty, whitespace, stray characters).
    #[error("quantity {text:?} is malformed: expected <sign><number><suffix>, e.g. 100m or 1.5Gi")]
    Malformed {
        /// The text as given.
        text: String,
    },
    /// The number is fine but the suffix is none of Kubernetes' suffixes.
    #[error(
        "quantity {text:?} has unknown suffix {suffix:?}: expected one of n u m k M G T P E, \
         Ki Mi Gi Ti Pi Ei, or e<exponent>"
    )]
    UnknownSuffix {
        /// The text as given.
        text: String,
        /// The suffix that was not recognised.
        suffix: String,
    },
    /// The value does not fit our exact representation (about ±1.7·10^20 units).
    #[error("quantity {text:?} is too large to represent exactly")]
    TooLarge {
        /// The text as given.
        text: String,
    },
    /// A request cannot be negative.
    #[error("quantity {text:?} is negative; cannot be converted to {unit}")]
    Negative {
        /// The text as given, or the quantity's value when converted without it.
        text: String,
        /// The unit asked for.
        unit: Unit,
    },
    /// The value, rounded up to whole `unit`s, does not fit an `i64`.
    #[error("quantity {text:?} overflows an i64 of {unit}")]
    Overflow {
        /// The text as given, or the quantity's value when converted without it.
        text: String,
        /// The unit asked for.
        unit: Unit,
    },
}

impl QuantityError {
    /// Replaces a conversion error's rendered value with the caller's original text.
    fn with_text(self, original: &str) -> Self {
        match self {
            QuantityError::Negative { unit, .. } => {
                QuantityError::Negative { text: original.to_owned(), unit }
            }
            QuantityError::Overflow { unit, .. } => {
                QuantityError::Overflow { text: original.to_owned(), unit }
            }
            other => other,
        }
    }
}

/// What a suffix multiplies the number by.
#[derive(Debug, Clone, Copy)]
enum Multiplier {
    /// `10^exponent` (decimal SI or `e<exponent>`).
    Decimal(i32),
    /// `2^exponent` (binary SI).
    Binary(u32),
}

/// The pieces of `<sign><number><suffix>`, as Kubernetes' `parseQuantityString` cuts them.
struct Parts<'a> {
    negative: bool,
    whole: &'a [u8],
    fraction: &'a [u8],
    suffix: &'a str,
}

/// Cuts the text like Kubernetes' scanner; `None` when characters are left over.
fn split(text: &str) -> Option<Parts<'_>> {
    let bytes = text.as_bytes();
    let digits_from = |mut at: usize| {
        while bytes.get(at).is_some_and(u8::is_ascii_digit) {
            at += 1;
        }
        at
    };
    let (negative, mut at) = match bytes.first() {
        Some(b'-') => (true, 1),
        Some(b'+') => (false, 1),
        _ => (false, 0),
    };
    let whole_end = digits_from(at);
    let whole = &bytes[at..whole_end];
    at = whole_end;
    let mut fraction: &[u8] = &[];
    if bytes.get(at) == Some(&b'.') {
        let fraction_end = digits_from(at + 1);
        fraction = &bytes[at + 1..fraction_end];
        at = fraction_end;
    }
    // The suffix: letters from Kubernetes' set, then an optional signed integer; the
    // letters and the exponent are validated afterwards, in `multiplier`.
    let suffix_start = at;
    while bytes.get(at).is_some_and(|b| b"eEinumkKMGTP".contains(b)) {
        at += 1;
    }
    if matches!(bytes.get(at), Some(b'+' | b'-')) {
        at += 1;
    }
    at = digits_from(at);
    (at == bytes.len()).then(|| Parts {
        negative,
        whole,
        fraction,
        // Everything from suffix_start on is ASCII, so this is a char boundary.
        suffix: &text[suffix_start..],
    })
}

/// Kubernetes' suffix table (`quantitySuffixer.interpret`).
fn multiplier(suffix: &str) -> Option<Multiplier> {
    use Multiplier::{Binary, Decimal};
    Some(match suffix {
        "n" => Decimal(-9),
        "u" => Decimal(-6),
        "m" => Decimal(-3),
        "" => Decimal(0),
        "k" => Decimal(3),
        "M" => Decimal(6),
        "G" => Decimal(9),
        "T" => Decimal(12),
        "P" => Decimal(15),
        "E" => Decimal(18),
        "Ki" => Binary(10),
        "Mi" => Binary(20),
        "Gi" => Binary(30),
        "Ti" => Binary(40),
        "Pi" => Binary(50),
        "Ei" => Binary(60),
        // Go's strconv.ParseInt(s, 10, 32): optional sign, digits, int32 range — the
        // same as Rust's i32 parser.
        _ if suffix.len() > 1 && suffix.starts_with(['e', 'E']) => Decimal(suffix[1..].parse::<i32>().ok()?),
        _ => return None,
    })
}

/// Multiplies a decimal digit string by `factor`, giving a decimal digit string.
fn multiply_digits(digits: &[u8], factor: u64) -> Vec<u8> {
    // Schoolbook from the right: the carry stays below 10 * factor, well inside u128.
    let mut product = Vec::with_capacity(digits.len() + 20);
    let mut carry: u128 = 0;
    for digit in digits.iter().rev() {
        carry += u128::from(digit - b'0') * u128::from(factor);
        product.push(b'0' + (carry % 10) as u8);
        carry /= 10;
    }
    while carry > 0 {
        product.push(b'0' + (carry % 10) as u8);
        carry /= 10;
    }
    product.reverse();
    product
}

/// Reads a digit string as an `i128`; `None` when it does not fit.
fn digits_to_i128(digits: &[u8]) -> Option<i128> {
    digits.iter().try_fold(0i128, |acc, digit| acc.checked_mul(10)?.checked_add(i128::from(digit - b'0')))
}

/// `ceil(digits * 10^shift)` for a non-negative digit string; `None` when it does not fit.
fn shift_ceil(digits: &[u8], shift: i128) -> Option<i128> {
    // Leading zeros carry no value and would only inflate the length checks below.
    let first = digits.iter().position(|&d| d != b'0');
    let Some(first) = first else { return Some(0) };
    let digits = &digits[first..];
    if shift >= 0 {
        // i128 holds at most 39 digits: refuse early rather than build `1e1000`.
        if digits.len() as i128 + shift > 39 {
            return None;
        }
        let shift = u32::try_from(shift).ok()?;
        digits_to_i128(digits)?.checked_mul(10i128.checked_pow(shift)?)
    } else {
        let dropped = usize::try_from(-shift).unwrap_or(usize::MAX);
        if dropped >= digits.len() {
            // 0 < value < 1 (digits is non-zero): rounds up to one.
            return Some(1);
        }
        let (kept, rest) = digits.split_at(digits.len() - dropped);
        let kept = digits_to_i128(kept)?;
        if rest.iter().any(|&d| d != b'0') { kept.checked_add(1) } else { Some(kept) }
    }
}

impl Quantity {
    /// Parses a quantity exactly as Kubernetes' `ParseQuantity` does (see the module
    /// docs for the grammar and the one difference: values beyond ~1.7·10^20 units).
    pub fn parse(text: &str) -> Result<Quantity, QuantityError> {
        let malformed = || QuantityError::Malformed { text: text.to_owned() };
        // Kubernetes rejects the empty string explicitly; its scanner would read zero.
        if text.is_empty() {
            return Err(malformed());
        }
        let parts = split(text).ok_or_else(malformed)?;
        let multiplier = multiplier(parts.suffix).ok_or_else(|| QuantityError::UnknownSuffix {
            text: text.to_owned(),
            suffix: parts.suffix.to_owned(),
        })?;
        let mut digits = Vec::with_capacity(parts.whole.len() + parts.fraction.len());
        digits.extend_from_slice(parts.whole);
        digits.extend_from_slice(parts.fraction);
        // value = digits * 10^-len(fraction) * multiplier; in nanos, times 10^9 more.
        let shift = 9 - parts.fraction.len() as i128;
        let magnitude = match multiplier {
            Multiplier::Decimal(exponent) => shift_ceil(&digits, shift + i128::from(exponent))
                .ok_or_else(|| QuantityError::TooLarge { text: text.to_owned() })?,
            Multiplier::Binary(exponent) => {
                let scaled = multiply_digits(&digits, 1u64 << exponent);
                // Past i128 is certainly past the cap, which Kubernetes applies silently.
                shift_ceil(&scaled, shift).map_or(BINARY_CAP_NANOS, |nanos| nanos.min(BINARY_CAP_NANOS))
            }
        };
        Ok(Quantity { nanos: if parts.negative { -magnitude } else { magnitude } })
    }

    /// The exact value in nano-units (10^-9 of the unit: cores, bytes, ...).
    pub fn nanos(&self) -> i128 {
        self.nanos
    }

    /// CPU millicores, rounded up like Kubernetes' `MilliValue()` (`0.1n` is 1m).
    ///
    /// Errors if the quantity is negative (a request cannot be) or the result overflows
    /// an `i64`; Kubernetes would silently wrap instead.
    pub fn millicores(&self) -> Result<i64, QuantityError> {
        self.ceil_to(NANOS_PER_MILLI, Unit::Millicores)
    }

    /// Bytes, rounded up to a whole byte like Kubernetes' `Value()` (`100m` is 1 byte).
    ///
    /// Errors if the quantity is negative or the result overflows an `i64`.
    pub fn bytes(&self) -> Result<i64, QuantityError> {
        self.ceil_to(NANOS_PER_UNIT, Unit::Bytes)
    }

    /// `ceil(nanos / per)` as an `i64`, for non-negative quantities only.
    fn ceil_to(&self, per: i128, unit: Unit) -> Result<i64, QuantityError> {
        if self.nanos < 0 {
            return Err(QuantityError::Negative { text: self.to_string(), unit });
        }
        // Ceil, not floor: Kubernetes rounds up so that a tiny request still gets something.
        let ceil = self.nanos / per + i128::from(self.nanos % per != 0);
        i64::try_from(ceil).map_err(|_| QuantityError::Overflow { text: self.to_string(), unit })
    }
}

impl fmt::Display for Quantity {
    /// The exact value in units, as a plain decimal (`1.5`, `-0.000000001`, `1073741824`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sign = if self.nanos < 0 { "-" } else { "" };
        let magnitude = self.nanos.unsigned_abs();
        let per = NANOS_PER_UNIT.unsigned_abs();
        let (whole, fraction) = (magnitude / per, magnitude % per);
        if fraction == 0 {
            write!(f, "{sign}{whole}")
        } else {
            let fraction = format!("{fraction:09}");
            write!(f, "{sign}{whole}.{}", fraction.trim_end_matches('0'))
        }
    }
}

/// Parses a CPU quantity (`resources.requests.cpu`) into millicores, rounded up.
pub fn cpu_millicores(text: &str) -> Result<i64, QuantityError> {
    Quantity::parse(text)?.millicores().map_err(|e| e.with_text(text))
}

/// Parses a memory quantity (`resources.requests.memory`) into bytes, rounded up.
pub fn memory_bytes(text: &str) -> Result<i64, QuantityError> {
    Quantity::parse(text)?.bytes().map_err(|e| e.with_text(text))
}

#[cfg(test)]
mod tests;
