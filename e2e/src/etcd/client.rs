//! What the harness itself reads and writes in etcd, through the JSON gateway the module uses:
//! keys, the users and roles of etcd's authentication, and which member leads.

use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use serde_json::{json, Value};
use tokio::time::{sleep, Instant};
use upcheck_cli::etcd_roles::{Grant, Perm};

use super::{Etcd, Member};
use crate::envoy_process::PATIENCE;

/// The root user's password in the tests' etcd.
const ROOT_PASSWORD: &str = "root-of-the-test";

fn b64(bytes: &[u8]) -> String {
    upcheck_policy::etcd::gateway::base64(bytes)
}

/// A uint64 as the JSON gateway writes it (a string), 0 when absent.
fn id(v: &Value) -> u64 {
    v.as_str().and_then(|s| s.parse().ok()).unwrap_or(0)
}

impl Etcd {
    /// `body` posted to `path` on each member in turn, until one answers.
    async fn post(&self, path: &str, body: Value) -> Result<Value> {
        let mut last = None;
        for m in &self.members {
            match self.post_to(m, path, &body).await {
                Ok(answer) => return Ok(answer),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| anyhow::anyhow!("no etcd member")))
    }

    /// `body` posted to `path` on member `m`.
    async fn post_to(&self, m: &Member, path: &str, body: &Value) -> Result<Value> {
        let url = self.url(m, path);
        let mut request = self.http.post(&url).body(body.to_string());
        if let Some(token) = &self.token {
            request = request.header("authorization", token);
        }
        let answer = request.send().await?;
        ensure!(answer.status().is_success(), "{url}: {}", answer.status());
        Ok(serde_json::from_str(&answer.text().await?)?)
    }

    /// The leader member `i` knows of (its position), or `None` while it knows none; an error if
    /// it does not answer.
    pub async fn leader_seen_by(&self, i: usize) -> Result<Option<usize>> {
        let m = self.members.get(i).context("no such member")?;
        let status = self
            .post_to(m, "/v3/maintenance/status", &json!({}))
            .await?;
        let leader = id(&status["leader"]);
        if leader == 0 {
            return Ok(None);
        }
        let list = self
            .post_to(m, "/v3/cluster/member/list", &json!({}))
            .await?;
        let name = list["members"]
            .as_array()
            .and_then(|ms| ms.iter().find(|m| id(&m["ID"]) == leader))
            .and_then(|m| m["name"].as_str())
            .with_context(|| format!("leader {leader:x} is not a member: {list}"))?;
        Ok(self.members.iter().position(|m| m.name == name))
    }

    /// The store's revision as member `i` holds it now (its `/v3/maintenance/status`, answered
    /// from what it holds, with or without a leader).
    pub async fn revision_seen_by(&self, i: usize) -> Result<i64> {
        let m = self.members.get(i).context("no such member")?;
        let status = self
            .post_to(m, "/v3/maintenance/status", &json!({}))
            .await?;
        Ok(id(&status["header"]["revision"]).try_into()?)
    }

    /// Makes member `i` the leader (etcd's leadership transfer, asked of the leader) and waits
    /// until it leads.
    pub async fn make_leader(&self, i: usize) -> Result<()> {
        let m = self.members.get(i).context("no such member")?;
        let list = self
            .post_to(m, "/v3/cluster/member/list", &json!({}))
            .await?;
        let target = list["members"]
            .as_array()
            .and_then(|ms| ms.iter().find(|x| x["name"] == m.name.as_str()))
            .map(|x| x["ID"].clone())
            .with_context(|| format!("{} is not in the list: {list}", m.name))?;
        let deadline = Instant::now() + PATIENCE;
        loop {
            let leader = self.leader_seen_by(i).await?;
            if leader == Some(i) {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "{} does not lead after {PATIENCE:?} (leader: {leader:?})",
                    m.name
                );
            }
            if let Some(leader) = leader.and_then(|l| self.members.get(l)) {
                let path = "/v3/maintenance/transfer-leadership";
                if let Err(e) = self
                    .post_to(leader, path, &json!({"targetID": target}))
                    .await
                {
                    eprintln!("etcd: moving the leadership to {}: {e:#}", m.name);
                }
            }
            sleep(Duration::from_millis(200)).await;
        }
    }

    /// Turns etcd's authentication on, with `user` (password `password`) whose one role may read
    /// and write the keys under `prefix` and nothing else; the harness itself goes on as root.
    pub async fn enable_auth(&mut self, user: &str, password: &str, prefix: &str) -> Result<()> {
        let grant = Grant {
            perm: Perm::ReadWrite,
            key: prefix.to_owned(),
            prefix: true,
        };
        self.enable_roles(&[(user, password, "balancer", vec![grant])])
            .await
    }

    /// Turns etcd's authentication on with `users`, each a user, its password, its one role and
    /// that role's grants (as [`upcheck_cli::etcd_roles`] gives them for the balancers and the
    /// operators); the harness itself goes on as root.
    pub async fn enable_roles(&mut self, users: &[(&str, &str, &str, Vec<Grant>)]) -> Result<()> {
        let mut steps = vec![
            ("/v3/auth/role/add", json!({"name": "root"})),
            (
                "/v3/auth/user/add",
                json!({"name": "root", "password": ROOT_PASSWORD}),
            ),
            (
                "/v3/auth/user/grant",
                json!({"user": "root", "role": "root"}),
            ),
        ];
        for (user, password, role, grants) in users {
            steps.push(("/v3/auth/role/add", json!({"name": role})));
            for g in grants {
                let perm = match g.perm {
                    Perm::Read => "READ",
                    Perm::ReadWrite => "READWRITE",
                };
                let mut granted = json!({"permType": perm, "key": b64(g.key.as_bytes())});
                if g.prefix {
                    let end = upcheck_policy::etcd::gateway::prefix_end(g.key.as_bytes());
                    granted["range_end"] = Value::from(b64(&end));
                }
                steps.push((
                    "/v3/auth/role/grant",
                    json!({"name": role, "perm": granted}),
                ));
            }
            steps.push((
                "/v3/auth/user/add",
                json!({"name": user, "password": password}),
            ));
            steps.push(("/v3/auth/user/grant", json!({"user": user, "role": role})));
        }
        steps.push(("/v3/auth/enable", json!({})));
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
