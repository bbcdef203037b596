//! `health_checks.active.headers`: extra probe headers, in Caddy's form (a name maps to a value
//! or a list of values), read into (lowercase name, value) pairs in document order and written
//! back the same way.
//!
//! A name is checked as its values are read, so an error names the header; names repeat only by
//! mistake (they ignore case), and every value counts towards [`MAX_PROBE_HEADERS`].

use super::grammar::{header_name, header_value};
use super::json::{mismatch, read, scalars_as_found, text, Found, Refusal};
use super::MAX_PROBE_HEADERS;
use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serializer};
use std::collections::HashSet;
use std::fmt;

/// Serde: the probe headers as (lowercase name, value) pairs.
pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<(String, String)>, D::Error> {
    d.deserialize_any(Headers)
}

/// Serde: a name to its value, or to the list of its values.
pub fn serialize<S: Serializer>(headers: &[(String, String)], s: S) -> Result<S::Ok, S::Error> {
    let mut map = s.serialize_map(None)?;
    for same_name in headers.chunk_by(|a, b| a.0 == b.0) {
        let values: Vec<&str> = same_name.iter().map(|(_, v)| v.as_str()).collect();
        let name = same_name
            .first()
            .map(|(n, _)| n.as_str())
            .unwrap_or_default();
        match values.as_slice() {
            [one] => map.serialize_entry(name, one)?,
            many => map.serialize_entry(name, many)?,
        }
    }
    map.end()
}

fn too_many() -> String {
    format!("at most {MAX_PROBE_HEADERS} probe headers are allowed")
}

/// The object of names.
struct Headers;

impl Headers {
    fn scalar<E: de::Error>(self, found: Found) -> Result<Vec<(String, String)>, E> {
        Err(E::custom(mismatch("an object", &found)))
    }
}

impl<'de> Visitor<'de> for Headers {
    type Value = Vec<(String, String)>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an object")
    }

    scalars_as_found!();

    fn visit_seq<A: SeqAccess<'de>>(self, _: A) -> Result<Self::Value, A::Error> {
        Err(de::Error::custom(mismatch("an object", &Found::List)))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut pairs: Vec<(String, String)> = Vec::new();
        let mut seen = HashSet::new();
        while let Some(name) = map.next_key::<String>()? {
            let lower = name.to_ascii_lowercase();
            let values = map.next_value_seed(Named {
                name: &name,
                repeated: !seen.insert(lower.clone()),
                room: MAX_PROBE_HEADERS.saturating_sub(pairs.len()),
            })?;
            pairs.extend(values.into_iter().map(|v| (lower.clone(), v)));
        }
        Ok(pairs)
    }
}

/// One header's values, its name checked first.
struct Named<'a> {
    name: &'a str,
    /// Whether the name came before (in any case).
    repeated: bool,
    /// How many more values fit within [`MAX_PROBE_HEADERS`].
    room: usize,
}

impl<'de> DeserializeSeed<'de> for Named<'_> {
    type Value = Vec<String>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Vec<String>, D::Error> {
        let refusal = if self.name.starts_with(':') {
            Some("must not be a pseudo-header: a probe's :path and :authority are `path` and the upstream's `authority`".to_owned())
        } else if self.name.eq_ignore_ascii_case("host") {
            Some("must not be set: a probe's host is the upstream's `authority`".to_owned())
        } else if self.repeated {
            Some(
                "is listed twice (header names ignore case); give it once with a list of values"
                    .to_owned(),
            )
        } else {
            header_name(self.name).err()
        };
        if let Some(reason) = refusal {
            return Err(de::Error::custom(reason));
        }
        d.deserialize_any(Values { room: self.room })
    }
}

/// A value, or a list of values, within `room`.
struct Values {
    room: usize,
}

/// What one header value must be.
fn value(found: Found) -> Result<String, Refusal> {
    header_value(text(found)?)
}

impl Values {
    fn scalar<E: de::Error>(self, found: Found) -> Result<Vec<String>, E> {
        let one = value(found).map_err(|refusal| E::custom(refusal.worded("a string")))?;
        if self.room == 0 {
            return Err(E::custom(too_many()));
        }
        Ok(vec![one])
    }
}

/// One item of a header's list of values.
struct HeaderValue(String);

impl<'de> Deserialize<'de> for HeaderValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        read(d, "a string", value).map(HeaderValue)
    }
}

impl<'de> Visitor<'de> for Values {
    type Value = Vec<String>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string or a list of strings")
    }

    scalars_as_found!();

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<String>, A::Error> {
        let mut values = Vec::new();
        while let Some(HeaderValue(value)) = seq.next_element()? {
            if values.len() == self.room {
                return Err(de::Error::custom(too_many()));
            }
            values.push(value);
        }
        Ok(values)
    }

    fn visit_map<A: MapAccess<'de>>(self, _: A) -> Result<Vec<String>, A::Error> {
        Err(de::Error::custom(mismatch(
            "a string or a list of strings",
            &Found::Object,
        )))
    }
}
