//! Durations as operators write them, and as upcheck writes them back.
//!
//! One grammar for every duration in the configuration: Caddy's JSON carries integer nanoseconds
//! (`10000000000`), people write Go's duration strings (`"10s"`, `"500ms"`, `"1m30s"`, `"1.5s"`,
//! `"250us"`), and Caddy adds days (`"1d"`). Anything that is not a duration that fits in 64-bit
//! nanoseconds is refused with a reason rather than silently clamped.
//!
//! Two ways out: [`display`] for people (log lines, errors, the status page: short, truncated to
//! a readable precision) and [`exact`] for machines (the effective configuration: the shortest
//! Go-style string that reads back to the same nanosecond).

use super::json::{or_off, read, Found, Refusal};
use serde::{Deserializer, Serializer};
use std::fmt::Write;
use std::time::Duration;

const NANOS_PER_MICRO: u128 = 1_000;
const NANOS_PER_MILLI: u128 = 1_000_000;
const NANOS_PER_SEC: u128 = 1_000_000_000;

/// Parses a duration string in Go's grammar (which Caddy also reads): one or more
/// `<number><unit>` pairs, the number possibly with a fraction (`"1.5s"`, `".5s"`), units `ns`,
/// `us` / `µs`, `ms`, `s`, `m`, `h` and Caddy's `d`; an optional leading `+`; `"0"` alone is zero.
/// A negative duration (`"-5s"`) is refused.
pub fn parse(text: &str) -> Result<Duration, String> {
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err("expected a duration like \"10s\" or \"500ms\", got an empty string".into());
    }
    let (negative, mut rest) = match trimmed.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, trimmed.strip_prefix('+').unwrap_or(trimmed)),
    };
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    if rest.is_empty() {
        return Err(format!("{text:?} is not a duration"));
    }
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, after) = rest.split_at(number_len);
        let unit_len = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, after) = after.split_at(unit_len);
        let scale: u128 = match unit {
            "ns" => 1,
            // U+00B5 (micro sign) and U+03BC (Greek mu), as Go accepts both.
            "us" | "\u{b5}s" | "\u{3bc}s" => NANOS_PER_MICRO,
            "ms" => NANOS_PER_MILLI,
            "s" => NANOS_PER_SEC,
            "m" => 60 * NANOS_PER_SEC,
            "h" => 3_600 * NANOS_PER_SEC,
            "d" => 86_400 * NANOS_PER_SEC,
            "" => {
                return Err(format!(
                    "{text:?} is missing a unit (ns, us, ms, s, m, h, d)"
                ))
            }
            other => return Err(format!("{text:?} has an unknown unit {other:?}")),
        };
        let value = scaled(number, scale).ok_or_else(|| {
            let well_formed = number.matches('.').count() <= 1 && number != ".";
            if well_formed && !number.is_empty() {
                too_large(text)
            } else {
                format!("{text:?} is not a duration")
            }
        })?;
        total = total.checked_add(value).ok_or_else(|| too_large(text))?;
        rest = after;
    }
    if negative && total > 0 {
        return Err(format!("must not be negative, got {text:?}"));
    }
    let nanos = u64::try_from(total).map_err(|_| too_large(text))?;
    Ok(Duration::from_nanos(nanos))
}

/// `number * scale`, where `number` may carry a decimal fraction (digits past a nanosecond are
/// dropped, as Go does); `None` if it is not a number or overflows.
fn scaled(number: &str, scale: u128) -> Option<u128> {
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && fraction.is_empty() {
        return None;
    }
    let digits = |s: &str| s.chars().all(|c| c.is_ascii_digit());
    if !digits(whole) || !digits(fraction) {
        return None;
    }
    let whole: u128 = if whole.is_empty() {
        0
    } else {
        whole.parse().ok()?
    };
    let mut value = whole.checked_mul(scale)?;
    let mut unit = scale;
    for digit in fraction.chars() {
        unit /= 10;
        value = value.checked_add(u128::from(digit.to_digit(10)?) * unit)?;
    }
    Some(value)
}

fn too_large(text: &str) -> String {
    format!("{text:?} is too large (at most about 584 years)")
}

/// Formats a duration for people (log lines, errors, the status page), truncated to a readable
/// precision: `1ns`, `250us`, `419ms`, `5.0s` (one decimal under a minute), `2m30s`, `1h`,
/// `1h0m5s` (whole seconds from a minute up).
pub fn display(d: Duration) -> String {
    let nanos = d.as_nanos();
    if nanos < NANOS_PER_MICRO {
        format!("{nanos}ns")
    } else if nanos < NANOS_PER_MILLI {
        format!("{}us", nanos / NANOS_PER_MICRO)
    } else if nanos < NANOS_PER_SEC {
        format!("{}ms", nanos / NANOS_PER_MILLI)
    } else if d.as_secs() < 60 {
        format!("{}.{}s", d.as_secs(), d.subsec_millis() / 100)
    } else {
        exact(Duration::from_secs(d.as_secs()))
    }
}

/// Formats a duration as the shortest Go-style string that [`parse`] reads back to exactly the
/// same nanosecond: `0s`, `1ns`, `250us`, `419.139ms`, `1.5s`, `10s`, `2m30s`, `1h`, `1h0m5s`.
pub fn exact(d: Duration) -> String {
    let nanos = d.as_nanos();
    if nanos == 0 {
        return "0s".into();
    }
    if nanos < NANOS_PER_MICRO {
        return format!("{nanos}ns");
    }
    if nanos < NANOS_PER_MILLI {
        return decimal(nanos, NANOS_PER_MICRO, "us");
    }
    if nanos < NANOS_PER_SEC {
        return decimal(nanos, NANOS_PER_MILLI, "ms");
    }
    let secs = d.as_secs();
    let (hours, minutes, seconds) = (secs / 3_600, secs / 60 % 60, secs % 60);
    let rest = u128::from(seconds) * NANOS_PER_SEC + u128::from(d.subsec_nanos());
    let mut out = String::new();
    if hours > 0 {
        let _ = write!(out, "{hours}h");
    }
    if minutes > 0 || (hours > 0 && rest > 0) {
        let _ = write!(out, "{minutes}m");
    }
    if rest > 0 {
        out.push_str(&decimal(rest, NANOS_PER_SEC, "s"));
    }
    out
}

/// `nanos` in `unit`s with as many decimals as it needs: `decimal(1_500, 1_000, "us")` is `1.5us`.
fn decimal(nanos: u128, unit: u128, suffix: &str) -> String {
    let whole = nanos / unit;
    let fraction = nanos % unit;
    if fraction == 0 {
        return format!("{whole}{suffix}");
    }
    let width = unit.ilog10() as usize;
    let digits = format!("{fraction:0width$}");
    format!("{whole}.{}{suffix}", digits.trim_end_matches('0'))
}

/// What a duration field takes, for "expected …".
pub(super) const EXPECTED: &str = "a duration: integer nanoseconds or a string like \"10s\"";

/// Reads a positive duration from what a field held: integer nanoseconds (Caddy) or a string.
pub(super) fn positive(found: Found) -> Result<Duration, Refusal> {
    let d = match &found {
        Found::Unsigned(nanos) => Duration::from_nanos(*nanos),
        Found::Negative(negative) => {
            return Err(format!("must be greater than zero, got {negative}").into())
        }
        Found::Huge => return Err("is too large (at most about 584 years of nanoseconds)".into()),
        Found::Fraction => return Err("must be whole nanoseconds or a string like \"10s\"".into()),
        Found::Text(text) => parse(text)?,
        _ => return Err(Refusal::Kind(found)),
    };
    if d.is_zero() {
        return Err(format!("must be greater than zero, got {found}").into());
    }
    Ok(d)
}

/// Serde: a positive duration (integer nanoseconds or a string, in this one grammar), for
/// every reader of durations (`#[serde(deserialize_with = "duration::deserialize")]`).
pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    read(d, EXPECTED, positive)
}

/// Serde: a duration written as [`exact`] writes it.
pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&exact(*d))
}

/// Serde for a duration that can be off, written `null` when off.
pub mod optional {
    use super::{or_off, positive, read, EXPECTED};
    use serde::{Deserializer, Serializer};
    use std::time::Duration;

    /// A positive duration, or `null` for off.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        read(d, EXPECTED, |found| or_off(found, positive))
    }

    /// Off is written `null`.
    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => super::serialize(d, s),
            None => s.serialize_none(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_with_every_unit_parse_to_nanoseconds() {
        assert_eq!(parse("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("1m"), Ok(Duration::from_secs(60)));
        assert_eq!(parse("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse("1d"), Ok(Duration::from_secs(86_400)));
        assert_eq!(parse("250us"), Ok(Duration::from_micros(250)));
        assert_eq!(parse("250µs"), Ok(Duration::from_micros(250)));
        assert_eq!(parse("250\u{3bc}s"), Ok(Duration::from_micros(250)));
        assert_eq!(parse("7ns"), Ok(Duration::from_nanos(7)));
        assert_eq!(parse("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse("1h2m3s4ms"), Ok(Duration::from_millis(3_723_004)));
        assert_eq!(parse("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse(".5s"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("5.s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse("+5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse("0"), Ok(Duration::ZERO));
        assert_eq!(
            parse("1.0000000019s"),
            Ok(Duration::from_nanos(1_000_000_001))
        );
    }

    #[test]
    fn strings_without_a_known_unit_are_refused_with_the_reason() {
        assert!(parse("10").unwrap_err().contains("missing a unit"));
        assert!(parse("10d5").unwrap_err().contains("missing a unit"));
        assert!(parse("10w").unwrap_err().contains("unknown unit"));
        assert!(parse("").unwrap_err().contains("empty"));
        assert!(parse("s").unwrap_err().contains("not a duration"));
        assert!(parse("-").unwrap_err().contains("not a duration"));
        assert!(parse("1.2.3s").unwrap_err().contains("not a duration"));
        assert!(parse("1 s").unwrap_err().contains("unknown unit"));
    }

    #[test]
    fn a_negative_duration_is_refused() {
        assert_eq!(
            parse("-5s"),
            Err("must not be negative, got \"-5s\"".to_string())
        );
        assert_eq!(parse("-0s"), Ok(Duration::ZERO));
    }

    #[test]
    fn a_duration_past_64_bit_nanoseconds_is_too_large() {
        assert!(parse("10000000h").unwrap_err().contains("too large"));
        assert!(parse("99999999999999999999999999999999999999999s")
            .unwrap_err()
            .contains("too large"));
    }

    #[test]
    fn durations_display_short_and_truncated_for_people() {
        assert_eq!(display(Duration::from_nanos(1)), "1ns");
        assert_eq!(display(Duration::from_nanos(999)), "999ns");
        assert_eq!(display(Duration::from_micros(250)), "250us");
        assert_eq!(display(Duration::from_nanos(250_999)), "250us");
        assert_eq!(display(Duration::from_micros(419_139)), "419ms");
        assert_eq!(display(Duration::from_millis(250)), "250ms");
        assert_eq!(display(Duration::from_secs(5)), "5.0s");
        assert_eq!(display(Duration::from_millis(1500)), "1.5s");
        assert_eq!(display(Duration::from_millis(9_999)), "9.9s");
        assert_eq!(display(Duration::from_secs(90)), "1m30s");
        assert_eq!(display(Duration::from_millis(150_700)), "2m30s");
        assert_eq!(display(Duration::from_secs(120)), "2m");
        assert_eq!(display(Duration::from_secs(3_600)), "1h");
        assert_eq!(display(Duration::from_secs(3_605)), "1h0m5s");
    }

    #[test]
    fn exact_durations_are_go_style_and_read_back_to_the_same_nanosecond() {
        let cases = [
            (Duration::ZERO, "0s"),
            (Duration::from_nanos(1), "1ns"),
            (Duration::from_micros(250), "250us"),
            (Duration::from_nanos(1_500), "1.5us"),
            (Duration::from_micros(419_139), "419.139ms"),
            (Duration::from_millis(1500), "1.5s"),
            (Duration::from_secs(10), "10s"),
            (Duration::from_nanos(1_000_000_001), "1.000000001s"),
            (Duration::from_secs(150), "2m30s"),
            (Duration::from_secs(3_600), "1h"),
            (Duration::from_secs(5_400), "1h30m"),
            (Duration::from_secs(3_605), "1h0m5s"),
            (Duration::from_nanos(u64::MAX), "5124095h34m33.709551615s"),
        ];
        for (d, text) in cases {
            assert_eq!(exact(d), text);
            assert_eq!(parse(text), Ok(d), "{text}");
        }
    }
}
