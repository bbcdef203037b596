//! The listeners an Envoy serves: the users' listener, a second one, their status page listeners
//! and the misloaded one, each with its filter, as JSON for Envoy's configuration.

use std::net::{IpAddr, SocketAddr};

use anyhow::{ensure, Result};
use serde_json::Value;

use super::module;
use crate::envoy_config::{self, Routing, WasmFilter};
use crate::plugin::status_page;
use crate::ports::free_addr_on;

/// The names of the users' listeners (also their stat prefixes).
const FIRST: &str = "web";
const SECOND: &str = "second";
/// The name of the listener that loads upcheck.wasm as a network filter.
const MISLOADED: &str = "misloaded";
/// The names of their status page listeners.
const FIRST_STATUS: &str = "status";
const SECOND_STATUS: &str = "second_status";

/// A status page listener: its address and its filter.
pub(super) struct PageListener {
    pub(super) addr: SocketAddr,
    pub(super) filter: WasmFilter,
}

impl PageListener {
    /// The status page listener, on a free port of `ip`, of the pool `filter` routes; `None`
    /// without a filter, or when its configuration is not a JSON object (one meant to be refused).
    fn of(filter: Option<&WasmFilter>, ip: IpAddr) -> Result<Option<PageListener>> {
        let Some((filter, config)) = filter.and_then(|f| Some((f, status_page(&f.config)?))) else {
            return Ok(None);
        };
        Ok(Some(PageListener {
            addr: free_addr_on(ip)?,
            filter: WasmFilter {
                module: filter.module.clone(),
                config,
            },
        }))
    }
}

/// A second users' listener: its own port and plugin configuration, the first one's routes,
/// clusters and `vm_id`.
pub(super) struct SecondListener {
    pub(super) addr: SocketAddr,
    pub(super) filter: WasmFilter,
}

impl SecondListener {
    /// The second listener on a free port of `ip`, if `plugin_config` is set; an error with
    /// [`Routing::Host`], whose one pool cluster would mix the two pools' backends.
    pub(super) fn new(
        plugin_config: Option<&Value>,
        ip: IpAddr,
        routing: Routing,
    ) -> Result<Option<Self>> {
        let Some(config) = plugin_config else {
            return Ok(None);
        };
        ensure!(
            routing == Routing::Cluster,
            "a second listener needs Routing::Cluster: in {routing:?} both would share one pool cluster"
        );
        Ok(Some(SecondListener {
            addr: free_addr_on(ip)?,
            filter: WasmFilter {
                module: module()?,
                config: config.clone(),
            },
        }))
    }
}

/// Every listener: the first users' one on `first` with `filter`, then `second` if any, then
/// their status page listeners, then the misloaded one on `misloaded` if any (with `filter`'s
/// module and configuration).
pub(super) fn listeners(
    first: SocketAddr,
    filter: Option<&WasmFilter>,
    routing: Routing,
    second: Option<&SecondListener>,
    pages: &[Option<PageListener>; 2],
    misloaded: Option<SocketAddr>,
) -> Vec<Value> {
    let users = envoy_config::listener(FIRST, first, filter, routing);
    let second = second.map(|s| envoy_config::listener(SECOND, s.addr, Some(&s.filter), routing));
    let pages = [FIRST_STATUS, SECOND_STATUS]
        .iter()
        .zip(pages)
        .filter_map(|(name, page)| {
            let page = page.as_ref()?;
            Some(envoy_config::status_listener(name, page.addr, &page.filter))
        });
    let misloaded = misloaded
        .zip(filter)
        .map(|(addr, filter)| envoy_config::misloaded_listener(MISLOADED, addr, filter));
    [users]
        .into_iter()
        .chain(second)
        .chain(pages)
        .chain(misloaded)
        .collect()
}

/// The status page listeners of the first users' listener (with `filter`) and of `second`.
pub(super) fn pages(
    filter: Option<&WasmFilter>,
    second: Option<&SecondListener>,
    ip: IpAddr,
) -> Result<[Option<PageListener>; 2]> {
    Ok([
        PageListener::of(filter, ip)?,
        PageListener::of(second.map(|s| &s.filter), ip)?,
    ])
}
