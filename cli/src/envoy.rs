//! The Envoy 1.40 configuration of a [`Deployment`], as commented YAML, and its pieces, which
//! the e2e harness and the benchmarks serve to Envoy as JSON ([`Shape`]).
//!
//! Built as a [`tree`](crate::tree) that carries its comments: they are half of the file. Each
//! setting whose absence was measured to cost users (docs/routing.md) is explained next
//! to it, so that whoever reads or edits the file learns why it is there. This is the one place
//! the shapes are stated; the e2e tests run them as they are written here: in host routing a `pool` cluster with the `override_host` load
//! balancer, two routes that retry once on another backend (`previous_hosts`, the retry circuit
//! breaker raised to the request one), the routing header kept on the route and removed by the
//! router's upstream filter, and a probe cluster per backend; in cluster routing one cluster per
//! backend and a `cluster_header` route. Both: the wasm filter before the router, the plugin
//! configuration embedded, no Envoy health checks or outlier detection, admin on loopback, and
//! the status page on a listener of its own on loopback (the same module and `vm_id`, the pool's
//! configuration with `"role": "status_page"`, a 404 route behind it).
//!
//! Everything that comes from the input is written so YAML reads it back as the same string:
//! scalars are quoted unless plainly safe, the plugin configuration sits in a block scalar one
//! JSON line to a line, and comments are wrapped with every line starting with `#`.
//!
//! Each part of the file has its own module: the opening comment (`header`), the listeners,
//! their routes and router, the wasm filter, the clusters, admin and the stats tags, and the
//! files Envoy reads while it runs (`discovery`); [`Shape`] is what they share.

mod admin;
mod clusters;
mod discovery;
mod header;
mod listeners;
mod routes;
mod shape;
mod wasm;

use std::net::SocketAddr;
use std::path::PathBuf;

use upcheck_policy::RoutingMode;

pub use admin::stats_config;
pub use discovery::{clusters_file, filter_file, membership_files};
pub use shape::{Routing, Shape, PER_TRY_TIMEOUT};
pub use wasm::plugin_configuration;

use crate::deployment::Deployment;
use crate::tree::{list, map, plain, text, Node};

/// What the command line adds to a deployment.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// Where users connect. Default `0.0.0.0:8080`.
    pub listen: SocketAddr,
    /// Envoy's admin interface, on loopback. Default `127.0.0.1:9901`.
    pub admin: SocketAddr,
    /// The status page's listener, on loopback unless the page is public. Default
    /// `127.0.0.1:9902`.
    pub status: SocketAddr,
    /// Path of upcheck.wasm on the load balancer. Default `/etc/upcheck/upcheck.wasm`.
    pub wasm: String,
    /// Envoy's worker threads (a command-line flag of Envoy's, shown in the header). Default 2.
    pub concurrency: u32,
    /// What the configuration was written from, for the header, e.g. `config/caddy.json`.
    pub input: String,
    /// The directory (absolute) Envoy reads the clusters and both filters' configurations from,
    /// which `upcheck backends` rewrites while it runs ([`crate::membership`]). Default: none,
    /// everything in the one file.
    pub membership: Option<PathBuf>,
}

/// The whole configuration file.
pub fn render(d: &Deployment, s: &Settings) -> String {
    let mut out = String::new();
    header::write(&mut out, d, s);
    out.push('\n');
    out.push_str(&document(d, s).yaml());
    out
}

/// The whole configuration of `d` as `upcheck envoy` writes it: admin, the users' and the
/// status page's listeners, the clusters.
fn document(d: &Deployment, s: &Settings) -> Node {
    let shape = Shape::of(d, s);
    let bound = if s.status.ip().is_loopback() {
        "Bound to loopback: no other machine can reach it, and the filter serves the page only \
         on connections made to a loopback address anyway (`status_public` in the input lifts \
         that)."
    } else {
        "Not on loopback: the input sets `status_public`, so any client that reaches this \
         address reads the page."
    };
    let status = shape
        .status_listener("status", s.status, &d.page_plugin)
        .gap()
        .note(format!(
            "The status page, on a listener of its own so that no user request pays for it: \
             {path} (text), {path}.json, {path}.html. {bound}",
            path = d.page.path
        ));
    let none = "No `health_checks` and no `outlier_detection` on any cluster, on purpose: upcheck \
                is the only health policy, so Envoy never ejects a backend behind its back (or \
                keeps one the filter has taken out).";
    let clusters_note = match d.routing {
        RoutingMode::Host => none.to_owned(),
        RoutingMode::Cluster => {
            format!("One cluster per backend, named as in the plugin configuration. {none}")
        }
    };
    let clusters = list(
        shape
            .clusters(&d.backends)
            .into_iter()
            .chain(d.etcd.iter().flat_map(crate::etcd::clusters)),
    )
    .gap()
    .note(clusters_note.clone());
    let listeners = list([shape.listener("web", s.listen, Some(&d.plugin)), status]);
    let resources = match &s.membership {
        None => vec![(
            "static_resources",
            map([("listeners", listeners), ("clusters", clusters)]).gap(),
        )],
        Some(dir) => {
            let cds = map([
                (
                    "path_config_source",
                    map([("path", text(clusters_file(dir).display().to_string()))]),
                ),
                ("resource_api_version", plain("V3")),
            ]);
            vec![
                (
                    "node",
                    map([("id", text("upcheck")), ("cluster", text("upcheck"))])
                        .note("Envoy names itself so to the files it reads its clusters from."),
                ),
                ("static_resources", map([("listeners", listeners)]).gap()),
                (
                    "dynamic_resources",
                    map([("cds_config", cds)]).gap().note(format!(
                        "The clusters, read from {} and taken in whenever `upcheck backends` \
                         replaces it. {clusters_note}",
                        clusters_file(dir).display()
                    )),
                ),
            ]
        }
    };
    let head = [
        ("stats_config", stats_config()),
        ("admin", admin::admin(s.admin)),
    ];
    map(head.into_iter().chain(resources))
}
