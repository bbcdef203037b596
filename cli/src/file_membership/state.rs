//! What FILE was written from ([`State`], kept in `FILE.d/membership.json`), the deployment it
//! writes, which addresses a backend may have, and why a command is refused ([`Refusal`]).

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use ipnet::IpNet;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::change_record::{self, Record};
use crate::deployment::{plan, Deployment};
use crate::envoy::Settings;
use crate::etcd::Etcd;
use crate::plugin;

/// What FILE was written from, kept in `FILE.d/membership.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct State {
    /// The plugin configuration as `upcheck envoy` read it, `routing` first and every backend
    /// with its address: what a change edits.
    pub input: Map<String, Value>,
    /// The port probes go to instead of each backend's own (Caddy's `health_checks.active.port`).
    pub probe_port: Option<u16>,
    /// Where users connect.
    pub listen: SocketAddr,
    /// Envoy's admin interface.
    pub admin: SocketAddr,
    /// The status page's listener.
    pub status: SocketAddr,
    /// Path of upcheck.wasm on the balancer.
    pub wasm: String,
    /// Envoy's worker threads.
    pub concurrency: u32,
    /// What FILE was first written from.
    pub written_from: String,
    /// How many times each backend name was removed: one added back under a removed name gets
    /// a cluster named for the count (`app3-1`), and so a key of its own in the process-wide
    /// tables, so that it starts unknown, with none of the evidence its namesake left.
    #[serde(default)]
    pub removed: BTreeMap<String, u32>,
    /// The etcd cluster of the fleet FILE's balancer belongs to (`upcheck envoy --etcd`): the
    /// membership is then the fleet's, in etcd ([`crate::etcd_membership`]). Default: none.
    #[serde(default)]
    pub etcd: Option<Etcd>,
    /// The networks a backend's address must be in (`upcheck envoy --allow`), so that whoever
    /// can write the membership (these files, or the fleet's key in etcd) cannot aim the
    /// balancer at the internet or a metadata address; a backend named by a host name is then
    /// refused too, since its name can resolve anywhere. Default: none, any address. Whatever
    /// the list, never the balancer's own listeners.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed: Vec<IpNet>,
    /// Who asked for the last changes and why, the latest last ([`crate::change_record`]).
    /// Default: none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<Record>,
}

/// Why a command failed.
#[derive(Debug)]
pub enum Refusal {
    /// The command or its input cannot be used; nothing was changed (exit status 2).
    Input(String),
    /// A file could not be written, or Envoy did not take the change (exit status 1).
    Output(String),
}

/// A refusal of the command or its input.
pub(super) fn input(message: impl Into<String>) -> Refusal {
    Refusal::Input(message.into())
}

/// The directory of FILE's membership.
pub fn directory(file: &Path) -> io::Result<PathBuf> {
    let absolute = std::path::absolute(file)?;
    let mut name = absolute.file_name().unwrap_or_default().to_owned();
    name.push(".d");
    Ok(absolute.with_file_name(name))
}

/// Where FILE's state is kept in its membership directory `dir`.
pub(super) fn state_file(dir: &Path) -> PathBuf {
    dir.join("membership.json")
}

impl State {
    /// The deployment and settings this state writes, for `file`.
    pub fn plan(&self, file: &Path) -> Result<(Deployment, Settings), Refusal> {
        for (at, upstream) in self.upstreams().iter().enumerate() {
            if let Some(address) = upstream["address"].as_str() {
                self.admits(address)
                    .map_err(|why| input(format!("upstreams[{at}].address: {address:?} {why}")))?;
            }
        }
        let text = serde_json::to_string(&Value::Object(self.input.clone()))
            .map_err(|e| input(format!("the membership cannot be written as JSON: {e}")))?;
        let mut source = plugin::read(text.as_bytes()).map_err(|e| input(e.to_string()))?;
        source.probe_port = self.probe_port;
        let mut deployment = plan(&source, None).map_err(|e| input(e.to_string()))?;
        deployment.etcd = self.etcd.clone();
        let settings = Settings {
            listen: self.listen,
            admin: self.admin,
            status: self.status,
            wasm: self.wasm.clone(),
            concurrency: self.concurrency,
            input: self.written_from.clone(),
            membership: Some(directory(file).map_err(|e| input(e.to_string()))?),
        };
        Ok((deployment, settings))
    }

    /// Whether a backend may be at `address` (`host:port`): why not, if not.
    fn admits(&self, address: &str) -> Result<(), String> {
        let Ok(at) = address.parse::<SocketAddr>() else {
            return match self.allowed.is_empty() {
                true => Ok(()),
                false => Err("is a host name, and the balancer admits addresses in its \
                              --allow networks only"
                    .into()),
            };
        };
        for (listener, what) in [
            (self.listen, "where users connect"),
            (self.admin, "Envoy's admin interface"),
            (self.status, "the status page"),
        ] {
            let local = listener.ip().is_loopback() || listener.ip().is_unspecified();
            let same_host = at.ip() == listener.ip()
                || at.ip().is_unspecified()
                || (at.ip().is_loopback() && local);
            if at.port() == listener.port() && same_host {
                return Err(format!("is the balancer's own listener ({what})"));
            }
        }
        let ip = at.ip().to_canonical();
        if self.allowed.is_empty() || self.allowed.iter().any(|net| net.contains(&ip)) {
            return Ok(());
        }
        let nets: Vec<String> = self.allowed.iter().map(IpNet::to_string).collect();
        Err(format!(
            "is outside the networks the balancer admits (--allow {})",
            nets.join(",")
        ))
    }

    /// The backends, in order: each upstream of the input.
    pub fn upstreams(&self) -> &[Value] {
        self.input
            .get("upstreams")
            .and_then(Value::as_array)
            .map_or(&[], Vec::as_slice)
    }

    pub(super) fn upstreams_mut(&mut self) -> Result<&mut Vec<Value>, Refusal> {
        self.input
            .get_mut("upstreams")
            .and_then(Value::as_array_mut)
            .ok_or_else(|| input("the membership has no `upstreams` list"))
    }
}

/// Reads FILE's state, or says why FILE is not one `upcheck envoy --membership` wrote.
pub fn read(file: &Path) -> Result<State, Refusal> {
    let text = fs::read_to_string(file)
        .map_err(|e| input(format!("{}: cannot read: {e}", file.display())))?;
    let dir = directory(file).map_err(|e| input(e.to_string()))?;
    let path = state_file(&dir);
    let not_ours = || {
        input(format!(
            "{}: not written by `upcheck envoy --membership -o {}` (its clusters and filters \
             are not read from {}): write it so, then change its backends",
            file.display(),
            file.display(),
            dir.display()
        ))
    };
    if !text.contains(&dir.display().to_string()) {
        return Err(not_ours());
    }
    let state = fs::read(&path).map_err(|_| not_ours())?;
    let state: State = serde_json::from_slice(&state)
        .map_err(|e| input(format!("{}: not a membership: {e}", path.display())))?;
    change_record::check(&state.history)
        .map_err(|why| input(format!("{}: {why}", path.display())))?;
    Ok(state)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_membership_lives_beside_the_file_it_belongs_to() {
        let dir = directory(Path::new("/etc/upcheck/envoy.yaml")).unwrap();
        assert_eq!(dir, Path::new("/etc/upcheck/envoy.yaml.d"));
    }
}
