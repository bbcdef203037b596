//! The grammars of the configuration's values: each reads one field's JSON (through
//! [`super::json::read`]) and refuses with the reason what the field cannot hold. They are
//! `deserialize_with` functions named for what they read; what a value must be within, and what
//! spans fields, is checked afterwards by [`super::validate`].

use super::json::{or_off, read, text, whole, Found, Refusal};
use super::{
    LogFormat, LogLevel, Proxy, RoutingMode, MAX_EXPECT_BODY_LEN, MAX_NAME_LEN, MAX_POOL_LEN,
    MAX_VALUE_LEN,
};
use serde::Deserializer;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

const A_STRING: &str = "a string";
const A_WHOLE_NUMBER: &str = "a whole number";

/// An unsigned integer type a count is read into.
pub trait Count: TryFrom<u64> {
    const MAX: u64;
}

impl Count for u8 {
    const MAX: u64 = u8::MAX as u64;
}

impl Count for u32 {
    const MAX: u64 = u32::MAX as u64;
}

impl Count for u64 {
    const MAX: u64 = u64::MAX;
}

/// A whole number that fits `T`; the range the field takes is checked by
/// [`super::validate`].
pub fn count<'de, D: Deserializer<'de>, T: Count>(d: D) -> Result<T, D::Error> {
    read(d, A_WHOLE_NUMBER, |found| {
        let n = whole(found)?;
        T::try_from(n).map_err(|_| format!("must be at most {}, got {n}", T::MAX).into())
    })
}

fn percentage(found: Found) -> Result<u8, Refusal> {
    let n = whole(found)?;
    match u8::try_from(n) {
        Ok(p) if p <= 100 => Ok(p),
        _ => Err(format!("must be a percentage 0-100, got {n}").into()),
    }
}

/// A percentage, 0-100.
pub fn percent<'de, D: Deserializer<'de>>(d: D) -> Result<u8, D::Error> {
    read(d, A_WHOLE_NUMBER, percentage)
}

/// A percentage, or `null` for off.
pub fn percent_or_off<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u8>, D::Error> {
    read(d, A_WHOLE_NUMBER, |found| or_off(found, percentage))
}

/// `true` or `false`.
pub fn flag<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    read(d, "true or false", |found| match found {
        Found::Bool(b) => Ok(b),
        other => Err(Refusal::Kind(other)),
    })
}

/// A duration that is given, but cannot be off (`jitter`).
pub fn some_duration<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<std::time::Duration>, D::Error> {
    super::duration::deserialize(d).map(Some)
}

/// `routing`: `"cluster"` or `"host"`.
pub fn routing<'de, D: Deserializer<'de>>(d: D) -> Result<RoutingMode, D::Error> {
    read(d, A_STRING, |found| match text(found)?.as_str() {
        "cluster" => Ok(RoutingMode::Cluster),
        "host" => Ok(RoutingMode::Host),
        other => Err(format!("expected \"cluster\" or \"host\", got {other:?}").into()),
    })
}

/// `proxy`: `"envoy"` or `"nginx"`.
pub fn proxy<'de, D: Deserializer<'de>>(d: D) -> Result<Proxy, D::Error> {
    read(d, A_STRING, |found| match text(found)?.as_str() {
        "envoy" => Ok(Proxy::Envoy),
        "nginx" => Ok(Proxy::Nginx),
        other => Err(format!("expected \"envoy\" or \"nginx\", got {other:?}").into()),
    })
}

/// `log_level`: `"trace"`, `"debug"`, `"info"`, `"warn"`, `"error"` or `"off"`.
pub fn log_level<'de, D: Deserializer<'de>>(d: D) -> Result<LogLevel, D::Error> {
    read(d, A_STRING, |found| match text(found)?.as_str() {
        "trace" => Ok(LogLevel::Trace),
        "debug" => Ok(LogLevel::Debug),
        "info" => Ok(LogLevel::Info),
        "warn" => Ok(LogLevel::Warn),
        "error" => Ok(LogLevel::Error),
        "off" => Ok(LogLevel::Off),
        other => Err(format!(
            "expected \"trace\", \"debug\", \"info\", \"warn\", \"error\" or \"off\", got {other:?}"
        )
        .into()),
    })
}

/// `log_format`: `"text"` or `"json"`.
pub fn log_format<'de, D: Deserializer<'de>>(d: D) -> Result<LogFormat, D::Error> {
    read(d, A_STRING, |found| match text(found)?.as_str() {
        "text" => Ok(LogFormat::Text),
        "json" => Ok(LogFormat::Json),
        other => Err(format!("expected \"text\" or \"json\", got {other:?}").into()),
    })
}

/// `role`: whether the configuration serves the status page (`"status_page"`) or routes
/// traffic (`"traffic"`).
pub fn serves_page<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    read(d, A_STRING, |found| match text(found)?.as_str() {
        "traffic" => Ok(false),
        "status_page" => Ok(true),
        other => Err(format!("expected \"traffic\" or \"status_page\", got {other:?}").into()),
    })
}

/// RFC 9110 `tchar`: what a header name may hold.
fn is_tchar(c: char) -> bool {
    c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c)
}

/// What an upstream name or cluster may hold: a token, and `:` (a cluster such as `app:8080`;
/// both travel in header values, never as a header name).
fn is_name_char(c: char) -> bool {
    is_tchar(c) || c == ':'
}

/// A non-empty word of at most `max` bytes, each character `allowed`.
fn word(text: &str, allowed: fn(char) -> bool, max: usize) -> Result<(), String> {
    if text.is_empty() {
        return Err("must not be empty".into());
    }
    if text.len() > max {
        return Err(format!(
            "must be at most {max} bytes long, got {}",
            text.len()
        ));
    }
    match text.chars().find(|c| !allowed(*c)) {
        Some(c) => Err(format!("{text:?} contains {c:?}, which is not allowed")),
        None => Ok(()),
    }
}

/// `upstreams[].note`: printable ASCII (no control character, so nothing that breaks a log line
/// or a page), at most [`MAX_NOTE_LEN`](crate::MAX_NOTE_LEN) bytes, or `null`.
pub fn note<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    read(d, "a string or null", |found| {
        or_off(found, |found| {
            let note = text(found)?;
            word(
                &note,
                |c| matches!(c, ' '..='~'),
                crate::limits::MAX_NOTE_LEN,
            )?;
            Ok(note)
        })
    })
}

/// A probe header's name: a token of at most [`MAX_NAME_LEN`] bytes.
pub fn header_name(name: &str) -> Result<(), String> {
    word(name, is_tchar, MAX_NAME_LEN)
}

/// A header value (or anything sent as one): at most [`MAX_VALUE_LEN`] bytes, no control
/// characters that could split a header.
pub fn header_value(text: String) -> Result<String, Refusal> {
    if text.len() > MAX_VALUE_LEN {
        return Err(format!(
            "must be at most {MAX_VALUE_LEN} bytes long, got {}",
            text.len()
        )
        .into());
    }
    match text.chars().find(|c| c.is_control()) {
        Some(c) => Err(format!("contains the control character {c:?}").into()),
        None => Ok(text),
    }
}

/// A request path: a header value of visible ASCII only (anything else must be
/// percent-encoded).
fn request_path(text: String) -> Result<String, Refusal> {
    let text = header_value(text)?;
    match text.chars().find(|c| !c.is_ascii_graphic()) {
        Some(c) => Err(format!(
            "{text:?} contains {c:?}, which is not allowed in a path (percent-encode it)"
        )
        .into()),
        None => Ok(text),
    }
}

fn name(found: Found) -> Result<String, Refusal> {
    let name = text(found)?;
    word(&name, is_name_char, MAX_NAME_LEN)?;
    Ok(name)
}

/// An upstream's name: a token (`:` allowed) of at most [`MAX_NAME_LEN`] bytes.
pub fn upstream_name<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    read(d, A_STRING, name)
}

/// An upstream's cluster, as its name.
pub fn cluster<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    read(d, A_STRING, |found| name(found).map(Some))
}

/// A cluster's name, or `null` for none.
pub fn cluster_or_none<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    read(d, "a string or null", |found| or_off(found, name))
}

/// `route_header`: a header name, not a pseudo-header.
pub fn route_header<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    read(d, A_STRING, |found| {
        let header = text(found)?;
        if header.starts_with(':') {
            return Err("must not be a pseudo-header".into());
        }
        word(&header, is_tchar, MAX_NAME_LEN)?;
        Ok(header)
    })
}

/// `pool`: a name for the `pool` label of the pool's metrics, which Envoy's tag rule reads as
/// letters, digits, `_` and `-` (the policy's `series`), or `null` for none.
pub fn pool<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    read(d, A_STRING, |found| {
        or_off(found, |found| {
            let pool = text(found)?;
            word(
                &pool,
                |c| c.is_ascii_alphanumeric() || c == '_' || c == '-',
                MAX_POOL_LEN,
            )?;
            Ok(pool)
        })
    })
}

/// `health_checks.active.path` (or Caddy's `uri`): a request path starting with `/`.
pub fn probe_path<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    read(d, A_STRING, |found| {
        let path = text(found)?;
        if !path.starts_with('/') {
            return Err(format!("must start with '/', got {path:?}").into());
        }
        request_path(path)
    })
}

/// `grpc.service`: the name a gRPC server reports a service's health under (`""`: the server as
/// a whole), sent as it is in the health request: visible ASCII, at most
/// [`MAX_VALUE_LEN`](crate::MAX_VALUE_LEN) bytes.
pub fn grpc_service<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    read(d, A_STRING, |found| {
        let service = header_value(text(found)?)?;
        match service.chars().find(|c| !c.is_ascii_graphic()) {
            Some(c) => Err(format!("{service:?} contains {c:?}, which no service name has").into()),
            None => Ok(service),
        }
    })
}

/// `status_path`: where the status page is; it cannot be `null`, and the reason says why.
pub fn status_path<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    read(d, A_STRING, |found| {
        if let Found::Null = found {
            return Err(
                "the status page cannot be turned off here: it is served only by a \
                        configuration with \"role\": \"status_page\", on a listener of its own, \
                        so leave that listener out to have none, and leave this field out for \
                        its default (/upcheck/status)"
                    .into(),
            );
        }
        let path = text(found)?;
        if !path.starts_with('/') || path.contains(['?', '#']) {
            return Err(format!("must be a path like \"/upcheck/status\", got {path:?}").into());
        }
        request_path(path).map(Some)
    })
}

/// `health_checks.active.expect_body`: a non-empty substring of at most
/// [`MAX_EXPECT_BODY_LEN`] bytes, or `null` for none.
pub fn expect_body<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    read(d, A_STRING, |found| {
        or_off(found, |found| {
            let body = text(found)?;
            if body.is_empty() {
                return Err("must not be empty".into());
            }
            if body.len() > MAX_EXPECT_BODY_LEN {
                return Err(format!(
                    "must be at most {MAX_EXPECT_BODY_LEN} bytes long, got {}",
                    body.len()
                )
                .into());
            }
            Ok(body)
        })
    })
}

/// A port as digits alone: 1-65535, no sign, no leading zeros.
fn port_number(text: &str) -> Option<u16> {
    let digits = !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
    if !digits || text.starts_with('0') {
        return None;
    }
    text.parse().ok()
}

/// What a registered name (RFC 3986 `reg-name`, without percent-encoding) may hold.
fn is_reg_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "-._~!$&'()*+,;=".contains(c)
}

/// `host[:port]` as `:authority` carries it: a registered name, an IPv4 address or a bracketed
/// IPv6 address, then optionally a port. Also what an upstream's name must be to stand in for
/// its authority.
pub fn check_authority(text: &str) -> Result<(), String> {
    if text.is_empty() {
        return Err("must not be empty".into());
    }
    if text.len() > MAX_VALUE_LEN {
        return Err(format!(
            "must be at most {MAX_VALUE_LEN} bytes long, got {}",
            text.len()
        ));
    }
    let (host_ok, port) = match text.strip_prefix('[') {
        Some(bracketed) => match bracketed.split_once(']') {
            Some((v6, rest)) => (
                v6.parse::<Ipv6Addr>().is_ok(),
                (!rest.is_empty()).then_some(rest.strip_prefix(':')),
            ),
            None => (false, None),
        },
        None => {
            let (host, port) = match text.split_once(':') {
                Some((host, port)) => (host, Some(Some(port))),
                None => (text, None),
            };
            (!host.is_empty() && host.chars().all(is_reg_name_char), port)
        }
    };
    let port_ok = match port {
        None => true,
        Some(port) => port.and_then(port_number).is_some(),
    };
    if host_ok && port_ok {
        Ok(())
    } else {
        Err(format!(
            "expected host or host:port (a host name, an IPv4 address or a bracketed IPv6 \
             address; a port 1-65535), got {text:?}"
        ))
    }
}

/// An upstream's `authority`.
pub fn authority<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    read(d, A_STRING, |found| {
        let authority = text(found)?;
        check_authority(&authority)?;
        Ok(Some(authority))
    })
}

/// An IPv4 address as a dotted quad: four parts 0-255, no sign, no leading zeros.
fn ipv4(text: &str) -> Option<Ipv4Addr> {
    let mut octets = [0u8; 4];
    let mut parts = text.split('.');
    for octet in &mut octets {
        let part = parts.next()?;
        let digits = !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit());
        if !digits || (part.len() > 1 && part.starts_with('0')) {
            return None;
        }
        *octet = part.parse().ok()?;
    }
    parts.next().is_none().then_some(Ipv4Addr::from(octets))
}

/// `ip:port`, kept in canonical form (as Envoy reports addresses, and so two spellings of one
/// address are one address).
fn ip_port(text: String) -> Result<String, String> {
    let expected =
        || format!("expected ip:port like \"10.0.0.1:8080\" or \"[::1]:8080\", got {text:?}");
    let (host, port) = match text.strip_prefix('[') {
        Some(bracketed) => bracketed.split_once("]:").map(|(v6, port)| (Err(v6), port)),
        None => text.rsplit_once(':').map(|(v4, port)| (Ok(v4), port)),
    }
    .ok_or_else(expected)?;
    let port = port_number(port).ok_or_else(|| {
        format!(
            "{}: the port must be 1-65535, without sign or leading zeros",
            expected()
        )
    })?;
    let ip = match host {
        Err(v6) => IpAddr::V6(
            v6.parse()
                .map_err(|_| format!("{}: {v6:?} is not an IPv6 address", expected()))?,
        ),
        Ok(v4) => IpAddr::V4(ipv4(v4).ok_or_else(|| {
            format!(
                "{}: {v4:?} is not an IP address (Envoy's override_host compares IP \
                 addresses, so a host name never matches)",
                expected()
            )
        })?),
    };
    Ok(SocketAddr::new(ip, port).to_string())
}

/// An upstream's `address`: `ip:port` in canonical form, or `null` for none.
pub fn address<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    read(d, A_STRING, |found| {
        or_off(found, |found| Ok(ip_port(text(found)?)?))
    })
}
