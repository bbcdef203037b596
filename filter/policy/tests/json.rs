//! The configuration's JSON reader, checked against serde_json on random documents.

use proptest::prelude::*;
use serde_json::Value;
use upcheck_policy::json::{parse, Json, Number};

/// Whether our reading of a document matches serde_json's.
fn same(ours: &Json, theirs: &Value) -> bool {
    match (ours, theirs) {
        (Json::Null, Value::Null) => true,
        (Json::Bool(a), Value::Bool(b)) => a == b,
        (Json::Number(Number::Unsigned(a)), Value::Number(b)) => b.as_u64() == Some(*a),
        (Json::Number(Number::Negative(a)), Value::Number(b)) => b.as_i64() == Some(*a),
        (Json::Number(Number::Fraction | Number::Huge), Value::Number(b)) => b.is_f64(),
        (Json::String(a), Value::String(b)) => a == b,
        (Json::Array(a), Value::Array(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| same(x, y))
        }
        (Json::Object(a), Value::Object(b)) => {
            a.len() == b.len() && a.iter().all(|(k, v)| b.get(k).is_some_and(|w| same(v, w)))
        }
        _ => false,
    }
}

fn value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<u64>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        (-1e6f64..1e6).prop_map(Value::from),
        any::<String>().prop_map(Value::String),
    ];
    leaf.prop_recursive(6, 64, 8, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
            proptest::collection::btree_map(any::<String>(), inner, 0..8)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #[test]
    fn any_document_serde_json_writes_reads_the_same(v in value(), pretty in any::<bool>()) {
        let text = if pretty { serde_json::to_string_pretty(&v) } else { serde_json::to_string(&v) };
        let text = text.unwrap_or_default();
        let ours = parse(text.as_bytes());
        prop_assert!(ours.as_ref().is_ok_and(|o| same(o, &v)), "{text}: {ours:?}");
    }

    #[test]
    fn whatever_it_accepts_serde_json_accepts_too(text in "[\\[\\]{}\",:0-9.eE+\\-a-z\\\\ \n]{0,40}") {
        if parse(text.as_bytes()).is_ok() {
            prop_assert!(serde_json::from_str::<Value>(&text).is_ok(), "{text:?}");
        }
    }
}
