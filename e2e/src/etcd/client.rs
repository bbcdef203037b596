//! What the harness itself reads and writes in etcd, through the JSON gateway the module uses:
//! keys, and the users and roles of etcd's authentication.

use anyhow::{ensure, Context, Result};
use serde_json::{json, Value};

use super::Etcd;

/// The root user's password in the tests' etcd.
const ROOT_PASSWORD: &str = "root-of-the-test";

fn b64(bytes: &[u8]) -> String {
    upcheck_policy::etcd::gateway::base64(bytes)
}

impl Etcd {
    async fn post(&self, path: &str, body: Value) -> Result<Value> {
        let mut last = None;
        for m in &self.members {
            let url = self.url(m, path);
            let mut request = self.http.post(&url).body(body.to_string());
            if let Some(token) = &self.token {
                request = request.header("authorization", token);
            }
            match request.send().await {
                Ok(r) if r.status().is_success() => {
                    return Ok(serde_json::from_str(&r.text().await?)?)
                }
                Ok(r) => last = Some(anyhow::anyhow!("{url}: {}", r.status())),
                Err(e) => last = Some(e.into()),
            }
        }
        Err(last.unwrap_or_else(|| anyhow::anyhow!("no etcd member")))
    }

    /// Turns etcd's authentication on, with `user` (password `password`) whose one role may read
    /// and write the keys under `prefix` and nothing else; the harness itself goes on as root.
    pub async fn enable_auth(&mut self, user: &str, password: &str, prefix: &str) -> Result<()> {
        let end = upcheck_policy::etcd::gateway::prefix_end(prefix.as_bytes());
        let steps = [
            ("/v3/auth/role/add", json!({"name": "root"})),
            (
                "/v3/auth/user/add",
                json!({"name": "root", "password": ROOT_PASSWORD}),
            ),
            (
                "/v3/auth/user/grant",
                json!({"user": "root", "role": "root"}),
            ),
            ("/v3/auth/role/add", json!({"name": "balancer"})),
            (
                "/v3/auth/role/grant",
                json!({"name": "balancer", "perm": {"permType": "READWRITE",
                       "key": b64(prefix.as_bytes()), "range_end": b64(&end)}}),
            ),
            (
                "/v3/auth/user/add",
                json!({"name": user, "password": password}),
            ),
            (
                "/v3/auth/user/grant",
                json!({"user": user, "role": "balancer"}),
            ),
            ("/v3/auth/enable", json!({})),
        ];
        for (path, body) in steps {
            self.post(path, body).await.context(path)?;
        }
        let answer = self
            .post(
                "/v3/auth/authenticate",
                json!({"name": "root", "password": ROOT_PASSWORD}),
            )
            .await?;
        self.token = answer["token"].as_str().map(str::to_owned);
        ensure!(self.token.is_some(), "no root token: {answer}");
        Ok(())
    }

    /// Whether `user` (password `password`) may read the keys under `prefix`.
    pub async fn may_read(&self, user: &str, password: &str, prefix: &str) -> Result<bool> {
        let answer = self
            .post(
                "/v3/auth/authenticate",
                json!({"name": user, "password": password}),
            )
            .await?;
        let token = answer["token"].as_str().context("no token")?.to_owned();
        let end = upcheck_policy::etcd::gateway::prefix_end(prefix.as_bytes());
        let m = self.members.first().context("no member")?;
        let response = self
            .http
            .post(self.url(m, "/v3/kv/range"))
            .header("authorization", token)
            .body(json!({"key": b64(prefix.as_bytes()), "range_end": b64(&end)}).to_string())
            .send()
            .await?;
        Ok(response.status().is_success())
    }

    /// Every key under `prefix` with its value and lease, read through the JSON gateway.
    pub async fn range(&self, prefix: &str) -> Result<Vec<(String, Vec<u8>, i64)>> {
        let end = upcheck_policy::etcd::gateway::prefix_end(prefix.as_bytes());
        let answer = self
            .post(
                "/v3/kv/range",
                json!({"key": b64(prefix.as_bytes()), "range_end": b64(&end)}),
            )
            .await?;
        let unb64 = |v: &Value| {
            upcheck_policy::etcd::gateway::unbase64(v.as_str().unwrap_or("")).unwrap_or_default()
        };
        Ok(answer["kvs"]
            .as_array()
            .map(|kvs| {
                kvs.iter()
                    .map(|kv| {
                        (
                            String::from_utf8_lossy(&unb64(&kv["key"])).into_owned(),
                            unb64(&kv["value"]),
                            kv["lease"]
                                .as_str()
                                .and_then(|l| l.parse().ok())
                                .unwrap_or(0),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default())
    }

    /// Writes `value` at `key` (without a lease), as anyone with access to etcd could.
    pub async fn put(&self, key: &str, value: &[u8]) -> Result<()> {
        self.post(
            "/v3/kv/put",
            json!({"key": b64(key.as_bytes()), "value": b64(value)}),
        )
        .await
        .map(|_| ())
    }
}
