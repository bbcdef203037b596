//! What the running balancer says of its backends: Envoy's admin interface (its clusters, the
//! filter configuration in force) and the status page, read on loopback, and the wait for
//! them to show a change.

use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use upcheck_policy::RoutingMode;

use super::state::{Refusal, State};
use crate::deployment::{Deployment, POOL};
use crate::http1::{get, get_json};

/// A backend as this balancer has it now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Backend {
    /// Its name.
    pub name: String,
    /// Its address.
    pub address: String,
    /// What the status page says of it, and since when.
    pub state: String,
    /// Its requests in flight in Envoy, when it drains. Default: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_flight: Option<u64>,
}

/// Each backend of `state` as the status page and Envoy's admin interface show it now.
pub fn now(file: &Path, state: &State) -> Result<Vec<Backend>, Refusal> {
    let (deployment, _) = state.plan(file)?;
    let page = get_json(state.status, &page_path(&deployment)).ok();
    let clusters = get(state.admin, "/clusters").ok().map(|(_, c)| c);
    let mut backends = Vec::new();
    for (backend, upstream) in deployment.backends.iter().zip(state.upstreams()) {
        let shown = page.as_ref().and_then(|page| {
            page["backends"]
                .as_array()?
                .iter()
                .find(|b| b["name"] == backend.name.as_str())
                .cloned()
        });
        let said = match &shown {
            Some(b) => describe(b, page.as_ref(), &backend.name),
            None => "not on the status page (Envoy not running, or not taken in yet)".into(),
        };
        let address = backend.address.to_string();
        let in_flight = match (&clusters, upstream["drain"] == true) {
            (Some(c), true) => Some(active(
                c,
                &host_prefix(deployment.routing, &backend.cluster, &address),
            )),
            _ => None,
        };
        backends.push(Backend {
            name: backend.name.clone(),
            address,
            state: said,
            in_flight,
        });
    }
    Ok(backends)
}

/// What a backend's line on the status page says: its state, and since when by the history.
fn describe(backend: &Value, page: Option<&Value>, name: &str) -> String {
    let state = if !backend["draining"].is_null() {
        "draining".to_owned()
    } else if backend["ejected"] == true {
        "ejected".to_owned()
    } else if !backend["warming"].is_null() {
        "warming".to_owned()
    } else {
        backend["status"].as_str().unwrap_or("unknown").to_owned()
    };
    let since = page
        .and_then(|p| p["history"].as_array())
        .and_then(|h| h.iter().find(|c| c["backend"] == name))
        .and_then(|c| c["at"].as_str().map(str::to_owned));
    match since {
        Some(at) => format!("{state} since {at}"),
        None => state,
    }
}

/// Where the status page serves its JSON.
pub(super) fn page_path(deployment: &Deployment) -> String {
    format!("{}.json", deployment.page.path)
}

/// How `/clusters` begins the lines of a backend's host: its own cluster's in cluster routing,
/// its endpoint's in the pool in host routing.
pub(super) fn host_prefix(routing: RoutingMode, cluster: &str, address: &str) -> String {
    match routing {
        RoutingMode::Cluster => format!("{cluster}::"),
        RoutingMode::Host => format!("{}::{address}::", POOL),
    }
}

/// Whether `/clusters` shows a host whose lines begin with `host`.
pub(super) fn has_host(clusters: &str, host: &str) -> bool {
    clusters.lines().any(|line| line.starts_with(host))
}

/// Whether filter `name`'s configuration in force in Envoy is `plugin` (its ECDS config dump).
pub(super) fn in_force(admin: SocketAddr, name: &str, plugin: &str) -> io::Result<bool> {
    let (_, dump) = get(admin, "/config_dump?resource=ecds_filters")?;
    let dump: Value = serde_json::from_str(&dump).map_err(io::Error::other)?;
    let configs = dump["configs"].as_array().map_or(&[][..], Vec::as_slice);
    Ok(configs.iter().any(|c| {
        let filter = &c["ecds_filter"];
        filter["name"] == name
            && filter["typed_config"]["config"]["configuration"]["value"] == plugin
    }))
}

/// How many backends other than `name` the status page shows in rotation; none if it cannot
/// be read.
pub(super) fn serving(status: SocketAddr, path: &str, name: &str) -> Option<usize> {
    let page = get_json(status, path).ok()?;
    let all = page["backends"].as_array()?;
    Some(
        all.iter()
            .filter(|b| b["name"] != name && b["routable"] == true)
            .count(),
    )
}

/// The requests in flight `/clusters` shows for the hosts whose lines start with `host`: it has
/// a line per host and figure, `app3::127.0.0.1:3003::rq_active::1`.
pub(super) fn active(clusters: &str, host: &str) -> u64 {
    clusters
        .lines()
        .filter(|line| line.starts_with(host))
        .filter_map(|line| {
            let mut fields = line.rsplit("::");
            let count = fields.next()?;
            (fields.next() == Some("rq_active")).then(|| count.trim().parse::<u64>().ok())?
        })
        .sum()
}

/// Calls `done` every 100 ms until it says so or `timeout` passes: whether it did. An error
/// ends the wait with it once `timeout` passes without an answer, or at once when nothing
/// listens.
pub(super) fn wait(
    timeout: Duration,
    mut done: impl FnMut() -> io::Result<bool>,
) -> io::Result<bool> {
    let deadline = Instant::now() + timeout;
    loop {
        let answer = done();
        match answer {
            Ok(true) => return Ok(true),
            Ok(false) if Instant::now() >= deadline => return Ok(false),
            // Nothing listens: Envoy does not run, and will take the files in when it starts.
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => return Err(e),
            Err(e) if Instant::now() >= deadline => return Err(e),
            _ => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_in_flight_are_read_from_the_hosts_lines_of_clusters() {
        let clusters = "app3::default_priority::max_requests::1024\n\
                        app3::127.0.0.1:3003::rq_active::2\n\
                        app3::127.0.0.1:3003::rq_total::9\n\
                        app30::127.0.0.1:3030::rq_active::5\n\
                        pool::127.0.0.1:3003::rq_active::1\n";
        assert_eq!(active(clusters, "app3::"), 2);
        assert_eq!(active(clusters, "pool::127.0.0.1:3003::"), 1);
        assert_eq!(active(clusters, "app4::"), 0);
    }
}
