//! The plugin configuration that goes into the Envoy configuration, kept as the operator wrote it.
//!
//! The wasm filter's `configuration` is JSON, and what is embedded there is the input's own
//! members in its order (not every default spelled out): an operator reads it as the block they
//! wrote, with `routing` put first and each backend's address added. One input makes two
//! documents: the traffic listener's, and the status page listener's, which is the same with
//! `"role": "status_page"` first and the page's own members (`status_path`, `status_public`,
//! which a traffic configuration refuses) last. The module's own parser
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
    if members.contains_key("role") {
        return Err(refuse(
            "role",
            "upcheck envoy writes both listeners' configurations from the pool's, the traffic \
             one and the status page's (`\"role\": \"status_page\"`): leave `role` out",
        ));
    }
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

/// The members that configure the status page: only the status page's document has them.
const PAGE_MEMBERS: [&str; 2] = ["status_path", "status_public"];

/// A plugin configuration: its members in order, `routing` aside (the command decides it), and
/// the status page's members apart.
#[derive(Debug, Clone, PartialEq)]
pub struct Document {
    members: Map<String, Value>,
    /// `status_path` and `status_public`, if given.
    page: Map<String, Value>,
}

impl Document {
    /// The document of `members` (a `routing` member among them is left out).
    pub fn new(mut members: Map<String, Value>) -> Document {
        members.retain(|key, _| key != "routing");
        let page = members
            .iter()
            .filter(|(key, _)| PAGE_MEMBERS.contains(&key.as_str()))
            .map(|(key, value)| (key.clone(), value.clone()))
            .collect();
        members.retain(|key, _| !PAGE_MEMBERS.contains(&key.as_str()));
        Document { members, page }
    }

    /// The whole document as [`read`] reads it back: its members in order under `routing`, the
    /// status page's last.
    pub fn input(&self, routing: RoutingMode) -> Map<String, Value> {
        let name = match routing {
            RoutingMode::Host => "host",
            RoutingMode::Cluster => "cluster",
        };
        let mut all = Map::new();
        all.insert("routing".into(), Value::from(name));
        all.extend(self.members.clone());
        all.extend(self.page.clone());
        all
    }

    /// The `fleet` member as written, added as an empty object when missing, for
    /// `upcheck envoy --etcd` to complete ([`crate::etcd`]).
    pub fn fleet_mut(&mut self) -> &mut Value {
        self.members
            .entry("fleet")
            .or_insert_with(|| Value::Object(Map::new()))
    }

    /// The `address` of the `i`th upstream, as written.
    pub fn address(&self, i: usize) -> Option<&Value> {
        self.members.get("upstreams")?.get(i)?.get("address")
    }

    /// The document as NGINX with ngx_wasm_module runs it: `"proxy": "nginx"` first, each
    /// upstream's `cluster` the `host:port` in `clusters` (probes are dispatched there, and the
    /// route header carries it), no `address`, and the status page served on every connection
    /// to its server, which NGINX binds to loopback (that host does not tell the filter the
    /// address a connection was made to).
    pub fn for_nginx(&self, clusters: &[String]) -> Document {
        let mut members = Map::new();
        members.insert("proxy".into(), Value::String("nginx".into()));
        for (key, value) in &self.members {
            let value = match (key.as_str(), value) {
                ("upstreams", Value::Array(upstreams)) => Value::Array(
                    upstreams
                        .iter()
                        .zip(clusters)
                        .map(|(upstream, cluster)| with_cluster(upstream, cluster))
                        .collect(),
                ),
                _ => value.clone(),
            };
            members.insert(key.clone(), value);
        }
        let mut page = self.page.clone();
        page.insert("status_public".into(), Value::Bool(true));
        Document { members, page }
    }

    /// The traffic listener's document as JSON text: `routing` first, then the members in
    /// order; each upstream on a line of its own, each member of `health_checks` too.
    pub fn text(&self, routing: RoutingMode, addresses: Addresses) -> String {
        format!("{{{}}}", self.lines(routing, addresses).join(",\n "))
    }

    /// The status page listener's document: `"role": "status_page"`, then the traffic
    /// listener's, then the page's members as given.
    pub fn page_text(&self, routing: RoutingMode, addresses: Addresses) -> String {
        let role = member("role", &Value::String("status_page".into()));
        let page = self.page.iter().map(|(key, value)| member(key, value));
        let lines: Vec<String> = std::iter::once(role)
            .chain(self.lines(routing, addresses))
            .chain(page)
            .collect();
        format!("{{{}}}", lines.join(",\n "))
    }

    fn lines(&self, routing: RoutingMode, addresses: Addresses) -> Vec<String> {
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
        lines
    }
}

/// `upstream` without its `address`, its `cluster` set to `cluster`.
fn with_cluster(upstream: &Value, cluster: &str) -> Value {
    match without_address(upstream) {
        Value::Object(mut fields) => {
            fields.insert("cluster".into(), Value::String(cluster.into()));
            Value::Object(fields)
        }
        other => other,
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
                "jitter": "1s"}"#,
        );
        assert_eq!(
            doc.text(RoutingMode::Host, Addresses::Keep),
            r#"{"routing": "host",
 "upstreams": [{"name": "app1", "address": "127.0.0.1:3001"},
               {"name": "app2", "address": "127.0.0.1:3002"}],
 "health_checks": {
   "active": {"path": "/up", "interval": 10000000000, "timeout": "5s"},
   "passive": {"fail_duration": 10000000000, "max_fails": 3}},
 "jitter": "1s"}"#
        );
        assert_eq!(
            doc.text(RoutingMode::Cluster, Addresses::Drop),
            r#"{"routing": "cluster",
 "upstreams": [{"name": "app1"},
               {"name": "app2"}],
 "health_checks": {
   "active": {"path": "/up", "interval": 10000000000, "timeout": "5s"},
   "passive": {"fail_duration": 10000000000, "max_fails": 3}},
 "jitter": "1s"}"#
        );
    }

    #[test]
    fn the_status_pages_document_is_the_pools_with_its_role_first_and_its_own_members_last() {
        let doc = document(
            r#"{"status_path": "/lb", "upstreams": [{"name": "app1", "address": "127.0.0.1:3001"}],
                "status_public": false, "max_ejection_percent": 40}"#,
        );
        let traffic = doc.text(RoutingMode::Cluster, Addresses::Drop);
        assert_eq!(
            traffic,
            r#"{"routing": "cluster",
 "upstreams": [{"name": "app1"}],
 "max_ejection_percent": 40}"#
        );
        let page = doc.page_text(RoutingMode::Cluster, Addresses::Drop);
        assert_eq!(
            page,
            r#"{"role": "status_page",
 "routing": "cluster",
 "upstreams": [{"name": "app1"}],
 "max_ejection_percent": 40,
 "status_path": "/lb",
 "status_public": false}"#
        );
        let page = Config::parse(page.as_bytes()).expect("the module reads it");
        let traffic = Config::parse(traffic.as_bytes()).expect("the module reads it");
        assert_eq!(page.status_page().map(|p| p.path.as_str()), Some("/lb"));
        assert_eq!(
            (
                page.upstreams,
                page.health_checks,
                page.max_ejection_percent
            ),
            (
                traffic.upstreams,
                traffic.health_checks,
                traffic.max_ejection_percent
            ),
            "the same pool"
        );
    }

    #[test]
    fn an_input_naming_a_role_is_refused_since_both_documents_are_written_from_it() {
        let error =
            read(br#"{"role": "status_page", "upstreams": [{"name": "a"}]}"#).expect_err("a role");
        assert!(
            error
                .to_string()
                .starts_with("role: upcheck envoy writes both listeners' configurations"),
            "{error}"
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
