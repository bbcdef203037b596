//! etcd's JSON gateway (v3, as etcd 3.4 serves it): the requests the fleet makes, as bodies,
//! and its answers, read as untrusted input.
//!
//! Shapes checked against a real etcd 3.4.23: keys and values are base64; int64 fields (lease
//! IDs, TTLs, revisions) are decimal strings; a field at its default is left out (a failed
//! transaction has no `succeeded`, an empty range no `kvs`, the keepalive of a lease that is
//! gone answers no `TTL`); the keepalive's answer is wrapped in `result`; an error is
//! `{"error": …, "code": …}`. Bodies are written with `format!`: every value in them is base64, a
//! number or a string escaped by [`quoted`], so nothing in a key or a password can break out.

use super::json::{self, Json};
pub use super::keys::prefix_end;
use crate::json_string::quoted;

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// `bytes` in standard base64, padded.
pub fn base64(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk.first().copied().unwrap_or(0),
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                let six = usize::try_from((n >> (18 - 6 * i)) & 63).unwrap_or(0);
                out.push(char::from(ALPHABET.get(six).copied().unwrap_or(b'A')));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Reads standard base64 (padded or not); `None` for anything else.
pub fn unbase64(text: &str) -> Option<Vec<u8>> {
    let text = text.trim_end_matches('=');
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let mut acc: u32 = 0;
    let mut bits = 0;
    for c in text.bytes() {
        let six = ALPHABET.iter().position(|a| *a == c)?;
        acc = (acc << 6) | u32::try_from(six).ok()?;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push(u8::try_from((acc >> bits) & 0xff).ok()?);
        }
    }
    (bits < 6).then_some(out)
}

/// `POST /v3/auth/authenticate`.
pub fn authenticate(user: &str, password: &str) -> String {
    format!(
        "{{\"name\":{},\"password\":{}}}",
        quoted(user),
        quoted(password)
    )
}

/// `POST /v3/lease/grant`: a lease of `ttl` seconds.
pub fn grant(ttl: u64) -> String {
    format!("{{\"TTL\":\"{ttl}\"}}")
}

/// `POST /v3/lease/keepalive`.
pub fn keepalive(lease: i64) -> String {
    format!("{{\"ID\":\"{lease}\"}}")
}

/// `POST /v3/kv/put`: `value` at `key`, kept while `lease` lives.
pub fn put(key: &str, value: &[u8], lease: i64) -> String {
    format!(
        "{{\"key\":\"{}\",\"value\":\"{}\",\"lease\":\"{lease}\"}}",
        base64(key.as_bytes()),
        base64(value)
    )
}

/// `POST /v3/kv/txn`: `value` at `key` with `lease`, only if `key` does not exist.
pub fn create(key: &str, value: &[u8], lease: i64) -> String {
    let key = base64(key.as_bytes());
    format!(
        "{{\"compare\":[{{\"target\":\"CREATE\",\"key\":\"{key}\",\"create_revision\":\"0\"}}],\
         \"success\":[{{\"request_put\":{{\"key\":\"{key}\",\"value\":\"{}\",\"lease\":\"{lease}\"}}}}]}}",
        base64(value)
    )
}

/// `POST /v3/kv/txn`: deletes `key` only if its value is `value`.
pub fn delete_if(key: &str, value: &[u8]) -> String {
    let key = base64(key.as_bytes());
    format!(
        "{{\"compare\":[{{\"target\":\"VALUE\",\"key\":\"{key}\",\"value\":\"{}\"}}],\
         \"success\":[{{\"request_delete_range\":{{\"key\":\"{key}\"}}}}]}}",
        base64(value)
    )
}

/// `POST /v3/kv/range`: every key under `prefix`.
pub fn range(prefix: &str) -> String {
    format!(
        "{{\"key\":\"{}\",\"range_end\":\"{}\"}}",
        base64(prefix.as_bytes()),
        base64(&prefix_end(prefix.as_bytes()))
    )
}

/// An answer etcd's gateway gave, or why it is no answer to use.
pub type Read<T> = Result<T, String>;

/// What every answer is checked for first: a 200 whose body is a JSON object without `error`.
fn parsed(status: Option<u16>, body: &[u8]) -> Read<Json> {
    let said = |json: &Json| json.get("error").and_then(Json::text).map(clip);
    match status {
        Some(200) => {}
        Some(status) => {
            let said = json::parse(body)
                .ok()
                .and_then(|j| said(&j))
                .map(|e| format!(": {e}"))
                .unwrap_or_default();
            return Err(format!("etcd answered {status}{said}"));
        }
        None => return Err("no answer (reset or timed out)".into()),
    }
    let answer = json::parse(body).map_err(|e| format!("an answer that does not parse ({e})"))?;
    if !matches!(answer, Json::Object(_)) {
        return Err("an answer that is not a JSON object".into());
    }
    if let Some(e) = said(&answer) {
        return Err(format!("etcd said: {e}"));
    }
    Ok(answer)
}

/// At most 120 characters of what etcd said, for a log line.
fn clip(text: &str) -> String {
    text.chars().take(120).collect()
}

/// An int64 string member, absent as `None`; anything else is an error.
fn int(json: &Json, name: &str) -> Read<Option<i64>> {
    match json.get(name) {
        None => Ok(None),
        Some(Json::Text(text)) => text
            .parse()
            .map(Some)
            .map_err(|_| format!("{name} is not an int64 string")),
        Some(_) => Err(format!("{name} is not an int64 string")),
    }
}

/// The token of an authenticate answer.
pub fn token(status: Option<u16>, body: &[u8]) -> Read<String> {
    let answer = parsed(status, body)?;
    match answer.get("token").and_then(Json::text) {
        Some(token) if !token.is_empty() && token.bytes().all(|b| b.is_ascii_graphic()) => {
            Ok(token.to_owned())
        }
        _ => Err("an authenticate answer without a usable token".into()),
    }
}

/// A grant's lease ID.
pub fn granted(status: Option<u16>, body: &[u8]) -> Read<i64> {
    let answer = parsed(status, body)?;
    match (int(&answer, "ID")?, int(&answer, "TTL")?) {
        (Some(id), Some(ttl)) if id != 0 && ttl > 0 => Ok(id),
        _ => Err("a grant without a lease".into()),
    }
}

/// Whether a keepalive found its lease alive (etcd answers no `TTL` for a lease that is gone).
pub fn kept(status: Option<u16>, body: &[u8]) -> Read<bool> {
    let answer = parsed(status, body)?;
    let ttl = match answer.get("result") {
        Some(result) => int(result, "TTL")?,
        None => None,
    };
    Ok(ttl.is_some_and(|ttl| ttl > 0))
}

/// Whether a transaction's compare held.
pub fn succeeded(status: Option<u16>, body: &[u8]) -> Read<bool> {
    let answer = parsed(status, body)?;
    match answer.get("succeeded") {
        None => Ok(false),
        Some(Json::Bool(b)) => Ok(*b),
        Some(_) => Err("succeeded is not a boolean".into()),
    }
}

/// Whether a put was taken.
pub fn put_taken(status: Option<u16>, body: &[u8]) -> Read<()> {
    parsed(status, body).map(|_| ())
}

/// One key as a range read it: the key, its value, and the lease it lives by (0 for none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyValue {
    /// The key (as text; a key that is not UTF-8 is none of upcheck's).
    pub key: String,
    /// The value's bytes.
    pub value: Vec<u8>,
    /// Its lease's ID.
    pub lease: i64,
}

/// A range answer: the keys, and the store's revision they are as of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Range {
    /// The store's revision at the read: a watch from the next one misses nothing.
    pub revision: i64,
    /// The keys.
    pub kvs: Vec<KeyValue>,
}

/// The keys of a range answer; keys that do not decode are dropped (etcd only returns what was
/// written, so they are not upcheck's), values that do not decode are empty, and so refused
/// later with their key named. An answer without the store's revision is none.
pub fn kvs(status: Option<u16>, body: &[u8]) -> Read<Range> {
    let answer = parsed(status, body)?;
    let revision = answer
        .get("header")
        .map(|header| int(header, "revision"))
        .transpose()?
        .flatten()
        .ok_or("a range answer without the store's revision")?;
    let items = match answer.get("kvs") {
        None => {
            return Ok(Range {
                revision,
                kvs: Vec::new(),
            })
        }
        Some(Json::List(items)) => items,
        Some(_) => return Err("kvs is not a list".into()),
    };
    let kvs = items
        .iter()
        .filter_map(|kv| {
            let key = String::from_utf8(unbase64(kv.get("key")?.text()?)?).ok()?;
            let value = kv
                .get("value")
                .and_then(Json::text)
                .and_then(unbase64)
                .unwrap_or_default();
            let lease = int(kv, "lease").ok().flatten().unwrap_or(0);
            Some(KeyValue { key, value, lease })
        })
        .collect();
    Ok(Range { revision, kvs })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_reads_back_what_it_writes_at_every_padding() {
        for text in ["", "a", "ab", "abc", "abcd", "upcheck/v1/duty/app1@app1"] {
            let encoded = base64(text.as_bytes());
            assert_eq!(
                unbase64(&encoded).as_deref(),
                Some(text.as_bytes()),
                "{text}"
            );
        }
        assert_eq!(base64(b"up/duty/app1"), "dXAvZHV0eS9hcHAx");
        assert_eq!(base64(b"me"), "bWU=");
        assert_eq!(unbase64("not base64!"), None);
    }

    // The answers below are what etcd 3.4.23's gateway answered, as captured.
    const GRANT: &[u8] = br#"{"header":{"cluster_id":"324952591200643719","member_id":"3319814642761637952","revision":"1","raft_term":"2"},"ID":"2324035752709560581","TTL":"6"}"#;
    const KEPT: &[u8] = br#"{"result":{"header":{"revision":"1","raft_term":"2"},"ID":"2324035752709560581","TTL":"6"}}"#;
    const GONE: &[u8] = br#"{"result":{"header":{"revision":"1","raft_term":"2"},"ID":"12345"}}"#;
    const WON: &[u8] = br#"{"header":{"revision":"2","raft_term":"2"},"succeeded":true,"responses":[{"response_put":{"header":{"revision":"2"}}}]}"#;
    const LOST: &[u8] = br#"{"header":{"revision":"2","raft_term":"2"},"responses":[{"response_range":{"header":{"revision":"2"},"kvs":[{"key":"dXAvZHV0eS9hcHAx","create_revision":"2","mod_revision":"2","version":"1","value":"bWU=","lease":"2324035752709560581"}],"count":"1"}}]}"#;
    const RANGE: &[u8] = br#"{"header":{"revision":"2","raft_term":"2"},"kvs":[{"key":"dXAvZHV0eS9hcHAx","create_revision":"2","mod_revision":"2","version":"1","value":"bWU=","lease":"2324035752709560581"}],"count":"1"}"#;
    const EMPTY: &[u8] = br#"{"header":{"cluster_id":"324952591200643719","member_id":"3319814642761637952","revision":"2","raft_term":"2"}}"#;
    const NO_LEASE: &[u8] = br#"{"error":"etcdserver: requested lease not found","message":"etcdserver: requested lease not found","code":5}"#;

    #[test]
    fn the_gateways_answers_read_as_etcd_3_4_gives_them() {
        assert_eq!(granted(Some(200), GRANT), Ok(2324035752709560581));
        assert_eq!(kept(Some(200), KEPT), Ok(true));
        assert_eq!(kept(Some(200), GONE), Ok(false), "a lease gone has no TTL");
        assert_eq!(succeeded(Some(200), WON), Ok(true));
        assert_eq!(
            succeeded(Some(200), LOST),
            Ok(false),
            "a failed txn has no succeeded"
        );
        assert_eq!(
            kvs(Some(200), RANGE),
            Ok(Range {
                revision: 2,
                kvs: vec![KeyValue {
                    key: "up/duty/app1".into(),
                    value: b"me".to_vec(),
                    lease: 2324035752709560581
                }]
            })
        );
        assert_eq!(
            kvs(Some(200), EMPTY),
            Ok(Range {
                revision: 2,
                kvs: vec![]
            }),
            "an empty range has no kvs"
        );
    }

    #[test]
    fn errors_garbage_and_silence_are_no_answers_and_say_why() {
        assert_eq!(
            put_taken(Some(404), NO_LEASE),
            Err("etcd answered 404: etcdserver: requested lease not found".into())
        );
        assert_eq!(
            put_taken(Some(200), NO_LEASE),
            Err("etcd said: etcdserver: requested lease not found".into())
        );
        assert!(kvs(Some(200), b"<html>")
            .unwrap_err()
            .starts_with("an answer that does not parse"));
        assert!(kvs(Some(200), br#"{"header":{"revision":"2"},"kvs":"many"}"#).is_err());
        assert_eq!(
            kvs(Some(200), br#"{"kvs":[]}"#),
            Err("a range answer without the store's revision".into())
        );
        assert!(granted(Some(200), br#"{"ID":"x","TTL":"6"}"#).is_err());
        assert!(granted(Some(200), br#"{"ID":"0","TTL":"6"}"#).is_err());
        assert_eq!(kvs(None, b""), Err("no answer (reset or timed out)".into()));
        assert_eq!(
            kvs(Some(503), b"upstream connect error"),
            Err("etcd answered 503".into())
        );
    }

    #[test]
    fn request_bodies_are_the_gateways_json_whatever_the_key_holds() {
        let body = create("up/duty/a\"b", b"1", 7);
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["compare"][0]["create_revision"], "0");
        assert_eq!(v["success"][0]["request_put"]["lease"], "7");
        let key = v["success"][0]["request_put"]["key"].as_str().unwrap();
        assert_eq!(unbase64(key).unwrap(), b"up/duty/a\"b");
        let auth: serde_json::Value = serde_json::from_str(&authenticate("u", "p\"w\\{")).unwrap();
        assert_eq!(auth["password"], "p\"w\\{");
        let range: serde_json::Value = serde_json::from_str(&range("up/")).unwrap();
        assert_eq!(range["range_end"], base64(b"up0"));
    }
}
