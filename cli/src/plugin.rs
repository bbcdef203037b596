//! The plugin configuration that goes into the Envoy configuration, kept as the operator wrote it.
//!
//! The wasm filter's `configuration` is JSON, and what is embedded there is the input's own
//! members in its order (not every default spelled out): an operator reads it as the block they
//! wrote, with `routing` put first and each backend's address added. The document is held as the
//! module's [`Json`] value, read by the module's own reader, so a broken file gets the message
//! Envoy's log would show; and it is laid out one upstream and one check block to a line.
//!
//! [`Origins`] remembers where each part of a document came from, so an error found in a
//! document built from Caddy's JSON names the field the operator wrote, not the one upcheck did.

use std::fmt::Write as _;

use crate::json::{self, Json, Number};
use upcheck_policy::{Config, ConfigError, RoutingMode};

use crate::refuse;

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
    Config::parse(bytes).map_err(|error| match json::parse(bytes) {
        Ok(Json::Object(members))
            if members.iter().any(|(key, _)| key == "apps")
                && !members.iter().any(|(key, _)| key == "upstreams") =>
        {
            refuse(
                "apps",
                "this is a Caddy configuration, not an upcheck one: read it with --from-caddy",
            )
        }
        _ => error,
    })
}

/// Reads an upcheck plugin configuration, checked as the module does.
pub fn read(bytes: &[u8]) -> Result<Source, ConfigError> {
    let config = check(bytes)?;
    let Ok(Json::Object(members)) = json::parse(bytes) else {
        return Err(refuse("", "expected a JSON object"));
    };
    let routing = members
        .iter()
        .any(|(key, value)| key == "routing" && *value != Json::Null)
        .then_some(config.routing);
    Ok(Source {
        document: Document::new(members),
        routing,
        origins: Origins::default(),
        probe_port: None,
        part: None,
    })
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
    members: Vec<(String, Json)>,
}

impl Document {
    /// The document of `members` (a `routing` member among them is left out).
    pub fn new(members: Vec<(String, Json)>) -> Document {
        Document {
            members: members
                .into_iter()
                .filter(|(key, _)| key != "routing")
                .collect(),
        }
    }

    /// The document as JSON text: `routing` first, then the members in order; each upstream on
    /// a line of its own, each member of `health_checks` too.
    pub fn text(&self, routing: RoutingMode, addresses: Addresses) -> String {
        let routing = match routing {
            RoutingMode::Host => "host",
            RoutingMode::Cluster => "cluster",
        };
        let mut lines = vec![member("routing", &Json::String(routing.into()))];
        for (key, value) in &self.members {
            match (key.as_str(), value, addresses) {
                ("upstreams", Json::Array(upstreams), Addresses::Drop) => {
                    let upstreams = upstreams.iter().map(without_address).collect();
                    lines.push(member(key, &Json::Array(upstreams)));
                }
                _ => lines.push(member(key, value)),
            }
        }
        format!("{{{}}}", lines.join(",\n "))
    }
}

fn without_address(upstream: &Json) -> Json {
    match upstream {
        Json::Object(fields) => Json::Object(
            fields
                .iter()
                .filter(|(key, _)| key != "address")
                .cloned()
                .collect(),
        ),
        other => other.clone(),
    }
}

/// One top-level member: a list one item to a line (aligned), an object one member to a line.
fn member(key: &str, value: &Json) -> String {
    let head = format!("{}: ", compact(&Json::String(key.into())));
    match value {
        Json::Array(items) if !items.is_empty() => {
            let align = format!(",\n{}", " ".repeat(head.chars().count() + 2));
            let items: Vec<String> = items.iter().map(compact).collect();
            format!("{head}[{}]", items.join(&align))
        }
        Json::Object(fields) if !fields.is_empty() => {
            let fields: Vec<String> = fields
                .iter()
                .map(|(k, v)| format!("{}: {}", compact(&Json::String(k.clone())), compact(v)))
                .collect();
            format!("{head}{{\n   {}}}", fields.join(",\n   "))
        }
        _ => format!("{head}{}", compact(value)),
    }
}

/// A value on one line, `", "` and `": "` between parts.
pub fn compact(value: &Json) -> String {
    let mut out = String::new();
    write_compact(value, &mut out);
    out
}

fn write_compact(value: &Json, out: &mut String) {
    match value {
        Json::Null => out.push_str("null"),
        Json::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Json::Number(Number::Unsigned(n)) => {
            let _ = write!(out, "{n}");
        }
        Json::Number(Number::Negative(n)) => {
            let _ = write!(out, "{n}");
        }
        // The reader keeps no digits of these, and the module's messages show none: a number of
        // the same kind gets the same message from `Config::parse`, which every document goes
        // through before anything is written.
        Json::Number(Number::Fraction) => out.push_str("0.5"),
        Json::Number(Number::Huge) => out.push_str("18446744073709551616"),
        Json::String(s) => write_string(s, out),
        Json::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_compact(item, out);
            }
            out.push(']');
        }
        Json::Object(fields) => {
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
        match json::parse(text.as_bytes()) {
            Ok(Json::Object(members)) => Document::new(members),
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
        let text = compact(&Json::String("a\"b\\c\nd\u{85}e\u{2028}é".into()));
        assert_eq!(text, r#""a\"b\\c\nd\u0085e\u2028é""#);
        assert_eq!(
            json::parse(text.as_bytes()),
            Ok(Json::String("a\"b\\c\nd\u{85}e\u{2028}é".into()))
        );
    }

    #[test]
    fn a_fraction_is_written_so_that_the_module_refuses_it_as_it_would_the_original() {
        let doc = document(r#"{"upstreams": [{"name": "a", "weight": 1.5}]}"#);
        let error = Config::parse(doc.text(RoutingMode::Cluster, Addresses::Keep).as_bytes())
            .expect_err("a fraction of a weight");
        let original = Config::parse(br#"{"upstreams": [{"name": "a", "weight": 1.5}]}"#)
            .expect_err("a fraction of a weight");
        assert_eq!(error, original);
        assert_eq!(
            error.to_string(),
            "upstreams[0].weight: expected a whole number, got a fraction"
        );
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
    }
}
