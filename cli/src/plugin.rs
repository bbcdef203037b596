//! The plugin configuration that goes into the Envoy configuration, kept as the operator wrote it.
//!
//! The wasm filter's `configuration` is JSON, and what is embedded there is the input's own
//! members in its order (not every default spelled out): an operator reads it as the block they
//! wrote, with `routing` put first and each backend's address added. The module's own parser
//! checks it, so a broken file gets the message Envoy's log would show (the addresses once the
//! routing is decided, since what they may be depends on it). The document is held as
//! serde_json's [`Value`] in document order ([`crate::input`]), and laid out one upstream and one
//! check block to a line.
//!
//! [`Origins`] remembers where each part of a document came from, so an error found in a
//! document built from Caddy's JSON names the field the operator wrote, not the one upcheck did.

use std::fmt::Write as _;

use serde_json::{Map, Value};
use upcheck_policy::{Config, ConfigError, RoutingMode};

use crate::{input, refuse};

/// What `upcheck envoy` reads: a plugin configuration and where its parts are in the input.
#[derive(Debug, Clone, PartialEq)]
pub struct Source {
    /// The plugin configuration, `routing` aside.
    pub document: Document,
    /// The routing the input names, if it names one.
    pub routing: Option<RoutingMode>,
    /// Where the document's parts are in the input.
    pub origins: Origins,
    /// The port probes go to instead of each backend's own (Caddy's `health_checks.active.port`).
    /// Default: none, probes go where requests go.
    pub probe_port: Option<u16>,
    /// The part of the input the configuration was read from, when not the whole file: e.g.
    /// `the reverse_proxy handler at apps.http.servers.srv0.routes[0].handle[0]`.
    pub part: Option<String>,
}

/// Checks a plugin configuration as the module does (pointing Caddy's JSON to `--from-caddy`).
pub fn check(bytes: &[u8]) -> Result<Config, ConfigError> {
    Config::parse(bytes).map_err(|error| match input::parse(bytes) {
        Ok(Value::Object(members))
            if members.contains_key("apps") && !members.contains_key("upstreams") =>
        {
            refuse(
                "apps",
                "this is a Caddy configuration, not an upcheck one: read it with --from-caddy",
            )
        }
        _ => error,
    })
}

/// Reads an upcheck plugin configuration, checked as the module does but for the routing and the
/// addresses: the command decides the routing, and what an address may be depends on it
/// ([`crate::deployment::plan`] checks them).
pub fn read(bytes: &[u8]) -> Result<Source, ConfigError> {
    let members = match input::parse(bytes) {
        Ok(Value::Object(members)) => members,
        // The module's message when it has one, as Envoy's log would show it.
        other => {
            check(bytes)?;
            return Err(other
                .err()
                .unwrap_or_else(|| refuse("", "expected a JSON object")));
        }
    };
    let routing = members.get("routing").map(routing).transpose()?;
    let document = Document::new(members);
    check(
        document
            .text(RoutingMode::Cluster, Addresses::Drop)
            .as_bytes(),
    )?;
    Ok(Source {
        document,
        routing,
        origins: Origins::default(),
        probe_port: None,
        part: None,
    })
}

/// The routing an input's `routing` names.
fn routing(value: &Value) -> Result<RoutingMode, ConfigError> {
    match value.as_str() {
        Some("host") => Ok(RoutingMode::Host),
        Some("cluster") => Ok(RoutingMode::Cluster),
        _ => Err(refuse(
            "routing",
            format!("expected \"cluster\" or \"host\", got {}", compact(value)),
        )),
    }
}

/// Whether a written document carries the backends' addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Addresses {
    /// Each upstream keeps its `address`: host routing needs it, and checking needs it.
    Keep,
    /// Every `address` is left out: in cluster routing the address is in the backend's cluster
    /// and the filter has no use for it.
    Drop,
}

/// A plugin configuration: its members in order, `routing` aside (the command decides it).
#[derive(Debug, Clone, PartialEq)]
pub struct Document {
    members: Map<String, Value>,
}

impl Document {
    /// The document of `members` (a `routing` member among them is left out).
    pub fn new(mut members: Map<String, Value>) -> Document {
        members.retain(|key, _| key != "routing");
        Document { members }
    }

    /// The `address` of the `i`th upstream, as written.
    pub fn address(&self, i: usize) -> Option<&Value> {
        self.members.get("upstreams")?.get(i)?.get("address")
    }

    /// The document as JSON text: `routing` first, then the members in order; each upstream on
    /// a line of its own, each member of `health_checks` too.
    pub fn text(&self, routing: RoutingMode, addresses: Addresses) -> String {
        let routing = match routing {
            RoutingMode::Host => "host",
            RoutingMode::Cluster => "cluster",
        };
        let mut lines = vec![member("routing", &Value::String(routing.into()))];
        for (key, value) in &self.members {
            match (key.as_str(), value, addresses) {
                ("upstreams", Value::Array(upstreams), Addresses::Drop) => {
                    let upstreams = upstreams.iter().map(without_address).collect();
                    lines.push(member(key, &Value::Array(upstreams)));
                }
                _ => lines.push(member(key, value)),
            }
        }
        format!("{{{}}}", lines.join(",\n "))
    }
}

fn without_address(upstream: &Value) -> Value {
    match upstream {
        Value::Object(fields) => Value::Object(
            fields
                .iter()
                .filter(|(key, _)| *key != "address")
                .map(|(key, value)| (key.clone(), value.clone()))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// One top-level member: a list one item to a line (aligned), an object one member to a line.
fn member(key: &str, value: &Value) -> String {
    let head = format!("{}: ", compact(&Value::String(key.into())));
    match value {
        Value::Array(items) if !items.is_empty() => {
            let align = format!(",\n{}", " ".repeat(head.chars().count() + 2));
            let items: Vec<String> = items.iter().map(compact).collect();
            format!("{head}[{}]", items.join(&align))
        }
        Value::Object(fields) if !fields.is_empty() => {
            let fields: Vec<String> = fields
                .iter()
                .map(|(k, v)| format!("{}: {}", compact(&Value::String(k.clone())), compact(v)))
                .collect();
            format!("{head}{{\n   {}}}", fields.join(",\n   "))
        }
        _ => format!("{head}{}", compact(value)),
    }
}

/// A value on one line, `", "` and `": "` between parts.
pub fn compact(value: &Value) -> String {
    let mut out = String::new();
    write_compact(value, &mut out);
    out
}

fn write_compact(value: &Value, out: &mut String) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        // A whole number as its digits; any other (a fraction, an exponent, a whole number past
        // 64 bits) as the shortest text that reads back as the same float, which the module
        // refuses as it refuses the original.
        Value::Number(n) => {
            let _ = write!(out, "{n}");
        }
        Value::String(s) => write_string(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_compact(item, out);
            }
            out.push(']');
        }
        Value::Object(fields) => {
            out.push('{');
            for (i, (key, value)) in fields.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_string(key, out);
                out.push_str(": ");
                write_compact(value, out);
            }
            out.push('}');
        }
    }
}

/// A JSON string. Control characters, and the characters YAML 1.1 reads as line breaks, are
/// escaped: the text is embedded in a YAML block scalar, one JSON line to a YAML line.
fn write_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() || matches!(c, '\u{2028}' | '\u{2029}' | '\u{feff}') => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Where the parts of a plugin configuration are in the input the operator gave.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Origins {
    /// (path in the plugin configuration, path in the input). Default: none, the input is the
    /// plugin configuration itself.
    moved: Vec<(String, String)>,
}

impl Origins {
    /// Records that `path` in the plugin configuration, and everything under it, came from
    /// `origin` in the input.
    pub fn add(&mut self, path: impl Into<String>, origin: impl Into<String>) {
        self.moved.push((path.into(), origin.into()));
    }

    /// `error` with its path as it is in the input: the most specific recorded origin, plus the
    /// rest of the path.
    pub fn locate(&self, error: ConfigError) -> ConfigError {
        let found = self
            .moved
            .iter()
            .filter_map(|(path, origin)| {
                let rest = error.path.strip_prefix(path.as_str())?;
                (rest.is_empty() || rest.starts_with(['.', '['])).then_some((
                    path.len(),
                    origin,
                    rest,
                ))
            })
            .max_by_key(|(len, _, _)| *len);
        match found {
            Some((_, origin, rest)) => ConfigError {
                path: format!("{origin}{rest}"),
                reason: error.reason,
            },
            None => error,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn document(text: &str) -> Document {
        match input::parse(text.as_bytes()) {
            Ok(Value::Object(members)) => Document::new(members),
            other => panic!("{text}: {other:?}"),
        }
    }

    #[test]
    fn the_text_puts_routing_first_and_one_upstream_and_one_check_block_to_a_line() {
        let doc = document(
            r#"{"upstreams": [{"name": "app1", "address": "127.0.0.1:3001"}, {"name": "app2", "address": "127.0.0.1:3002"}],
                "routing": "cluster",
                "health_checks": {"active": {"path": "/up", "interval": 10000000000, "timeout": "5s"},
                                  "passive": {"fail_duration": 10000000000, "max_fails": 3}},
                "status_path": null}"#,
        );
        assert_eq!(
            doc.text(RoutingMode::Host, Addresses::Keep),
            r#"{"routing": "host",
 "upstreams": [{"name": "app1", "address": "127.0.0.1:3001"},
               {"name": "app2", "address": "127.0.0.1:3002"}],
 "health_checks": {
   "active": {"path": "/up", "interval": 10000000000, "timeout": "5s"},
   "passive": {"fail_duration": 10000000000, "max_fails": 3}},
 "status_path": null}"#
        );
        assert_eq!(
            doc.text(RoutingMode::Cluster, Addresses::Drop),
            r#"{"routing": "cluster",
 "upstreams": [{"name": "app1"},
               {"name": "app2"}],
 "health_checks": {
   "active": {"path": "/up", "interval": 10000000000, "timeout": "5s"},
   "passive": {"fail_duration": 10000000000, "max_fails": 3}},
 "status_path": null}"#
        );
    }

    #[test]
    fn strings_are_escaped_so_that_each_json_line_stays_one_yaml_line() {
        let text = compact(&Value::String("a\"b\\c\nd\u{85}e\u{2028}é".into()));
        assert_eq!(text, r#""a\"b\\c\nd\u0085e\u2028é""#);
        assert_eq!(
            input::parse(text.as_bytes()),
            Ok(Value::String("a\"b\\c\nd\u{85}e\u{2028}é".into()))
        );
    }

    #[test]
    fn a_number_that_is_not_a_64_bit_whole_one_is_written_so_that_the_module_refuses_it_alike() {
        for (weight, got) in [
            ("1.5", "a fraction"),
            ("1e3", "a fraction"),
            ("18446744073709551616", "a number too large for 64 bits"),
        ] {
            let original = format!(r#"{{"upstreams": [{{"name": "a", "weight": {weight}}}]}}"#);
            let doc = document(&original);
            let error = Config::parse(doc.text(RoutingMode::Cluster, Addresses::Keep).as_bytes())
                .expect_err("not a whole 64-bit number");
            assert_eq!(Config::parse(original.as_bytes()), Err(error.clone()));
            assert_eq!(
                error.to_string(),
                format!("upstreams[0].weight: expected a whole number, got {got}")
            );
        }
    }

    #[test]
    fn an_error_is_located_by_the_most_specific_origin_at_a_path_boundary() {
        let mut origins = Origins::default();
        origins.add("upstreams[1]", "h.upstreams[1]");
        origins.add("upstreams[1].address", "h.upstreams[1].dial");
        origins.add("health_checks", "h.health_checks");
        let locate = |path: &str| origins.locate(refuse(path, "r")).path;
        assert_eq!(locate("upstreams[1].address"), "h.upstreams[1].dial");
        assert_eq!(locate("upstreams[1].name"), "h.upstreams[1].name");
        assert_eq!(locate("upstreams[10].name"), "upstreams[10].name");
        assert_eq!(
            locate("health_checks.active.headers.X-A"),
            "h.health_checks.active.headers.X-A"
        );
        assert_eq!(locate("jitter"), "jitter");
    }

    #[test]
    fn a_caddy_configuration_read_as_a_plugin_configuration_is_pointed_to_from_caddy() {
        let error = read(br#"{"apps": {"http": {}}}"#).expect_err("Caddy's JSON");
        assert_eq!(
            error.to_string(),
            "apps: this is a Caddy configuration, not an upcheck one: read it with --from-caddy"
        );
    }

    #[test]
    fn routing_is_taken_from_the_input_only_when_it_names_one() {
        let named = read(br#"{"routing": "cluster", "upstreams": [{"name": "a"}]}"#);
        assert_eq!(named.map(|s| s.routing), Ok(Some(RoutingMode::Cluster)));
        let unnamed = read(br#"{"upstreams": [{"name": "a"}]}"#);
        assert_eq!(unnamed.map(|s| s.routing), Ok(None));
        let unknown = read(br#"{"routing": "hots", "upstreams": [{"name": "a"}]}"#);
        assert_eq!(
            unknown.map_err(|e| e.to_string()),
            Err("routing: expected \"cluster\" or \"host\", got \"hots\"".into())
        );
    }

    #[test]
    fn the_addresses_are_left_to_the_routing_the_command_decides() {
        let source = read(
            br#"{"routing": "host", "upstreams": [{"name": "a", "address": "app1.internal:80"}]}"#,
        )
        .expect("host names are for the routing to judge");
        assert_eq!(source.routing, Some(RoutingMode::Host));
        assert_eq!(
            source.document.address(0),
            Some(&Value::String("app1.internal:80".into()))
        );
    }
}
