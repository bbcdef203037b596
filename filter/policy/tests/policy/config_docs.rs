//! `docs/configuration.md` against the code: its table of fields lists every field the effective
//! configuration has, each default is the one in force when the field is left out, and each
//! range or limit is the one the parser enforces (the value at the bound is taken, the value just
//! past it refused with an error naming the field). A default or range changed in code without
//! the docs fails here.

use serde_json::{json, Value};
use std::collections::BTreeSet;
use upcheck_policy::{duration, Config, ConfigError};

const DOCS: &str = include_str!("../../../../docs/configuration.md");

/// The smallest configuration of each role.
const TRAFFIC: &str = r#"{"upstreams":[{"name":"app1"}]}"#;
const PAGE: &str = r#"{"upstreams":[{"name":"app1"}],"role":"status_page"}"#;
/// The smallest configuration with the `fleet` object, whose fields exist only with it.
const FLEET: &str = r#"{"upstreams":[{"name":"app1"}],"fleet":{"cluster":"etcd"}}"#;
/// The smallest configuration with a gRPC check, whose fields exist only with it.
const GRPC: &str = r#"{"upstreams":[{"name":"app1"}],"health_checks":{"active":{"grpc":{}}}}"#;

/// The smallest configuration in which `field` exists.
fn smallest(field: &str) -> &'static str {
    if field.starts_with("status_") {
        PAGE
    } else if field.starts_with("fleet.") {
        FLEET
    } else if field.starts_with("health_checks.active.grpc.") {
        GRPC
    } else {
        TRAFFIC
    }
}

/// One row of the table of fields.
struct Row {
    field: String,
    default: String,
    range: String,
}

fn rows() -> Vec<Row> {
    let table = DOCS
        .split("\n## Fields\n")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("docs/configuration.md has a Fields section");
    let rows: Vec<Row> = table
        .lines()
        .filter(|line| line.starts_with("| `"))
        .map(|line| {
            let cells: Vec<&str> = line.split(" | ").map(str::trim).collect();
            let field = cells[0]
                .trim_start_matches("| ")
                .trim_matches('`')
                .to_owned();
            Row {
                field,
                default: cells[2].to_owned(),
                range: cells[3].to_owned(),
            }
        })
        .collect();
    assert!(
        rows.len() > 30,
        "the table was not found: {} rows",
        rows.len()
    );
    rows
}

fn effective(json: &str) -> Value {
    let config = Config::parse(json.as_bytes()).expect("the smallest configuration parses");
    serde_json::from_str(&config.effective_json()).expect("the effective configuration is JSON")
}

/// The effective value of a documented field (`upstreams[].name` is the first upstream's).
fn lookup<'a>(root: &'a Value, field: &str) -> Option<&'a Value> {
    field
        .split('.')
        .try_fold(root, |v, step| match step.strip_suffix("[]") {
            Some(list) => v.get(list)?.get(0),
            None => v.get(step),
        })
}

/// Every field of `v` that holds a value (an empty object, such as `headers`, is one), as the
/// table writes it.
fn leaves(prefix: &str, v: &Value, out: &mut BTreeSet<String>) {
    let join = |key: &str| {
        if prefix.is_empty() {
            key.to_owned()
        } else {
            format!("{prefix}.{key}")
        }
    };
    match v {
        Value::Object(map) if !map.is_empty() => {
            for (key, value) in map {
                match value {
                    Value::Array(items) if items.iter().all(Value::is_object) => {
                        for item in items {
                            leaves(&format!("{}[]", join(key)), item, out);
                        }
                    }
                    _ => leaves(&join(key), value, out),
                }
            }
        }
        _ => {
            out.insert(prefix.to_owned());
        }
    }
}

/// The smallest configuration of the field's role, with `value` at `field`.
fn with(field: &str, value: Value) -> String {
    let mut doc: Value = serde_json::from_str(smallest(field)).expect("JSON");
    let (parent, key) = match field.rsplit_once('.') {
        Some((parent, key)) => (Some(parent), key),
        None => (None, field),
    };
    let target = match parent {
        Some("upstreams[]") => &mut doc["upstreams"][0],
        Some(parent) => parent.split('.').fold(&mut doc, |v, step| {
            let map = v.as_object_mut().expect("an object on the way");
            map.entry(step).or_insert_with(|| json!({}))
        }),
        None => &mut doc,
    };
    target[key] = value;
    doc.to_string()
}

/// The field's path in errors: `upstreams[].name` is the first upstream's.
fn error_path(field: &str) -> String {
    field.replace("[]", "[0]")
}

/// Whether `error` is about `field` (or within it: a header of `headers`, an item of a list).
fn names(error: &ConfigError, field: &str) -> bool {
    let path = error_path(field);
    error.path == path
        || error.path.starts_with(&format!("{path}."))
        || error.path.starts_with(&format!("{path}["))
}

/// Whether a configuration with `value` at `field` is refused for being out of that field's
/// bounds.
fn out_of_bounds(field: &str, value: Value) -> Option<ConfigError> {
    let json = with(field, value);
    let error = Config::parse(json.as_bytes()).err()?;
    let bound = [
        "must be at least",
        "must be at most",
        "at most",
        "percentage",
    ]
    .iter()
    .any(|words| error.reason.contains(words));
    (names(&error, field) && bound).then_some(error)
}

/// A JSON value one step from `value`: integers by one, durations by a nanosecond (written as
/// integer nanoseconds).
fn step(value: &Value, up: bool) -> Value {
    match value {
        Value::Number(n) => {
            let n = n.as_i64().expect("a whole number");
            json!(if up { n + 1 } else { n - 1 })
        }
        Value::String(text) => {
            let nanos = u64::try_from(duration::parse(text).expect("a duration").as_nanos())
                .expect("fits in u64");
            json!(if up { nanos + 1 } else { nanos - 1 })
        }
        other => panic!("a range bound must be a number or a duration, got {other}"),
    }
}

/// `n` items of the list or map at `field`.
fn items(field: &str, n: usize) -> Value {
    match field {
        "upstreams" => Value::Array((0..n).map(|i| json!({"name": format!("b{i}")})).collect()),
        "health_checks.passive.unhealthy_status" => Value::Array(vec![json!(500); n]),
        "health_checks.active.headers" => {
            Value::Object((0..n).map(|i| (format!("x-{i}"), json!("v"))).collect())
        }
        other => panic!("{other}: the test has no items for this field; add them here"),
    }
}

/// A valid string of `n` bytes for `field`.
fn bytes(field: &str, n: usize) -> Value {
    if field.ends_with("path") {
        json!(format!("/{}", "p".repeat(n - 1)))
    } else {
        json!("a".repeat(n))
    }
}

#[test]
fn the_table_lists_every_field_of_the_effective_configuration_and_no_other() {
    let mut in_force = BTreeSet::new();
    leaves("", &effective(TRAFFIC), &mut in_force);
    leaves("", &effective(PAGE), &mut in_force);
    leaves("", &effective(FLEET), &mut in_force);
    leaves("", &effective(GRPC), &mut in_force);
    let documented: BTreeSet<String> = rows().into_iter().map(|row| row.field).collect();
    let missing: Vec<&String> = in_force.difference(&documented).collect();
    assert!(missing.is_empty(), "fields without a row: {missing:?}");
    for field in &documented {
        let known = lookup(&effective(smallest(field)), field).is_some();
        assert!(known, "{field} is documented but not a field");
    }
}

#[test]
fn every_documented_default_is_the_one_in_force_when_the_field_is_left_out() {
    let traffic = effective(TRAFFIC);
    let active_interval = lookup(&traffic, "health_checks.active.interval").cloned();
    for row in rows() {
        let field = row.field.as_str();
        let root = effective(smallest(field));
        let in_force = lookup(&root, field).unwrap_or_else(|| panic!("{field} is not in force"));
        match row.default.as_str() {
            "required" => {
                let doc = match field {
                    "upstreams" => "{}".to_owned(),
                    "upstreams[].name" => r#"{"upstreams":[{"weight":1}]}"#.to_owned(),
                    "fleet.cluster" => r#"{"upstreams":[{"name":"app1"}],"fleet":{}}"#.to_owned(),
                    other => panic!("{other}: the test does not know how to leave it out"),
                };
                let error = Config::parse(doc.as_bytes()).expect_err("refused without it");
                assert!(names(&error, field), "{field}: {error}");
            }
            "the `name`" => assert_eq!(in_force, &json!("app1"), "{field}"),
            "the `pool`, else `\"upcheck\"`" => {
                assert_eq!(in_force, &json!("upcheck"), "{field}: without a pool");
                let mut doc: Value = serde_json::from_str(smallest(field)).expect("JSON");
                doc["pool"] = json!("site-1");
                let pooled = effective(&doc.to_string());
                assert_eq!(lookup(&pooled, field), Some(&json!("site-1")), "{field}");
            }
            "a tenth of `health_checks.active.interval`" => {
                let interval = active_interval
                    .as_ref()
                    .and_then(Value::as_str)
                    .map(|text| duration::parse(text).expect("a duration"))
                    .expect("the interval is in force");
                assert_eq!(in_force, &json!(duration::exact(interval / 10)), "{field}");
            }
            written => {
                let literal = written
                    .strip_prefix('`')
                    .and_then(|w| w.strip_suffix('`'))
                    .unwrap_or_else(|| {
                        panic!("{field}: a default is `JSON` or a known phrase, got {written}")
                    });
                let documented: Value = serde_json::from_str(literal)
                    .unwrap_or_else(|e| panic!("{field}: {literal} is not JSON: {e}"));
                assert_eq!(in_force, &documented, "{field}: the docs say {literal}");
            }
        }
    }
}

#[test]
fn every_documented_range_and_limit_is_the_one_enforced() {
    let mut checked = 0;
    for row in rows() {
        let field = row.field.as_str();
        let range = row.range.as_str();
        if range == "—" {
            continue;
        }
        checked += 1;
        if let Some((low, high)) = range.split_once('–') {
            let bound = |cell: &str| -> Value {
                let literal = cell.trim().trim_matches('`');
                serde_json::from_str(literal)
                    .unwrap_or_else(|e| panic!("{field}: bound {literal} is not JSON: {e}"))
            };
            let (low, high) = (bound(low), bound(high));
            for inside in [low.clone(), high.clone()] {
                assert_eq!(
                    out_of_bounds(field, inside.clone()).map(|e| e.to_string()),
                    None,
                    "{field}: {inside} is within the documented range"
                );
            }
            for outside in [step(&low, false), step(&high, true)] {
                assert!(
                    out_of_bounds(field, outside.clone()).is_some()
                        || Config::parse(with(field, outside.clone()).as_bytes())
                            .is_err_and(|e| names(&e, field)),
                    "{field}: {outside} is outside the documented range"
                );
            }
            continue;
        }
        let limit = |unit: &str| -> Option<usize> {
            range
                .strip_prefix("at most ")?
                .strip_suffix(unit)?
                .parse()
                .ok()
        };
        let (at, past) = if let Some(n) = limit(" bytes") {
            (bytes(field, n), bytes(field, n + 1))
        } else if let Some(n) = limit(" items") {
            (items(field, n), items(field, n + 1))
        } else {
            panic!("{field}: a range is `low`–`high`, \"at most N bytes\", \"at most N items\" or —, got {range}");
        };
        assert_eq!(
            out_of_bounds(field, at).map(|e| e.to_string()),
            None,
            "{field}: {range} fits"
        );
        assert!(
            out_of_bounds(field, past).is_some(),
            "{field}: one more than {range} is refused"
        );
    }
    assert!(checked > 20, "only {checked} ranges were checked");
}
