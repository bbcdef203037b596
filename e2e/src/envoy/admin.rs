//! What a test reads from an Envoy's admin interface: any page, and its numeric stats.

use std::collections::BTreeMap;

use anyhow::{ensure, Context, Result};

use super::Envoy;

impl Envoy {
    /// The URL of `path_and_query` on the admin interface (loopback), e.g. `/stats?filter=upcheck`.
    pub fn admin_url(&self, path_and_query: &str) -> String {
        format!("http://{}{path_and_query}", self.admin)
    }

    /// The body of an admin GET, e.g. `admin("/clusters")`.
    pub async fn admin(&self, path_and_query: &str) -> Result<String> {
        let url = self.admin_url(path_and_query);
        let response = self.http.get(&url).send().await?;
        let status = response.status();
        let body = response.text().await?;
        ensure!(status.is_success(), "GET {url}: {status}: {body}");
        Ok(body)
    }

    /// The numeric stats whose names match the regex `filter` (histograms are left out).
    pub async fn stats(&self, filter: &str) -> Result<BTreeMap<String, u64>> {
        let query = reqwest::Url::parse_with_params("http://admin/stats", [("filter", filter)])?;
        let body = self
            .admin(&format!("/stats?{}", query.query().unwrap_or_default()))
            .await?;
        Ok(body
            .lines()
            .filter_map(|line| {
                let (name, value) = line.split_once(": ")?;
                Some((name.to_owned(), value.trim().parse().ok()?))
            })
            .collect())
    }

    /// One counter or gauge by its full name; an error if Envoy has no such stat.
    pub async fn stat(&self, name: &str) -> Result<u64> {
        let exact = format!("^{}$", name.replace('.', "\\."));
        self.stats(&exact)
            .await?
            .remove(name)
            .with_context(|| format!("Envoy has no stat {name}"))
    }

    /// That `received` requests at the backends answer `users` requests of users: one attempt
    /// each, plus at most the second attempts Envoy counts (`upstream_rq_retry` over every
    /// cluster). On a loaded machine a slow answer may be hedged; a hedge cancelled before it
    /// left may never arrive, so fewer is fine.
    pub async fn ensure_attempts(&self, received: u64, users: u64) -> Result<()> {
        let repeats: u64 = self
            .stats("^cluster\\..*\\.upstream_rq_retry$")
            .await?
            .values()
            .sum();
        ensure!(
            (users..=users + repeats).contains(&received),
            "backends received {received} requests for {users} users and {repeats} second attempts"
        );
        Ok(())
    }
}
