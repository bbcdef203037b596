//! Reading the JSON the command is given: serde_json's [`Value`], members in document order, and
//! a member name given twice in one object refused.
//!
//! serde_json keeps the last of two members with one name, without a word. In a configuration
//! that is a mistake (two `max_fails`, two `dial`s in one upstream), not a choice, and the value
//! that was meant may be the one dropped; so every object is read through [`Checked`], which
//! refuses the second member at its JSON path. Nesting is bounded by serde_json's recursion limit
//! (128 levels), so hostile input cannot exhaust the stack.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};
use upcheck_policy::ConfigError;

use crate::refuse;

/// Parses one JSON document (surrounding whitespace allowed, nothing else). A broken document is
/// refused as `not valid JSON: …` with the line and column, as the module refuses one; a member
/// name given twice in one object at the path of its second member.
pub fn parse(bytes: &[u8]) -> Result<Value, ConfigError> {
    let mut reader = serde_json::Deserializer::from_slice(bytes);
    let mut track = serde_path_to_error::Track::new();
    let read = Checked
        .deserialize(serde_path_to_error::Deserializer::new(
            &mut reader,
            &mut track,
        ))
        .and_then(|value| reader.end().map(|()| value));
    read.map_err(|e| {
        if e.is_data() {
            // The one data error: a repeated member name, found at its value.
            refuse(track.path().to_string(), e.to_string())
        } else {
            refuse("", format!("not valid JSON: {e}"))
        }
    })
}

/// Any JSON value, its objects checked for repeated member names.
struct Checked;

impl<'de> DeserializeSeed<'de> for Checked {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Checked {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        // serde_json reads only finite numbers, so this is never null.
        Ok(Value::from(v))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(Checked)? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut members = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let repeated = members.contains_key(&key);
            let value = map.next_value_seed(Member { repeated })?;
            members.insert(key, value);
        }
        Ok(Value::Object(members))
    }
}

/// An object member's value; refused, before it is read, when its name came before in the
/// object (so the error's path is the member's).
struct Member {
    repeated: bool,
}

impl<'de> DeserializeSeed<'de> for Member {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        if self.repeated {
            return Err(de::Error::custom(
                "given twice in one object (keep one: a reader would silently use the last)",
            ));
        }
        Checked.deserialize(d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ok(text: &str) -> Value {
        parse(text.as_bytes()).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    fn err(text: &str) -> String {
        match parse(text.as_bytes()) {
            Ok(v) => panic!("{text} parsed as {v:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn every_kind_of_value_is_read_with_members_in_document_order() {
        let v = ok(r#" {"z": [1, -2, 1.5, null], "a": {"c": true, "b": false},
                        "m": "x\"\\\/\n\u00e9\ud83d\ude00"} "#);
        assert_eq!(
            v,
            json!({"z": [1, -2, 1.5, null], "a": {"c": true, "b": false}, "m": "x\"\\/\né😀"})
        );
        let keys: Vec<&String> = v
            .as_object()
            .map(|m| m.keys().collect())
            .unwrap_or_default();
        assert_eq!(keys, ["z", "a", "m"]);
        let inner: Vec<&String> = v["a"]
            .as_object()
            .map(|m| m.keys().collect())
            .unwrap_or_default();
        assert_eq!(inner, ["c", "b"]);
    }

    #[test]
    fn a_member_name_given_twice_is_refused_at_its_path_and_position() {
        assert_eq!(
            err(r#"{"a": 1, "a": 2}"#),
            "a: given twice in one object (keep one: a reader would silently use the last) at \
             line 1 column 14"
        );
        assert_eq!(
            err("{\"h\": [{\"dial\": \"x\"},\n {\"dial\": \"y\", \"dial\": \"z\"}]}"),
            "h[1].dial: given twice in one object (keep one: a reader would silently use the \
             last) at line 2 column 23"
        );
    }

    #[test]
    fn one_name_in_different_objects_is_no_repetition() {
        assert_eq!(
            ok(r#"{"a": {"n": 1}, "b": {"n": 2}, "c": [{"n": 3}, {"n": 4}]}"#),
            json!({"a": {"n": 1}, "b": {"n": 2}, "c": [{"n": 3}, {"n": 4}]})
        );
    }

    #[test]
    fn broken_documents_are_refused_with_the_line_and_column() {
        assert_eq!(
            err("{\"a\": 1,\n \"b\" 2}"),
            "not valid JSON: expected `:` at line 2 column 6"
        );
        assert_eq!(
            err("{} x"),
            "not valid JSON: trailing characters at line 1 column 4"
        );
        assert_eq!(
            err(""),
            "not valid JSON: EOF while parsing a value at line 1 column 0"
        );
        assert!(parse(b"\"\xff\"").is_err());
    }

    #[test]
    fn deep_nesting_is_refused_instead_of_exhausting_the_stack() {
        let deep = "[".repeat(100_000);
        assert_eq!(
            err(&deep),
            "not valid JSON: recursion limit exceeded at line 1 column 128"
        );
        let fine = format!("{}{}", "[".repeat(100), "]".repeat(100));
        assert!(parse(fine.as_bytes()).is_ok());
    }
}
