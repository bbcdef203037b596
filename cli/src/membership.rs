//! A running balancer's backends, changed by one command: `upcheck backends --config FILE add`,
//! `drain`, `remove` and `list`.
//!
//! `upcheck envoy --membership -o FILE` writes FILE so that Envoy reads its clusters (CDS) and
//! both filters' configurations (ECDS) from files in `FILE.d/`, and keeps there what it was
//! written from ([`State`]: the input, the routing, the command line). A change edits that
//! input and writes every file again from it with the same code `upcheck envoy` uses, each
//! replaced by an atomic rename, which Envoy takes in at once: the clusters, the pool and the
//! plugin configuration never disagree, no listener is touched (a filter configuration read by
//! ECDS applies to the streams that start after it, on the connections already open), and an
//! Envoy restarted on FILE reads the same backends. Measured on Envoy 1.40 (docs/deploying.md).
//!
//! An added backend's cluster goes in first, then the filters' configurations naming it: the
//! filter probes it at once and, as for any backend it has not heard from, routes no user to it
//! before its first probe passes. A removed backend leaves the filters' configurations first
//! (no new request from that moment), then, once Envoy's count of its requests in flight is zero
//! (or `--timeout` passed), its cluster goes. The command reads both from Envoy's admin
//! interface and the status page, on loopback, as FILE names them.
//!
//! Every refusal leaves every file as it was. Two commands at once: the second is told to retry
//! (a lock file, made with `O_EXCL`, for the length of a change).

use std::collections::BTreeMap;
use std::fs;
use std::io::{self, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ipnet::IpNet;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use upcheck_policy::RoutingMode;

use crate::deployment::{plan, Deployment};
use crate::envoy::{clusters_file, membership_files, render, Settings};
use crate::etcd::Etcd;
use crate::http1::{get, get_json};
use crate::output;
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
}

/// Why a command failed.
#[derive(Debug)]
pub enum Refusal {
    /// The command or its input cannot be used; nothing was changed (exit status 2).
    Input(String),
    /// A file could not be written, or Envoy did not take the change (exit status 1).
    Output(String),
}

fn input(message: impl Into<String>) -> Refusal {
    Refusal::Input(message.into())
}

/// A change to the membership.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// Adds backend `name` at `address` (`host:port`) with `weight` (default 1).
    Add {
        /// Its name, as upstreams are named.
        name: String,
        /// Where it listens.
        address: String,
        /// Its share of the traffic.
        weight: Option<u32>,
    },
    /// Drains backend `name` (`upstreams[].drain`), or ends its drain.
    Drain {
        /// Its name.
        name: String,
        /// Whether it drains from now on.
        drained: bool,
    },
    /// Removes backend `name`, after its requests in flight have ended or `timeout` passed;
    /// the last backend in service only with `force`.
    Remove {
        /// Its name.
        name: String,
        /// How long to wait for its requests in flight. Default 30 s.
        timeout: Duration,
        /// Whether it may be the last backend in service.
        force: bool,
    },
}

/// The directory of FILE's membership.
pub fn directory(file: &Path) -> io::Result<PathBuf> {
    let absolute = std::path::absolute(file)?;
    let mut name = absolute.file_name().unwrap_or_default().to_owned();
    name.push(".d");
    Ok(absolute.with_file_name(name))
}

fn state_file(dir: &Path) -> PathBuf {
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

    fn upstreams_mut(&mut self) -> Result<&mut Vec<Value>, Refusal> {
        self.input
            .get_mut("upstreams")
            .and_then(Value::as_array_mut)
            .ok_or_else(|| input("the membership has no `upstreams` list"))
    }
}

/// Writes `file` and its membership directory for `deployment` as `upcheck envoy --membership`
/// does: the state, the files Envoy reads while it runs, then `file` itself.
pub fn write(file: &Path, state: &State) -> Result<(), Refusal> {
    let (deployment, settings) = state.plan(file)?;
    let dir = directory(file).map_err(|e| Refusal::Output(e.to_string()))?;
    fs::create_dir_all(&dir)
        .map_err(|e| Refusal::Output(format!("{}: cannot create: {e}", dir.display())))?;
    write_files(&dir, state, &deployment, &settings)?;
    replace(file, &render(&deployment, &settings))
}

fn replace(path: &Path, text: &str) -> Result<(), Refusal> {
    output::replace(path, text)
        .map_err(|e| Refusal::Output(format!("{}: cannot write: {e}", path.display())))
}

/// The state, then the clusters, then each filter's configuration: a backend's cluster is in
/// place before any filter names it.
fn write_files(
    dir: &Path,
    state: &State,
    deployment: &Deployment,
    settings: &Settings,
) -> Result<(), Refusal> {
    write_state(dir, state)?;
    write_part(deployment, settings, Part::Clusters)?;
    write_part(deployment, settings, Part::Filters)
}

fn write_state(dir: &Path, state: &State) -> Result<(), Refusal> {
    let json = serde_json::to_string_pretty(state)
        .map_err(|e| Refusal::Output(format!("the membership as JSON: {e}")))?;
    replace(&state_file(dir), &format!("{json}\n"))
}

/// Which of the files Envoy reads.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Part {
    /// The clusters (CDS).
    Clusters,
    /// Both filters' configurations (ECDS).
    Filters,
}

fn write_part(deployment: &Deployment, settings: &Settings, part: Part) -> Result<(), Refusal> {
    for (path, text) in membership_files(deployment, settings) {
        let clusters = path.file_name() == clusters_file(Path::new("")).file_name();
        if clusters == (part == Part::Clusters) {
            replace(&path, &text)?;
        }
    }
    Ok(())
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
    serde_json::from_slice(&state)
        .map_err(|e| input(format!("{}: not a membership: {e}", path.display())))
}

/// Holds FILE's membership for the length of one change.
struct Lock(PathBuf);

impl Lock {
    fn take(dir: &Path) -> Result<Lock, Refusal> {
        let path = dir.join(".lock");
        match fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
        {
            Ok(mut lock) => {
                let _ = writeln!(lock, "{}", std::process::id());
                Ok(Lock(path))
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Err(input(format!(
                "another `upcheck backends` is changing these backends ({} exists): retry when \
                 it is done (remove the file if no such command runs)",
                path.display()
            ))),
            Err(e) => Err(Refusal::Output(format!("{}: {e}", path.display()))),
        }
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.0);
    }
}

/// Makes `change` to FILE's membership and waits until Envoy has it; what happened, in lines.
pub fn change(file: &Path, change: &Change) -> Result<Vec<String>, Refusal> {
    let before = read(file)?;
    if let Some(etcd) = &before.etcd {
        return crate::etcd_membership::change(file, &before, etcd, change);
    }
    let dir = directory(file).map_err(|e| input(e.to_string()))?;
    let _lock = Lock::take(&dir)?;
    let after = edited(file, &before, change)?;
    let mut said = Vec::new();
    match change {
        Change::Add { name, .. } => {
            let (deployment, settings) = after.plan(file)?;
            let started = Instant::now();
            write_state(&dir, &after)?;
            write_part(&deployment, &settings, Part::Clusters)?;
            let (host, address) = deployment
                .backends
                .last()
                .map(|b| {
                    (
                        host_prefix(deployment.routing, &b.cluster, &b.address.to_string()),
                        b.address.to_string(),
                    )
                })
                .unwrap_or_default();
            let cluster = wait(Duration::from_secs(10), || {
                Ok(has_host(&get(before.admin, "/clusters")?.1, &host))
            });
            write_part(&deployment, &settings, Part::Filters)?;
            let applied = wait(Duration::from_secs(10), || {
                in_force(before.admin, "upcheck", &deployment.plugin)
            });
            said.push(match (cluster, applied) {
                (Ok(true), Ok(true)) => format!(
                    "{name} added at {address}: in force in Envoy after {} ms; it takes users \
                     once its first probe passes",
                    started.elapsed().as_millis()
                ),
                (Err(e), _) | (_, Err(e)) => format!(
                    "{name} added at {address} to the files; Envoy's admin interface at {}: {e} \
                     (Envoy takes it in when it runs)",
                    before.admin
                ),
                _ => format!(
                    "{name} added at {address} to the files; Envoy's admin interface at {} did \
                     not show it in force within 10 s",
                    before.admin
                ),
            });
        }
        Change::Drain { name, drained } => {
            let at = known(&before, name)?;
            let (deployment, settings) = after.plan(file)?;
            let started = Instant::now();
            write_state(&dir, &after)?;
            write_part(&deployment, &settings, Part::Filters)?;
            let applied = wait(Duration::from_secs(10), || {
                in_force(before.admin, "upcheck", &deployment.plugin)
            });
            let host = deployment
                .backends
                .get(at)
                .map(|b| host_prefix(deployment.routing, &b.cluster, &b.address.to_string()))
                .unwrap_or_default();
            let in_flight = get(before.admin, "/clusters").map(|(_, c)| active(&c, &host));
            said.push(match (applied, drained, in_flight) {
                (Ok(true), true, Ok(n)) => format!(
                    "{name} drained: no new requests after {} ms; {n} in flight finish; still \
                     probed",
                    started.elapsed().as_millis()
                ),
                (Ok(true), false, _) => format!(
                    "{name} no longer drained after {} ms: it takes users as its probes allow",
                    started.elapsed().as_millis()
                ),
                (Ok(true), true, Err(_)) => format!(
                    "{name} drained: no new requests after {} ms",
                    started.elapsed().as_millis()
                ),
                (Ok(false), ..) => format!(
                    "{name}: the files say so; Envoy's admin interface at {} did not show it in \
                     force within 10 s",
                    before.admin
                ),
                (Err(e), ..) => format!(
                    "{name}: the files say so; Envoy's admin interface at {}: {e} (Envoy takes \
                     it in when it runs)",
                    before.admin
                ),
            });
        }
        Change::Remove { name, timeout, .. } => {
            let at = known(&before, name)?;
            let (current, _) = before.plan(file)?;
            let host = current
                .backends
                .get(at)
                .map(|b| host_prefix(current.routing, &b.cluster, &b.address.to_string()))
                .unwrap_or_default();
            let (deployment, settings) = after.plan(file)?;
            let started = Instant::now();
            // The filters first: no new request from then on; the clusters keep it meanwhile.
            write_part(&deployment, &settings, Part::Filters)?;
            let applied = wait(Duration::from_secs(10), || {
                in_force(before.admin, "upcheck", &deployment.plugin)
            });
            let stopped = started.elapsed();
            let drained = wait(*timeout, || {
                Ok(active(&get(before.admin, "/clusters")?.1, &host) == 0)
            });
            write_state(&dir, &after)?;
            write_part(&deployment, &settings, Part::Clusters)?;
            said.push(format!(
                "{name} removed: {} after {} ms; {} after {} ms; its cluster is gone",
                match applied {
                    Ok(true) => "no new requests",
                    _ => "Envoy's admin interface did not show the change in force",
                },
                stopped.as_millis(),
                match drained {
                    Ok(true) => "its requests in flight had ended",
                    Ok(false) => "its requests in flight still ran at --timeout",
                    Err(_) => "Envoy's admin interface did not say how many requests it had",
                },
                started.elapsed().as_millis()
            ));
        }
    }
    Ok(said)
}

/// `before` with `change` made to its input, checked as `upcheck envoy` checks one: a
/// duplicate, an unknown name, a drain already in place, the only backend, or (without `force`)
/// the last one in service by `file`'s status page, refused by name.
pub fn edited(file: &Path, before: &State, change: &Change) -> Result<State, Refusal> {
    let mut after = before.clone();
    match change {
        Change::Add {
            name,
            address,
            weight,
        } => {
            if find(before, name).is_some() {
                return Err(input(format!("{name}: already a backend; remove it first")));
            }
            let mut upstream = Map::new();
            upstream.insert("name".into(), Value::from(name.as_str()));
            upstream.insert("address".into(), Value::from(address.as_str()));
            if let Some(times) = before.removed.get(name) {
                upstream.insert("cluster".into(), Value::from(format!("{name}-{times}")));
            }
            if let Some(weight) = weight {
                upstream.insert("weight".into(), Value::from(*weight));
            }
            after.upstreams_mut()?.push(Value::Object(upstream));
            let added = format!("upstreams[{}].", before.upstreams().len());
            after.plan(file).map_err(|refusal| match refusal {
                // The module names the field; the operator wrote a name and an address.
                Refusal::Input(m) => match m.strip_prefix(&added) {
                    Some(rest) => input(format!("{name}: {rest}")),
                    None => Refusal::Input(m),
                },
                other => other,
            })?;
        }
        Change::Drain { name, drained } => {
            let at = known(before, name)?;
            let current = before
                .upstreams()
                .get(at)
                .is_some_and(|u| u["drain"] == true);
            if current == *drained {
                return Err(input(match drained {
                    true => format!("{name}: already drained (`drain {name} --end` ends it)"),
                    false => format!("{name}: not drained by `upcheck backends drain`"),
                }));
            }
            if let Some(Value::Object(upstream)) = after.upstreams_mut()?.get_mut(at) {
                match drained {
                    true => upstream.insert("drain".into(), Value::Bool(true)),
                    false => upstream.remove("drain"),
                };
            }
            after.plan(file)?;
        }
        Change::Remove { name, force, .. } => {
            let at = known(before, name)?;
            let (current, _) = before.plan(file)?;
            let others = serving(before.status, &page_path(&current), name)
                .unwrap_or(before.upstreams().len().saturating_sub(1));
            if !force && others == 0 {
                return Err(input(format!(
                    "{name}: the last backend in service; removing it leaves users nothing \
                     (--force removes it anyway)"
                )));
            }
            after.upstreams_mut()?.remove(at);
            if after.upstreams().is_empty() {
                return Err(input(format!(
                    "{name}: the only backend; an upcheck pool needs one (add another first)"
                )));
            }
            *after.removed.entry(name.clone()).or_default() += 1;
            after.plan(file)?;
        }
    }
    Ok(after)
}

/// The backends, one line each: name, address, and what the status page says of it now.
pub fn list(file: &Path) -> Result<Vec<String>, Refusal> {
    let state = read(file)?;
    if let Some(etcd) = &state.etcd {
        return crate::etcd_membership::list(file, &state, etcd);
    }
    Ok(now(file, &state)?
        .iter()
        .map(|b| format!("{}\t{}\t{}", b.name, b.address, b.state))
        .collect())
}

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

/// Makes FILE's backends `upstreams`, with `removed` its counts of removals, as a change would
/// (the clusters first when one is gained, the filters first otherwise), and waits until
/// Envoy has them: what changed, or none when FILE had them already.
pub fn adopt(
    file: &Path,
    upstreams: Vec<Value>,
    removed: BTreeMap<String, u32>,
) -> Result<Option<String>, Refusal> {
    let before = read(file)?;
    if before.upstreams() == upstreams.as_slice() && before.removed == removed {
        return Ok(None);
    }
    let dir = directory(file).map_err(|e| input(e.to_string()))?;
    let _lock = Lock::take(&dir)?;
    let mut after = before.clone();
    *after.upstreams_mut()? = upstreams;
    after.removed = removed;
    let (had, _) = before.plan(file)?;
    let (deployment, settings) = after.plan(file)?;
    let gained: Vec<String> = deployment
        .backends
        .iter()
        .filter(|b| !had.backends.iter().any(|h| h.cluster == b.cluster))
        .map(|b| host_prefix(deployment.routing, &b.cluster, &b.address.to_string()))
        .collect();
    let started = Instant::now();
    write_state(&dir, &after)?;
    if gained.is_empty() {
        write_part(&deployment, &settings, Part::Filters)?;
        write_part(&deployment, &settings, Part::Clusters)?;
    } else {
        write_part(&deployment, &settings, Part::Clusters)?;
        let _ = wait(Duration::from_secs(10), || {
            let clusters = get(before.admin, "/clusters")?.1;
            Ok(gained.iter().all(|host| has_host(&clusters, host)))
        });
        write_part(&deployment, &settings, Part::Filters)?;
    }
    let applied = wait(Duration::from_secs(10), || {
        in_force(before.admin, "upcheck", &deployment.plugin)
    });
    let names: Vec<&str> = deployment
        .backends
        .iter()
        .map(|b| b.name.as_str())
        .collect();
    Ok(Some(match applied {
        Ok(true) => format!(
            "backends {}: in force in Envoy after {} ms",
            names.join(", "),
            started.elapsed().as_millis()
        ),
        _ => format!(
            "backends {}: in the files; Envoy's admin interface at {} did not show them in force",
            names.join(", "),
            before.admin
        ),
    }))
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

/// Where backend `name` is in `state`, or a refusal naming the backends there are.
fn known(state: &State, name: &str) -> Result<usize, Refusal> {
    find(state, name).ok_or_else(|| {
        let names: Vec<String> = state.upstreams().iter().filter_map(name_of).collect();
        input(format!(
            "{name}: not a backend (the backends are {})",
            names.join(", ")
        ))
    })
}

fn find(state: &State, name: &str) -> Option<usize> {
    state
        .upstreams()
        .iter()
        .position(|u| name_of(u).as_deref() == Some(name))
}

fn name_of(upstream: &Value) -> Option<String> {
    upstream["name"].as_str().map(str::to_owned)
}

fn page_path(deployment: &Deployment) -> String {
    format!("{}.json", deployment.page.path)
}

/// How `/clusters` begins the lines of a backend's host: its own cluster's in cluster routing,
/// its endpoint's in the pool in host routing.
fn host_prefix(routing: RoutingMode, cluster: &str, address: &str) -> String {
    match routing {
        RoutingMode::Cluster => format!("{cluster}::"),
        RoutingMode::Host => format!("{}::{address}::", crate::deployment::POOL),
    }
}

/// Whether `/clusters` shows a host whose lines begin with `host`.
fn has_host(clusters: &str, host: &str) -> bool {
    clusters.lines().any(|line| line.starts_with(host))
}

/// Whether filter `name`'s configuration in force in Envoy is `plugin` (its ECDS config dump).
fn in_force(admin: SocketAddr, name: &str, plugin: &str) -> io::Result<bool> {
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
fn serving(status: SocketAddr, path: &str, name: &str) -> Option<usize> {
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
fn active(clusters: &str, host: &str) -> u64 {
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
fn wait(timeout: Duration, mut done: impl FnMut() -> io::Result<bool>) -> io::Result<bool> {
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

    #[test]
    fn the_membership_lives_beside_the_file_it_belongs_to() {
        let dir = directory(Path::new("/etc/upcheck/envoy.yaml")).unwrap();
        assert_eq!(dir, Path::new("/etc/upcheck/envoy.yaml.d"));
    }
}
