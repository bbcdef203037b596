//! What can change while an Envoy runs: its clusters and its plugin configuration, served from
//! xDS files, and how a new file is waited for until Envoy applied it.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde_json::Value;
use tokio::time::Instant;

use super::listeners::{listeners, PageListener, SecondListener};
use super::Envoy;
use crate::envoy_config::{self, Routing, WasmFilter};
use crate::envoy_process::PATIENCE;
use crate::plugin::status_page;
use crate::xds::XdsFiles;

/// The resources of an Envoy started from a builder, served from files so they can change.
pub(super) struct Dynamic {
    pub(super) xds: XdsFiles,
    pub(super) backends: Vec<(String, SocketAddr)>,
    pub(super) filter: Option<WasmFilter>,
    pub(super) routing: Routing,
    pub(super) second: Option<SecondListener>,
    /// The address of the listener that loads upcheck.wasm as a network filter, if any.
    pub(super) misloaded: Option<SocketAddr>,
    /// The status page listeners of the first and the second users' listener.
    pub(super) pages: [Option<PageListener>; 2],
}

impl Envoy {
    /// Adds a cluster for a backend while Envoy runs (a new clusters file) and waits until it is in use.
    pub async fn add_backend(&mut self, name: &str, addr: SocketAddr) -> Result<()> {
        let update = self.update_counts("cluster_manager.cds").await?;
        let dynamic = self.dynamic()?;
        dynamic.backends.push((name.to_owned(), addr));
        let clusters = envoy_config::clusters(&dynamic.backends, dynamic.routing);
        dynamic.xds.write_clusters(&clusters)?;
        self.until_applied("cluster_manager.cds", update).await
    }

    /// Replaces the first listener's plugin configuration while Envoy runs (a new listeners file;
    /// a second listener is written unchanged, so Envoy leaves it alone; a misloaded listener
    /// takes the new configuration too), and its status page listener's with it, and waits until
    /// the listener uses it.
    ///
    /// Envoy updates the listener in place and keeps the VMs (same `vm_id` and code), so shared
    /// data survives; each VM gets a new root context and `on_configure`. A keep-alive connection
    /// opened before may serve one more request with the old configuration (then Envoy closes it),
    /// and the old root contexts keep ticking until the old filter chain has drained (1 s here).
    pub async fn set_plugin_config(&mut self, config: Value) -> Result<()> {
        let update = self.update_counts("listener_manager.lds").await?;
        let addr = self.listener;
        let dynamic = self.dynamic()?;
        let filter = dynamic
            .filter
            .as_mut()
            .context("this Envoy runs without the wasm filter")?;
        if let (Some(page), Some(config)) = (dynamic.pages[0].as_mut(), status_page(&config)) {
            page.filter.config = config;
        }
        filter.config = config;
        dynamic.xds.write_listeners(&listeners(
            addr,
            dynamic.filter.as_ref(),
            dynamic.routing,
            dynamic.second.as_ref(),
            &dynamic.pages,
            dynamic.misloaded,
        ))?;
        self.until_applied("listener_manager.lds", update).await
    }

    /// The resources that can change; an error for an Envoy running a whole configuration file.
    fn dynamic(&mut self) -> Result<&mut Dynamic> {
        self.dynamic
            .as_mut()
            .context("this Envoy runs a configuration file, which cannot change")
    }

    /// `(update_success, update_rejected)` of an xDS subscription, e.g. `cluster_manager.cds`.
    async fn update_counts(&self, subscription: &str) -> Result<(u64, u64)> {
        Ok((
            self.stat(&format!("{subscription}.update_success")).await?,
            self.stat(&format!("{subscription}.update_rejected"))
                .await?,
        ))
    }

    /// Waits until the subscription took a new update after `before`; an error if it rejected it.
    async fn until_applied(&mut self, subscription: &str, before: (u64, u64)) -> Result<()> {
        let deadline = Instant::now() + PATIENCE;
        loop {
            self.still_running()?;
            let now = self.update_counts(subscription).await?;
            if now.1 > before.1 {
                bail!(self.failure(&format!("{subscription} rejected the update")));
            }
            if now.0 > before.0 {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(self.failure(&format!(
                    "{subscription} did not apply the update in {PATIENCE:?}"
                )));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}
