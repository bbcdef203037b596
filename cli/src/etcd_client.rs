//! The command line's etcd client: etcd's JSON gateway over plain HTTP or TLS
//! ([`crate::etcd_tls`]), for the fleet's membership ([`crate::etcd_membership`]).
//!
//! Each call goes to the first member that answers, in the order the configuration lists them.
//! With etcd's authentication on, the client authenticates once and sends the token with each
//! call. Keys and values are base64 on the wire, as the module's own calls write them
//! ([`upcheck_policy::etcd::gateway`]).

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use serde_json::{json, Value};
use upcheck_policy::etcd::gateway::{base64, unbase64};
use upcheck_policy::etcd::keys::prefix_end;

use crate::etcd_tls::{explain, Connector};
use crate::http1::{self, Stream};

/// One key as etcd holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The key.
    pub key: String,
    /// Its value.
    pub value: Vec<u8>,
    /// The revision that last changed it.
    pub mod_revision: i64,
}

/// A range's keys, and the store's revision when it was read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// The keys read.
    pub entries: Vec<Entry>,
    /// The store's revision at the read.
    pub revision: i64,
}

/// An etcd cluster reached through its members' JSON gateways.
#[derive(Debug, Clone)]
pub struct Client {
    members: Vec<SocketAddr>,
    /// TLS to every member, when the fleet's etcd speaks it.
    tls: Option<Connector>,
    token: Option<String>,
    /// The user authenticated as, for the messages.
    user: Option<String>,
}

/// A user and password for etcd's authentication.
#[derive(Debug, Clone)]
pub struct Credentials {
    /// The user.
    pub user: String,
    /// Its password (never printed).
    pub password: String,
}

fn text_int(value: &Value) -> Option<i64> {
    match value {
        Value::String(s) => s.parse().ok(),
        Value::Number(n) => n.as_i64(),
        _ => None,
    }
}

/// A call to `member` that failed with `e`, in one line (a TLS failure said in words).
fn failed(member: SocketAddr, e: &io::Error) -> io::Error {
    match explain(e) {
        Some(tls) => io::Error::new(e.kind(), format!("etcd at {member}: {tls}")),
        None => io::Error::new(e.kind(), format!("etcd at {member}: {e}")),
    }
}

impl Client {
    /// A client of `members`, over `tls` when given, authenticated as `credentials` when given.
    pub fn connect(
        members: &[SocketAddr],
        tls: Option<Connector>,
        credentials: Option<&Credentials>,
    ) -> io::Result<Client> {
        let mut client = Client {
            members: members.to_vec(),
            tls,
            token: None,
            user: credentials.map(|c| c.user.clone()),
        };
        if let Some(c) = credentials {
            let answer = client.call(
                "/v3/auth/authenticate",
                &json!({"name": c.user, "password": c.password}),
            )?;
            let token = answer["token"]
                .as_str()
                .filter(|t| !t.is_empty())
                .ok_or_else(|| io::Error::other("etcd gave no token for that user"))?;
            client.token = Some(token.to_owned());
        }
        Ok(client)
    }

    fn headers(&self) -> Vec<(&str, &str)> {
        self.token
            .as_deref()
            .map(|t| vec![("authorization", t)])
            .unwrap_or_default()
    }

    /// One call: the answer of the first member that gives one, or the last error.
    fn call(&self, path: &str, body: &Value) -> io::Result<Value> {
        let body = body.to_string();
        let mut last = io::Error::other("no etcd member configured");
        for member in &self.members {
            match http1::post(*member, self.tls.as_ref(), path, &self.headers(), &body) {
                Ok((200, text)) => return serde_json::from_str(&text).map_err(io::Error::other),
                Ok((status, text)) => {
                    let said: Value = serde_json::from_str(&text).unwrap_or_default();
                    let said = said["error"].as_str().unwrap_or("").chars().take(120);
                    last = io::Error::other(format!(
                        "etcd at {member} answered {status} {}",
                        said.collect::<String>()
                    ));
                }
                Err(e) => last = failed(*member, &e),
            }
        }
        Err(last)
    }

    /// The user this client authenticated as, if any.
    pub fn user(&self) -> Option<&str> {
        self.user.as_deref()
    }

    /// The keys under `prefix` (or the one key `prefix` when `whole` is false).
    pub fn range(&self, prefix: &str, whole: bool) -> io::Result<Snapshot> {
        let mut body = json!({"key": base64(prefix.as_bytes())});
        if whole {
            body["range_end"] = Value::from(base64(&prefix_end(prefix.as_bytes())));
        }
        let answer = self.call("/v3/kv/range", &body)?;
        let revision = text_int(&answer["header"]["revision"])
            .ok_or_else(|| io::Error::other("a range answer without a revision"))?;
        let entries = answer["kvs"]
            .as_array()
            .map_or(&[][..], Vec::as_slice)
            .iter()
            .filter_map(|kv| {
                let key = String::from_utf8(unbase64(kv["key"].as_str()?)?).ok()?;
                let value = kv["value"].as_str().and_then(unbase64).unwrap_or_default();
                let mod_revision = text_int(&kv["mod_revision"])?;
                Some(Entry {
                    key,
                    value,
                    mod_revision,
                })
            })
            .collect();
        Ok(Snapshot { entries, revision })
    }

    /// Puts `value` at `key` if the key's last change is still `mod_revision` (0: if it does not
    /// exist): the revision of the put, or none if another change came first.
    pub fn put_if(&self, key: &str, value: &[u8], mod_revision: i64) -> io::Result<Option<i64>> {
        let key = base64(key.as_bytes());
        let compare = match mod_revision {
            0 => json!({"target": "CREATE", "key": key, "create_revision": "0"}),
            r => json!({"target": "MOD", "key": key, "mod_revision": r.to_string()}),
        };
        let answer = self.call(
            "/v3/kv/txn",
            &json!({
                "compare": [compare],
                "success": [{"request_put": {"key": key, "value": base64(value)}}],
            }),
        )?;
        if answer["succeeded"] != true {
            return Ok(None);
        }
        Ok(text_int(&answer["header"]["revision"]))
    }

    /// Puts `value` at `key`, living by `lease`.
    pub fn put(&self, key: &str, value: &[u8], lease: i64) -> io::Result<()> {
        self.call(
            "/v3/kv/put",
            &json!({"key": base64(key.as_bytes()), "value": base64(value), "lease": lease.to_string()}),
        )
        .map(|_| ())
    }

    /// Deletes `key`.
    pub fn delete(&self, key: &str) -> io::Result<()> {
        self.call(
            "/v3/kv/deleterange",
            &json!({"key": base64(key.as_bytes())}),
        )
        .map(|_| ())
    }

    /// A lease of `ttl`.
    pub fn grant(&self, ttl: Duration) -> io::Result<i64> {
        let answer = self.call(
            "/v3/lease/grant",
            &json!({"TTL": ttl.as_secs().max(1).to_string()}),
        )?;
        text_int(&answer["ID"])
            .filter(|id| *id != 0)
            .ok_or_else(|| io::Error::other("a grant without a lease"))
    }

    /// Keeps `lease` alive: whether it still was.
    pub fn keep_alive(&self, lease: i64) -> io::Result<bool> {
        let answer = self.call("/v3/lease/keepalive", &json!({"ID": lease.to_string()}))?;
        Ok(text_int(&answer["result"]["TTL"]).is_some_and(|ttl| ttl > 0))
    }

    /// Watches `key` from revision `from`: each message is etcd's (`result.events`, or
    /// `result.canceled` with the `compact_revision` it could not go back to); each read of it
    /// waits at most `patience`.
    pub fn watch(&self, key: &str, from: i64, patience: Duration) -> io::Result<Stream> {
        let body = json!({"create_request": {
            "key": base64(key.as_bytes()),
            "start_revision": from.to_string(),
        }})
        .to_string();
        let mut last = io::Error::other("no etcd member configured");
        for member in &self.members {
            let tls = self.tls.as_ref();
            match Stream::open(*member, tls, "/v3/watch", &self.headers(), &body, patience) {
                Ok(stream) => return Ok(stream),
                Err(e) => last = failed(*member, &e),
            }
        }
        Err(last)
    }
}
