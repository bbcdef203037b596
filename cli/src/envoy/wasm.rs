//! The upcheck filter as Envoy loads it: the wasm filter, inline or read from its own file
//! (ECDS), its VM, and the plugin configuration it is given.

use super::{filter_file, Shape};
use crate::tree::{lines, list, map, plain, text, Node};

/// The resource type of a wasm filter's configuration.
const WASM_TYPE: &str = "type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm";

impl Shape {
    /// The wasm filter as plugin `name`, with the plugin configuration `plugin` (JSON),
    /// explained by `about`.
    /// With [`Shape::discovery`] the filter names the file its configuration is read from and
    /// Envoy takes each new one in for the streams that start after it (ECDS), leaving the
    /// listener and its connections as they are.
    pub fn wasm_filter(&self, name: &str, about: &str, plugin: &str) -> Node {
        let Some(dir) = &self.discovery else {
            return map([
                ("name", text("envoy.filters.http.wasm")),
                ("typed_config", self.wasm_config(name, about, plugin)),
            ]);
        };
        let source = map([
            (
                "path_config_source",
                map([("path", text(filter_file(dir, name).display().to_string()))]),
            ),
            ("resource_api_version", plain("V3")),
        ]);
        map([
            ("name", text(name)),
            (
                "config_discovery",
                map([
                    ("config_source", source),
                    ("type_urls", list([text(WASM_TYPE)])),
                ]),
            ),
        ])
        .note(format!(
            "{about} Read from the file named (`upcheck backends` rewrites it): the \
             configuration in force is there."
        ))
    }

    /// The wasm filter's own configuration as plugin `name`, with the plugin configuration
    /// `plugin` (JSON), explained by `about`.
    pub fn wasm_config(&self, name: &str, about: &str, plugin: &str) -> Node {
        map([
            ("@type", text(WASM_TYPE)),
            (
                "config",
                map([
                    ("name", text(name)),
                    ("root_id", text("upcheck")),
                    ("vm_config", self.vm_config()),
                    (
                        "failure_policy",
                        text("FAIL_RELOAD").note(
                            "A crashed VM is recreated instead of failing its worker's \
                                     requests for ever.",
                        ),
                    ),
                    ("configuration", plugin_configuration(plugin).note(about)),
                ]),
            ),
        ])
    }

    /// The VM every listener's upcheck runs in: one `vm_id`, one runtime, one module, so Envoy
    /// gives each thread one VM for all of them.
    pub fn vm_config(&self) -> Node {
        map([
            (
                "vm_id",
                text("upcheck")
                    .note("Every VM with this id shares health state (proxy-wasm shared data)."),
            ),
            ("runtime", text("envoy.wasm.runtime.v8")),
            (
                "code",
                map([("local", map([("filename", text(&self.wasm))]).flow())]),
            ),
        ])
    }
}

/// The plugin configuration `plugin` (JSON) as a wasm filter's `configuration`.
pub fn plugin_configuration(plugin: &str) -> Node {
    map([
        (
            "@type",
            text("type.googleapis.com/google.protobuf.StringValue"),
        ),
        ("value", lines(plugin)),
    ])
}
