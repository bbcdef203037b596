//! The operators' move from Caddy, on this machine: their Caddy JSON with its two backends'
//! addresses replaced by fake upstreams', and the Envoy configuration `upcheck envoy` writes from
//! it (host routing, the recommended deployment), as docs/moving-from-caddy.md runs it.
//!
//! The configuration comes from the built `upcheck` binary rather than from the pieces of it the
//! harness serves ([`crate::envoy_config`]), so what runs is what an operator would run, command
//! line included: the migration test and
//! `make run` start Envoy on exactly this file ([`crate::envoy::EnvoyBuilder::start_yaml`]).
//!
//! The shipped `config/envoy.yaml` and `config/envoy-simple.yaml` are that command's output from
//! `config/caddy.json` (`cli/tests/commands/shipped_configs.rs` keeps them so); [`shipped`] gives
//! one of them with only what must differ on this machine replaced, for a test that runs the
//! file an operator gets without running the binary.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{ensure, Context, Result};
use tempfile::TempDir;

use crate::envoy::{module, ConfigPorts};

/// The addresses the operators' backends dial in `config/caddy.json`, app1's then app2's.
pub const OPERATORS_DIALS: [&str; 2] = ["127.0.0.1:3001", "127.0.0.1:3002"];

/// `config/caddy.json`, the operators' running Caddy configuration as `curl -s
/// localhost:2019/config/` prints it.
pub fn operators_caddy_json() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../config/caddy.json")
}

/// Caddy's JSON `text` with each of [`OPERATORS_DIALS`] replaced by the address of the same
/// backend in `backends`; an error if `text` does not dial one of them (as a whole JSON string).
pub fn dialling(text: &str, backends: [SocketAddr; 2]) -> Result<String> {
    let mut text = text.to_owned();
    for (dial, addr) in OPERATORS_DIALS.iter().zip(backends) {
        let quoted = format!("\"{dial}\"");
        ensure!(text.contains(&quoted), "the Caddy JSON dials no {quoted}");
        text = text.replace(&quoted, &format!("\"{addr}\""));
    }
    Ok(text)
}

/// An Envoy configuration `upcheck envoy` wrote, in a temporary directory removed when dropped.
pub struct Written {
    /// Holds `caddy.json` (the input) and `envoy.yaml` (the output).
    pub dir: TempDir,
    /// Where it serves: `--listen`, `--admin` and `--status`.
    pub ports: ConfigPorts,
}

impl Written {
    /// The written `envoy.yaml`'s path.
    pub fn path(&self) -> PathBuf {
        self.dir.path().join("envoy.yaml")
    }

    /// The written `envoy.yaml`'s text.
    pub fn yaml(&self) -> Result<String> {
        std::fs::read_to_string(self.path())
            .with_context(|| format!("cannot read {}", self.path().display()))
    }
}

/// Replaces every `from` in `text` by `to`; an error if there is none, so a changed file cannot
/// silently keep, say, its production address.
pub fn replace_all(text: &str, from: &str, to: &str) -> Result<String> {
    ensure!(text.contains(from), "the file has no {from:?} any more");
    Ok(text.replace(from, to))
}

/// `config/<file>` as shipped, with only what an operator edits replaced: the module path, the
/// backends' addresses (127.0.0.1:3001 and :3002, [`OPERATORS_DIALS`], become `backends`, app1's
/// then app2's, in the clusters and, in host routing, in the plugin configuration) and the
/// listener, admin and status page ports (`ports`), all on 127.0.0.1. An error if the file no
/// longer has one of them.
pub fn shipped(file: &str, ports: &ConfigPorts, backends: [SocketAddr; 2]) -> Result<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../config")
        .join(file);
    let mut text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    let port = |addr: SocketAddr| format!("port_value: {}", addr.port());
    let edits = [
        ("/etc/upcheck/upcheck.wasm", module()?.display().to_string()),
        ("address: 0.0.0.0", "address: 127.0.0.1".to_owned()),
        ("port_value: 8080", port(ports.listener)),
        ("port_value: 9901", port(ports.admin)),
        ("port_value: 9902", port(ports.status)),
        ("port_value: 3001", port(backends[0])),
        ("port_value: 3002", port(backends[1])),
    ];
    for (from, to) in &edits {
        text = replace_all(&text, from, to)?;
    }
    // In host routing the plugin configuration names the same backends by address.
    if text.contains("\"routing\": \"host\"") {
        for (dial, addr) in OPERATORS_DIALS.iter().zip(backends) {
            text = replace_all(&text, dial, &addr.to_string())?;
        }
    }
    Ok(text)
}

/// Writes `caddy_json` as `caddy.json` in a new temporary directory and runs there, with the
/// `upcheck` binary at `upcheck`, `upcheck envoy --from-caddy caddy.json -o envoy.yaml --wasm
/// <UPCHECK_WASM> --listen --admin --status` with `ports` and `--static`: the single-file shape,
/// whose text runs wherever it is copied ([`crate::envoy::EnvoyBuilder::start_yaml`]); an error
/// with what it said unless it exits 0.
pub fn write_envoy_yaml(upcheck: &Path, caddy_json: &str, ports: &ConfigPorts) -> Result<Written> {
    write_envoy_yaml_with(upcheck, caddy_json, ports, &["--static"])
}

/// The same, with `more` options to `upcheck envoy` instead of `--static`: none writes the
/// default, whose backends `upcheck backends` changes, in files of `envoy.yaml.d/` that Envoy
/// reads by their absolute paths, so `Written` must outlive the Envoy running it.
pub fn write_envoy_yaml_with(
    upcheck: &Path,
    caddy_json: &str,
    ports: &ConfigPorts,
    more: &[&str],
) -> Result<Written> {
    // Absolute: the binary runs in the temporary directory, where a relative path would not lead.
    let upcheck = std::fs::canonicalize(upcheck)
        .with_context(|| format!("no upcheck binary at {}", upcheck.display()))?;
    let dir = tempfile::Builder::new()
        .prefix("upcheck-caddy-")
        .tempdir()?;
    std::fs::write(dir.path().join("caddy.json"), caddy_json)?;
    let output = Command::new(&upcheck)
        .args(["envoy", "--from-caddy", "caddy.json", "-o", "envoy.yaml"])
        .arg("--wasm")
        .arg(module()?)
        .args(["--listen", &ports.listener.to_string()])
        .args(["--admin", &ports.admin.to_string()])
        .args(["--status", &ports.status.to_string()])
        .args(more)
        .current_dir(dir.path())
        .output()
        .with_context(|| format!("cannot run {}", upcheck.display()))?;
    ensure!(
        output.status.success(),
        "upcheck envoy --from-caddy caddy.json ({}): {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(Written { dir, ports: *ports })
}
