//! Caddy's JSON (what `GET /config/` on its admin API returns) as an upcheck plugin configuration.
//!
//! The one `reverse_proxy` handler, wherever it sits (a server's routes, a `subroute`, an error
//! route), gives the backends and their checks. Its `upstreams[].dial` addresses become the
//! backends, named `app1`, `app2`, … in Caddy's order: names made from addresses would change
//! with every address (and every metric and log line with them), and are not valid cluster names
//! as they stand. Its `health_checks` become upcheck's field for field, as written; where Caddy's
//! default differs and upcheck can say the same, Caddy's value is written (`interval` 30 s, and
//! `max_fails` 1 once `fail_duration` turns passive checks on). A probe `Host` header becomes each
//! backend's probe authority, `port` the port of its probe cluster (host routing).
//!
//! What upcheck cannot honour is refused with the JSON path and what to do, never approximated:
//! several handlers, upstreams looked up at run time, placeholders, Unix sockets, TLS or FastCGI
//! backends, a regular expression as `expect_body` (one without metacharacters moves over as
//! its text), and the fields with no upcheck equivalent (`method` other than GET, `body`,
//! `follow_redirects`, `upstream`, `unhealthy_request_count`, an upstream's `max_requests`).
//! Everything else the handler says (load balancing, retries, header rewriting) is Caddy's
//! routing, not health, and is not read.

use serde_json::{Map, Value};
use upcheck_policy::ConfigError;

use crate::plugin::{compact, Document, Origins, Source};
use crate::regex_text::plain_text;
use crate::{input, refuse};

/// Caddy's `health_checks.active.interval` when its configuration leaves it out.
const CADDY_INTERVAL: &str = "30s";
/// Caddy's `health_checks.passive.max_fails` when its configuration leaves it out.
const CADDY_MAX_FAILS: u64 = 1;

/// Reads Caddy's JSON configuration and turns its `reverse_proxy` handler into a plugin
/// configuration.
pub fn import(bytes: &[u8]) -> Result<Source, ConfigError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(refuse(
            "",
            "empty; save Caddy's configuration with `curl localhost:2019/config/ > caddy.json`",
        ));
    }
    let document = input::parse(bytes)?;
    match &document {
        Value::Object(_) => {}
        Value::Null => {
            return Err(refuse(
                "",
                "null: Caddy answers that when it has no configuration loaded",
            ))
        }
        _ => {
            return Err(refuse(
                "",
                "not a Caddy configuration: expected a JSON object",
            ))
        }
    }
    if present(&document, "upstreams").is_some() && present(&document, "apps").is_none() {
        return Err(refuse(
            "upstreams",
            "this is an upcheck plugin configuration, not Caddy's: read it without --from-caddy",
        ));
    }
    let servers = present(&document, "apps")
        .and_then(|apps| present(apps, "http"))
        .and_then(|http| present(http, "servers"));
    if servers.is_none() {
        return Err(refuse(
            "apps.http.servers",
            "missing, so this is not a Caddy configuration with an HTTP server; \
             save Caddy's with `curl localhost:2019/config/ > caddy.json`",
        ));
    }
    let mut found = Vec::new();
    handlers(&document, "", &mut found);
    match found.as_slice() {
        [] => Err(refuse(
            "apps.http.servers",
            "no reverse_proxy handler; upcheck moves the backends of a reverse_proxy and its \
             health checks",
        )),
        [(at, handler)] => translate(at, handler),
        [(first, _), (second, _), ..] => Err(refuse(
            second.clone(),
            format!(
                "one of {} reverse_proxy handlers (the first is at {first}); upcheck moves one \
                 pool of backends: give it a copy of the configuration that keeps only the \
                 reverse_proxy to move",
                found.len()
            ),
        )),
    }
}

/// A member that is there and not null (Caddy leaves out what is not set; null means the same).
fn present<'a>(value: &'a Value, key: &str) -> Option<&'a Value> {
    value.get(key).filter(|v| !v.is_null())
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

/// Every object under `value` whose `handler` is `reverse_proxy`, with its path.
fn handlers<'a>(value: &'a Value, path: &str, found: &mut Vec<(String, &'a Value)>) {
    match value {
        Value::Object(members) => {
            if matches!(value.get("handler"), Some(Value::String(h)) if h == "reverse_proxy") {
                found.push((path.to_owned(), value));
            }
            for (key, member) in members {
                handlers(member, &join(path, key), found);
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                handlers(item, &format!("{path}[{i}]"), found);
            }
        }
        _ => {}
    }
}

/// The plugin configuration of the `reverse_proxy` handler at `at`.
fn translate(at: &str, handler: &Value) -> Result<Source, ConfigError> {
    if present(handler, "dynamic_upstreams").is_some() {
        return Err(refuse(
            join(at, "dynamic_upstreams"),
            "upstreams looked up while Caddy runs; upcheck needs each backend's address: list \
             them in `upstreams` instead",
        ));
    }
    transport(at, handler)?;
    let mut origins = Origins::default();
    let checks = health_checks(at, handler, &mut origins)?;
    let upstreams = upstreams(at, handler, checks.authority.as_ref(), &mut origins)?;
    Ok(Source {
        document: Document::new(Map::from_iter([
            ("upstreams".to_owned(), upstreams),
            ("health_checks".to_owned(), checks.block),
        ])),
        routing: None,
        origins,
        probe_port: checks.probe_port,
        part: Some(format!(
            "the reverse_proxy handler at {at}, its upstreams named app1, app2, … in order"
        )),
    })
}

/// Refuses backends the Envoy configuration cannot speak to: it speaks plain HTTP.
fn transport(at: &str, handler: &Value) -> Result<(), ConfigError> {
    let Some(transport) = present(handler, "transport") else {
        return Ok(());
    };
    let at = join(at, "transport");
    if let Some(Value::String(protocol)) = present(transport, "protocol") {
        if protocol != "http" {
            return Err(refuse(
                join(&at, "protocol"),
                format!(
                    "backends spoken to over {protocol}; the clusters upcheck writes speak HTTP \
                     to them: move a pool of HTTP backends"
                ),
            ));
        }
    }
    if present(transport, "tls").is_some() {
        return Err(refuse(
            join(&at, "tls"),
            "backends reached over TLS; the clusters upcheck writes speak plain HTTP: reach the \
             backends over plain HTTP, or add a transport_socket to each cluster of the written \
             file",
        ));
    }
    Ok(())
}

/// The backends: `upstreams[].dial` as `address`, named app1, app2, … in order.
fn upstreams(
    at: &str,
    handler: &Value,
    authority: Option<&Authority>,
    origins: &mut Origins,
) -> Result<Value, ConfigError> {
    let path = join(at, "upstreams");
    let items =
        match present(handler, "upstreams") {
            Some(Value::Array(items)) if !items.is_empty() => items,
            Some(Value::Array(_)) | None => return Err(refuse(
                path,
                "no upstreams; upcheck needs each backend's address, as `{\"dial\": \"ip:port\"}`",
            )),
            Some(_) => {
                return Err(refuse(
                    path,
                    "expected a list of upstreams like [{\"dial\": \"10.0.0.5:3000\"}]",
                ))
            }
        };
    let mut upstreams = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let item_path = format!("{path}[{i}]");
        let Value::Object(fields) = item else {
            return Err(refuse(
                item_path,
                "expected an upstream like {\"dial\": \"10.0.0.5:3000\"}",
            ));
        };
        if let Some((key, _)) = fields
            .iter()
            .find(|(key, value)| *key != "dial" && !value.is_null())
        {
            let reason = if key == "max_requests" {
                "a limit on requests in flight to this backend; upcheck has no equivalent \
                 (Envoy's circuit breakers limit a whole cluster): remove it"
            } else {
                "not something upcheck can move: an upstream moves with its `dial` only"
            };
            return Err(refuse(join(&item_path, key), reason));
        }
        let dial_path = join(&item_path, "dial");
        let Some(dial) = present(item, "dial") else {
            return Err(refuse(
                dial_path,
                "missing; upcheck needs the backend's address",
            ));
        };
        let mut upstream = Map::from_iter([
            ("name".to_owned(), Value::String(format!("app{}", i + 1))),
            (
                "address".to_owned(),
                Value::String(address(&dial_path, dial)?),
            ),
        ]);
        if let Some(authority) = authority {
            upstream.insert("authority".into(), Value::String(authority.host.clone()));
            origins.add(format!("upstreams[{i}].authority"), authority.path.clone());
        }
        origins.add(format!("upstreams[{i}]"), item_path);
        origins.add(format!("upstreams[{i}].address"), dial_path);
        upstreams.push(Value::Object(upstream));
    }
    Ok(Value::Array(upstreams))
}

/// The `host:port` of a `dial` (a `tcp/` network prefix is dropped); its form is checked with the
/// rest of the configuration, by the module.
fn address(path: &str, dial: &Value) -> Result<String, ConfigError> {
    let Value::String(dial) = dial else {
        return Err(refuse(path, "expected an address like \"10.0.0.5:3000\""));
    };
    if placeholder(dial) {
        return Err(refuse(
            path,
            format!(
                "{dial:?} holds a placeholder, which Caddy fills in as it runs; upcheck needs \
                 the address itself: write it in"
            ),
        ));
    }
    match dial.split_once('/') {
        None => Ok(dial.clone()),
        Some(("tcp" | "tcp4" | "tcp6", address)) => Ok(address.to_owned()),
        Some(("unix" | "unixgram" | "unixpacket", _)) => Err(refuse(
            path,
            format!(
                "{dial:?} is a Unix socket; the Envoy configuration reaches backends over TCP: \
                 have the backend listen on a TCP port and dial that"
            ),
        )),
        Some((network, _)) => Err(refuse(
            path,
            format!("{dial:?} is on the {network} network; upcheck's backends speak HTTP over TCP"),
        )),
    }
}

/// The handler's `health_checks`, as upcheck reads them.
struct Checks {
    /// The plugin configuration's `health_checks`.
    block: Value,
    /// Caddy's `active.port`.
    probe_port: Option<u16>,
    /// Caddy's probe `Host` header.
    authority: Option<Authority>,
}

fn health_checks(at: &str, handler: &Value, origins: &mut Origins) -> Result<Checks, ConfigError> {
    let path = join(at, "health_checks");
    let no_active = || {
        refuse(
            join(&path, "active"),
            "missing; Caddy runs no active checks here, but upcheck always probes every \
             backend (GET /up every 10s unless told otherwise): add an `active` block with the \
             `uri` your app answers when it is up",
        )
    };
    let Some(original) = present(handler, "health_checks") else {
        return Err(no_active());
    };
    origins.add("health_checks", path.clone());
    let Value::Object(blocks) = original else {
        // Not an object: the module says so, at this path.
        return Ok(Checks {
            block: original.clone(),
            probe_port: None,
            authority: None,
        });
    };
    if present(original, "active").is_none() {
        return Err(no_active());
    }
    let (mut block, mut probe_port, mut authority) = (Map::new(), None, None);
    for (key, value) in blocks {
        let block_path = join(&path, key);
        match (key.as_str(), value) {
            (_, Value::Null) => {}
            ("active", Value::Object(fields)) => {
                let active = active(&block_path, fields)?;
                (probe_port, authority) = (active.probe_port, active.authority);
                block.insert(key.clone(), Value::Object(active.fields));
            }
            ("passive", Value::Object(fields)) => {
                block.insert(key.clone(), Value::Object(passive(&block_path, fields)?));
            }
            _ => {
                block.insert(key.clone(), value.clone());
            }
        }
    }
    Ok(Checks {
        block: Value::Object(block),
        probe_port,
        authority,
    })
}

/// Caddy's `health_checks.active`, as upcheck reads it.
struct Active {
    fields: Map<String, Value>,
    probe_port: Option<u16>,
    authority: Option<Authority>,
}

/// Caddy's probe `Host` header, which becomes each backend's probe authority.
struct Authority {
    /// Where it is in Caddy's JSON.
    path: String,
    /// Its value.
    host: String,
}

fn active(path: &str, fields: &Map<String, Value>) -> Result<Active, ConfigError> {
    let mut active = Active {
        fields: Map::new(),
        probe_port: None,
        authority: None,
    };
    for (key, value) in fields {
        let at = join(path, key);
        match (key.as_str(), value) {
            (_, Value::Null) => {}
            ("method", Value::String(method)) if method.eq_ignore_ascii_case("GET") => {}
            ("method", _) => {
                return Err(refuse(
                    at,
                    "upcheck probes with GET, as a health path answers it: remove `method`",
                ))
            }
            ("body", Value::String(body)) if body.is_empty() => {}
            ("body", _) => return Err(refuse(at, "upcheck's probes carry no body: remove it")),
            ("follow_redirects", Value::Bool(false)) => {}
            ("follow_redirects", _) => {
                return Err(refuse(
                    at,
                    "upcheck's probes do not follow redirects: set `uri` to where the redirect \
                     leads, and remove `follow_redirects`",
                ))
            }
            ("upstream", _) => {
                return Err(refuse(
                    at,
                    "probes every backend at one address; upcheck probes each backend itself: \
                     remove it (`port` probes another port of each backend)",
                ))
            }
            ("port", _) => {
                let port = value
                    .as_u64()
                    .and_then(|port| u16::try_from(port).ok())
                    .filter(|p| *p > 0);
                active.probe_port = Some(port.ok_or_else(|| {
                    refuse(
                        &at,
                        format!("expected a port number 1-65535, got {}", compact(value)),
                    )
                })?);
            }
            ("headers", Value::Object(headers)) => probe_headers(&mut active, &at, headers)?,
            ("expect_body", Value::String(regex)) => {
                let text = plain_text(regex).map_err(|meta| {
                    refuse(
                        &at,
                        format!(
                            "{regex:?} is a regular expression (it uses `{meta}`); upcheck looks \
                             for plain text in the body: write the text every healthy answer \
                             contains (a backslash before punctuation stands for the character)"
                        ),
                    )
                })?;
                active.fields.insert(key.clone(), Value::String(text));
            }
            _ => {
                active.fields.insert(key.clone(), value.clone());
            }
        }
    }
    let has = |name: &str| active.fields.contains_key(name);
    if !has("uri") && !has("path") {
        return Err(refuse(
            join(path, "uri"),
            "missing; give the path upcheck probes on every backend, e.g. \"/up\" (Caddy probes \
             nothing without it)",
        ));
    }
    if !has("interval") {
        active
            .fields
            .insert("interval".into(), Value::String(CADDY_INTERVAL.into()));
    }
    Ok(active)
}

/// Caddy's probe headers into `active`: `Host` as its authority, the others as `headers`. A
/// placeholder is refused: Caddy fills it in, the module would send it as written.
fn probe_headers(
    active: &mut Active,
    at: &str,
    headers: &Map<String, Value>,
) -> Result<(), ConfigError> {
    let mut kept = Map::new();
    for (name, values) in headers {
        let header = join(at, name);
        let texts = match values {
            Value::Array(values) => values.iter().collect(),
            value => vec![value],
        };
        if let Some(Value::String(text)) = texts
            .into_iter()
            .find(|v| matches!(v, Value::String(t) if placeholder(t)))
        {
            return Err(refuse(
                header,
                format!(
                    "{text:?} holds a placeholder, which Caddy fills in as it runs; upcheck \
                     sends header values as written: write the value in"
                ),
            ));
        }
        if name.eq_ignore_ascii_case("host") {
            let host = match values {
                Value::String(host) => host,
                Value::Array(values) => match values.as_slice() {
                    [Value::String(host)] => host,
                    _ => return Err(one_host(header)),
                },
                _ => return Err(one_host(header)),
            };
            active.authority = Some(Authority {
                path: header,
                host: host.clone(),
            });
        } else {
            kept.insert(name.clone(), values.clone());
        }
    }
    if !kept.is_empty() {
        active.fields.insert("headers".into(), Value::Object(kept));
    }
    Ok(())
}

/// Whether `text` holds a Caddy placeholder (`{env.APP}`, `{http.request.host}`).
fn placeholder(text: &str) -> bool {
    text.find('{')
        .is_some_and(|open| text[open..].contains('}'))
}

fn one_host(path: String) -> ConfigError {
    refuse(
        path,
        "expected one value: it becomes the `:authority` of every probe",
    )
}

/// Caddy's `health_checks.passive`.
fn passive(path: &str, fields: &Map<String, Value>) -> Result<Map<String, Value>, ConfigError> {
    let mut passive = Map::new();
    for (key, value) in fields {
        match (key.as_str(), value) {
            (_, Value::Null) => {}
            ("unhealthy_request_count", _) => {
                return Err(refuse(
                    join(path, key),
                    "marks a backend down while it has this many requests in flight; upcheck \
                     has no equivalent (Envoy's circuit breakers limit a whole cluster): remove it",
                ))
            }
            _ => {
                passive.insert(key.clone(), value.clone());
            }
        }
    }
    if passive.contains_key("fail_duration") && !passive.contains_key("max_fails") {
        passive.insert("max_fails".into(), Value::from(CADDY_MAX_FAILS));
    }
    Ok(passive)
}
