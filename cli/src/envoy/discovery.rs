//! The files Envoy reads while it runs, with `upcheck envoy --membership`: the clusters (CDS)
//! and each filter's configuration (ECDS), which `upcheck backends` rewrites.

use std::path::{Path, PathBuf};

use super::{Settings, Shape};
use crate::deployment::Deployment;
use crate::tree::{list, map, text, Node};

/// The name of the file in a membership directory that holds filter `name`'s configuration.
pub fn filter_file(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.json"))
}

/// The name of the file in a membership directory that holds the clusters.
pub fn clusters_file(dir: &Path) -> PathBuf {
    dir.join("clusters.json")
}

/// With [`Settings::membership`], the files of its directory Envoy reads while it runs, each
/// with its text: the clusters (CDS) and each filter's configuration (ECDS), JSON. Empty
/// without it.
pub fn membership_files(d: &Deployment, s: &Settings) -> Vec<(PathBuf, String)> {
    let Some(dir) = &s.membership else {
        return Vec::new();
    };
    let shape = Shape {
        discovery: None,
        ..Shape::of(d, s)
    };
    let cluster_type = "type.googleapis.com/envoy.config.cluster.v3.Cluster";
    let clusters = shape
        .clusters(&d.backends)
        .into_iter()
        .chain(d.etcd.iter().flat_map(crate::etcd::clusters))
        .map(|c| c.first("@type", text(cluster_type)));
    let resources = |items: Vec<Node>| {
        let json = map([("resources", list(items))]).json();
        format!("{json:#}\n")
    };
    let filter = |name: &str, plugin: &str| {
        let config = map([
            (
                "@type",
                text("type.googleapis.com/envoy.config.core.v3.TypedExtensionConfig"),
            ),
            ("name", text(name)),
            ("typed_config", shape.wasm_config(name, "", plugin)),
        ]);
        (filter_file(dir, name), resources(vec![config]))
    };
    vec![
        (clusters_file(dir), resources(clusters.collect())),
        filter("upcheck", &d.plugin),
        filter("upcheck-status", &d.page_plugin),
    ]
}
