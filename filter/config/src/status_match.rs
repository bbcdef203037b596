//! HTTP status matchers: an exact code (`200`) or a class (`"2xx"`).
//!
//! Caddy writes a class as a single digit (`2` means 2xx) in JSON and as `2xx` in a Caddyfile; both
//! are accepted so an operator's existing config keeps its meaning.

use super::json::{read, Found, Refusal};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

/// Which statuses a rule matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusMatch {
    /// Exactly this code, 100–599.
    Code(u16),
    /// Every code of this class: `2` matches 200–299.
    Class(u8),
}

impl StatusMatch {
    /// Whether `status` is matched.
    #[inline]
    pub fn matches(self, status: u16) -> bool {
        match self {
            StatusMatch::Code(code) => code == status,
            StatusMatch::Class(class) => status / 100 == u16::from(class),
        }
    }

    fn from_number(n: u64) -> Option<StatusMatch> {
        match n {
            1..=5 => u8::try_from(n).ok().map(StatusMatch::Class),
            100..=599 => u16::try_from(n).ok().map(StatusMatch::Code),
            _ => None,
        }
    }

    fn from_text(text: &str) -> Option<StatusMatch> {
        let lower = text.trim().to_ascii_lowercase();
        if let Some(class) = lower.strip_suffix("xx") {
            return match class.parse::<u64>() {
                Ok(n @ 1..=5) => StatusMatch::from_number(n),
                _ => None,
            };
        }
        lower
            .parse::<u64>()
            .ok()
            .filter(|n| *n >= 100)
            .and_then(StatusMatch::from_number)
    }
}

/// The statuses a list of matchers matches, as a set of codes (100–599): whether an answer is
/// in it is one bit's test, since every request's answer is checked against it. The list stays
/// as written, for what is read back and written out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusSet {
    matchers: Vec<StatusMatch>,
    /// Bit `code - 100` for each code matched.
    codes: [u64; 8],
}

impl StatusSet {
    /// The set `matchers` match.
    pub fn new(matchers: Vec<StatusMatch>) -> StatusSet {
        let mut codes = [0u64; 8];
        for code in 100..=599u16 {
            if matchers.iter().any(|m| m.matches(code)) {
                let at = usize::from(code - 100);
                if let Some(word) = codes.get_mut(at / 64) {
                    *word |= 1 << (at % 64);
                }
            }
        }
        StatusSet { matchers, codes }
    }

    /// Whether `status` is matched.
    #[inline]
    pub fn contains(&self, status: u16) -> bool {
        let Some(at) = status.checked_sub(100).map(usize::from) else {
            return false;
        };
        self.codes
            .get(at / 64)
            .is_some_and(|word| (word >> (at % 64)) & 1 == 1)
    }

    /// The matchers, as written.
    pub fn matchers(&self) -> &[StatusMatch] {
        &self.matchers
    }
}

impl Serialize for StatusSet {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.matchers.serialize(serializer)
    }
}

impl fmt::Display for StatusMatch {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            StatusMatch::Code(code) => write!(f, "{code}"),
            StatusMatch::Class(class) => write!(f, "{class}xx"),
        }
    }
}

/// What a status field expects, in its refusals.
const EXPECTED: &str = "a status code 100-599 or a class like \"2xx\"";

/// A status matcher as found, or the kind refused.
fn parse(found: Found) -> Result<StatusMatch, Refusal> {
    let parsed = match &found {
        Found::Unsigned(n) => StatusMatch::from_number(*n),
        Found::Text(s) => StatusMatch::from_text(s),
        _ => None,
    };
    parsed.ok_or(Refusal::Kind(found))
}

impl<'de> Deserialize<'de> for StatusMatch {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        read(d, EXPECTED, parse)
    }
}

/// Serde: a status matcher, or `null` for none (`health_checks.active.drain_status`).
pub(super) fn or_off<'de, D: Deserializer<'de>>(d: D) -> Result<Option<StatusMatch>, D::Error> {
    read(d, EXPECTED, |found| super::json::or_off(found, parse))
}

/// A code is written as a number (`502`), a class as a string (`"5xx"`).
impl Serialize for StatusMatch {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            StatusMatch::Code(code) => s.serialize_u16(*code),
            StatusMatch::Class(_) => s.collect_str(self),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> Result<StatusMatch, String> {
        serde_json::from_str(json).map_err(|e| e.to_string())
    }

    #[test]
    fn codes_and_classes_are_read_in_caddy_and_caddyfile_forms() {
        assert_eq!(parse("200"), Ok(StatusMatch::Code(200)));
        assert_eq!(parse("\"204\""), Ok(StatusMatch::Code(204)));
        assert_eq!(parse("2"), Ok(StatusMatch::Class(2)));
        assert_eq!(parse("\"2xx\""), Ok(StatusMatch::Class(2)));
        assert_eq!(parse("\"5XX\""), Ok(StatusMatch::Class(5)));
    }

    #[test]
    fn a_class_matches_its_hundred_and_a_code_only_itself() {
        assert!(StatusMatch::Class(2).matches(200));
        assert!(StatusMatch::Class(2).matches(299));
        assert!(!StatusMatch::Class(2).matches(300));
        assert!(StatusMatch::Code(503).matches(503));
        assert!(!StatusMatch::Code(503).matches(502));
    }

    #[test]
    fn a_set_holds_exactly_the_statuses_its_matchers_match_and_is_written_as_they_are() {
        let matchers = vec![
            StatusMatch::Code(429),
            StatusMatch::Class(5),
            StatusMatch::Code(100),
        ];
        let set = StatusSet::new(matchers.clone());
        for status in 0..=u16::MAX {
            let matched = matchers.iter().any(|m| m.matches(status));
            assert_eq!(set.contains(status), matched, "{status}");
        }
        assert!(!StatusSet::new(Vec::new()).contains(502));
        assert_eq!(
            serde_json::to_string(&set).ok().as_deref(),
            Some("[429,\"5xx\",100]")
        );
    }

    #[test]
    fn nonsense_statuses_are_refused() {
        for bad in [
            "0", "6", "99", "600", "-1", "\"6xx\"", "\"2x\"", "\"ok\"", "\"42\"",
        ] {
            assert!(parse(bad).is_err(), "{bad} was accepted");
        }
    }

    #[test]
    fn a_code_is_written_as_a_number_and_a_class_as_a_string_and_both_read_back() {
        for (m, json) in [
            (StatusMatch::Code(502), "502"),
            (StatusMatch::Class(5), "\"5xx\""),
        ] {
            assert_eq!(serde_json::to_string(&m).ok().as_deref(), Some(json));
            assert_eq!(parse(json), Ok(m));
        }
    }

    #[test]
    fn a_refusal_says_what_was_expected_and_what_was_found() {
        assert_eq!(
            parse("\"6xx\"").map_err(|e| e.split(" at line").next().map(str::to_owned)),
            Err(Some(
                "expected a status code 100-599 or a class like \"2xx\", got the string \"6xx\""
                    .into()
            ))
        );
    }
}
