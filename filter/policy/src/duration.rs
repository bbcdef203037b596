//! Durations as operators write them.
//!
//! Caddy's JSON carries durations as integer nanoseconds (`10000000000`); people write strings
//! (`"10s"`, `"500ms"`, `"1m30s"`). Both are accepted, and anything that is not a positive duration
//! that fits in 64-bit nanoseconds is refused with a reason rather than silently clamped.

use crate::json::{Json, Number};
use std::time::Duration;

/// Parses a Go-style duration string: one or more `<number><unit>` pairs, units `ns`, `us`/`µs`,
/// `ms`, `s`, `m`, `h`; the number may have a fraction (`"1.5s"`).
pub fn parse(text: &str) -> Result<Duration, String> {
    let mut rest = text.trim();
    if rest.is_empty() {
        return Err("expected a duration like \"10s\" or \"500ms\", got an empty string".into());
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
            "us" | "µs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            "" => return Err(format!("{text:?} is missing a unit (ns, us, ms, s, m, h)")),
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
    let nanos = u64::try_from(total).map_err(|_| too_large(text))?;
    Ok(Duration::from_nanos(nanos))
}

/// `number * scale`, where `number` may carry a decimal fraction; `None` if it is not a number.
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

/// Formats a duration the way log lines and errors show it: `5.0s`, `250ms`, `2m0s`.
pub fn display(d: Duration) -> String {
    let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    if ms < 1_000 && d.subsec_nanos() % 1_000_000 == 0 {
        format!("{ms}ms")
    } else if ms < 1_000 {
        format!("{}us", d.subsec_micros())
    } else if ms < 60_000 {
        format!("{}.{}s", ms / 1_000, (ms % 1_000) / 100)
    } else {
        format!("{}m{}s", ms / 60_000, (ms % 60_000) / 1_000)
    }
}

/// Reads a positive duration from JSON: integer nanoseconds (Caddy) or a string.
pub fn from_json(v: &Json) -> Result<Duration, String> {
    let d = match v {
        Json::Number(Number::Unsigned(nanos)) => Duration::from_nanos(*nanos),
        Json::Number(Number::Negative(negative)) => {
            return Err(format!("must be greater than zero, got {negative}"))
        }
        Json::Number(Number::Huge) => {
            return Err("is too large (at most about 584 years of nanoseconds)".into())
        }
        Json::Number(Number::Fraction) => {
            return Err("must be whole nanoseconds or a string like \"10s\"".into())
        }
        Json::String(text) => parse(text)?,
        _ => {
            return Err("expected a duration: integer nanoseconds or a string like \"10s\"".into())
        }
    };
    if d.is_zero() {
        return Err(format!(
            "must be greater than zero, got {}",
            crate::config::kind(v)
        ));
    }
    Ok(d)
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
        assert_eq!(parse("250us"), Ok(Duration::from_micros(250)));
        assert_eq!(parse("7ns"), Ok(Duration::from_nanos(7)));
        assert_eq!(parse("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse(".5s"), Ok(Duration::from_millis(500)));
    }

    #[test]
    fn strings_without_a_known_unit_are_refused_with_the_reason() {
        assert!(parse("10").unwrap_err().contains("missing a unit"));
        assert!(parse("10d").unwrap_err().contains("unknown unit"));
        assert!(parse("").unwrap_err().contains("empty"));
        assert!(parse("s").unwrap_err().contains("not a duration"));
        assert!(parse("1.2.3s").unwrap_err().contains("not a duration"));
    }

    #[test]
    fn a_duration_past_64_bit_nanoseconds_is_too_large() {
        assert!(parse("10000000h").unwrap_err().contains("too large"));
        assert!(parse("99999999999999999999999999999999999999999s")
            .unwrap_err()
            .contains("too large"));
    }

    #[test]
    fn durations_display_with_one_decimal_of_seconds() {
        assert_eq!(display(Duration::from_secs(5)), "5.0s");
        assert_eq!(display(Duration::from_millis(250)), "250ms");
        assert_eq!(display(Duration::from_millis(1500)), "1.5s");
        assert_eq!(display(Duration::from_secs(90)), "1m30s");
    }
}
