//! A fleet's backends, changed by one command on any of its balancers: the membership lives in
//! etcd, under the pool's prefix, and each balancer follows it.
//!
//! For a FILE written with `upcheck envoy --etcd … --membership`, `upcheck backends --config FILE
//! add|drain|remove` changes `{prefix}/v1/membership` by a transaction on the revision it read
//! (another operator's change in between: told to retry, nothing lost), and `upcheck backends
//! --config FILE follow`, run beside each balancer's Envoy, watches that key and makes its own
//! files say the same ([`file_membership::adopt`], the code a change on one balancer uses), so every
//! balancer routes only to the backends it names and an Envoy started later reads them from its
//! files once its follower has. Each follower reports under `{prefix}/v1/applied/{balancer}`,
//! living by a lease of its own, the revision it has in force and each backend's state: the
//! command waits for every follower to report the revision it wrote, and prints how long each
//! took. Every key is named by the core's layout ([`upcheck_policy::etcd::keys`]), the one the
//! balancers write by.
//!
//! A removal drains first: the membership marks the backend drained (no new request on any
//! balancer, still probed), the command waits until every follower reports none of its requests
//! in flight (or `--timeout`), then writes the membership without it and deletes the keys the
//! balancers kept of it (its probe duty, state, failures and ejection). A name added back gets a
//! cluster of its own, counted in the membership, so it starts unknown on every balancer alike.
//!
//! etcd is reached as FILE says the balancers reach it, over TLS when it says so, with the
//! operator's own certificate and user ([`Access`]) or else the balancers'. Each change is
//! recorded with who asked and why ([`Record`]), kept in the membership's value, checked by every
//! follower as the rest of it is.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::change_record::{self, Record};
use crate::etcd::Etcd;
use crate::etcd_access::Access;
use crate::etcd_client::Client;
use crate::file_membership::{self, edited, recorded, with_last, Backend, Change, Refusal, State};
use upcheck_policy::etcd::keys::Layout;

/// How long a follower's report outlives it.
const REPORT_TTL: Duration = Duration::from_secs(10);
/// How often a follower keeps its lease alive.
const KEEP_ALIVE: Duration = Duration::from_secs(3);
/// How often a follower looks at its backends for a report that changed.
const REPORT_EVERY: Duration = Duration::from_millis(500);
/// How long the command waits for every follower to have a change in force.
const APPLY_PATIENCE: Duration = Duration::from_secs(10);

/// The membership as etcd holds it: the backends as the plugin configuration writes them, and
/// how many times each name was removed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Shared {
    /// Always `"membership/v1"`: a value of another kind or version is refused, not misread.
    kind: String,
    upstreams: Vec<Value>,
    #[serde(default)]
    removed: BTreeMap<String, u32>,
    /// Who asked for the last changes and why, the latest last.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    history: Vec<Record>,
}

const KIND: &str = "membership/v1";

/// A follower's report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Applied {
    /// The revision of the membership it has in force (0: none from etcd yet).
    revision: i64,
    /// Its backends as it has them.
    backends: Vec<Backend>,
}

/// Where the fleet's keys are, and how to reach them.
struct Fleet {
    client: Client,
    keys: Layout,
}

impl Fleet {
    fn open(file: &Path, state: &State, etcd: &Etcd, access: &Access) -> Result<Fleet, Refusal> {
        let (deployment, _) = state.plan(file)?;
        let prefix = deployment
            .config
            .fleet
            .as_ref()
            .map(|f| f.prefix.clone())
            .unwrap_or_default();
        let client = access.client(file, state, etcd)?;
        Ok(Fleet {
            client,
            keys: Layout::new(&prefix),
        })
    }

    /// The membership in etcd and the revision that wrote it; none (revision 0) before any
    /// command wrote one.
    fn read(&self) -> Result<(Option<Shared>, i64), Refusal> {
        let key = self.keys.membership();
        let snapshot = self.client.range(&key, false).map_err(output)?;
        let Some(entry) = snapshot.entries.into_iter().next() else {
            return Ok((None, 0));
        };
        let shared: Shared = serde_json::from_slice(&entry.value)
            .ok()
            .filter(|s: &Shared| s.kind == KIND)
            .ok_or_else(|| {
                Refusal::Input(format!(
                    "{key}: not a membership `upcheck backends` wrote; left as it is"
                ))
            })?;
        change_record::check(&shared.history).map_err(|why| {
            Refusal::Input(format!(
                "{key}: {why}: not a membership `upcheck backends` wrote; left as it is"
            ))
        })?;
        Ok((Some(shared), entry.mod_revision))
    }

    /// Writes `state`'s backends as the membership if it is still at `revision`: the new
    /// revision.
    fn write(&self, state: &State, revision: i64) -> Result<i64, Refusal> {
        let shared = Shared {
            kind: KIND.into(),
            upstreams: state.upstreams().to_vec(),
            removed: state.removed.clone(),
            history: state.history.clone(),
        };
        let value = serde_json::to_vec(&shared)
            .map_err(|e| Refusal::Output(format!("the membership as JSON: {e}")))?;
        let key = self.keys.membership();
        self.client
            .put_if(&key, &value, revision)
            .map_err(|e| self.refused_write(&key, e))?
            .ok_or_else(|| {
                Refusal::Input(
                    "the fleet's membership changed while this command ran (another operator?): \
                     nothing was changed; retry"
                        .into(),
                )
            })
    }

    /// Each follower's report, by balancer.
    fn reports(&self) -> Result<Vec<(String, Applied)>, Refusal> {
        let prefix = self.keys.applied("");
        let snapshot = self.client.range(&prefix, true).map_err(output)?;
        Ok(snapshot
            .entries
            .into_iter()
            .filter_map(|e| {
                let balancer = e.key.strip_prefix(&prefix)?.to_owned();
                Some((balancer, serde_json::from_slice(&e.value).ok()?))
            })
            .collect())
    }

    /// Waits until every follower reports `revision` in force and, with `drained`, none of that
    /// backend's requests in flight (or the wait's end): a line per balancer.
    fn until_applied(
        &self,
        revision: i64,
        drained: Option<(&str, Duration)>,
    ) -> Result<Vec<String>, Refusal> {
        let started = Instant::now();
        let patience = drained.map_or(APPLY_PATIENCE, |(_, t)| t.max(APPLY_PATIENCE));
        let mut applied: BTreeMap<String, Duration> = BTreeMap::new();
        let mut idle: BTreeMap<String, Duration> = BTreeMap::new();
        let mut seen: Vec<String> = Vec::new();
        loop {
            let reports = self.reports()?;
            for (balancer, report) in &reports {
                if !seen.contains(balancer) {
                    seen.push(balancer.clone());
                }
                if report.revision >= revision {
                    applied.entry(balancer.clone()).or_insert(started.elapsed());
                    let quiet = drained.is_none_or(|(name, _)| {
                        report
                            .backends
                            .iter()
                            .find(|b| b.name == name)
                            .is_none_or(|b| b.in_flight == Some(0))
                    });
                    if quiet {
                        idle.entry(balancer.clone()).or_insert(started.elapsed());
                    }
                }
            }
            let done = seen.iter().all(|b| idle.contains_key(b));
            if done || started.elapsed() >= patience {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if seen.is_empty() {
            return Ok(vec![
                "no balancer follows the fleet's membership yet: run `upcheck backends --config \
                 FILE follow` beside each Envoy"
                    .into(),
            ]);
        }
        Ok(seen
            .iter()
            .map(|b| match (applied.get(b), idle.get(b), drained) {
                (Some(at), Some(quiet), Some((name, _))) => format!(
                    "{b}: in force after {} ms; none of {name}'s requests in flight after {} ms",
                    at.as_millis(),
                    quiet.as_millis()
                ),
                (Some(at), None, Some((name, _))) => format!(
                    "{b}: in force after {} ms; {name}'s requests in flight still ran at \
                     --timeout",
                    at.as_millis()
                ),
                (Some(at), ..) => format!("{b}: in force after {} ms", at.as_millis()),
                (None, ..) => format!(
                    "{b}: did not report it in force within {} s",
                    patience.as_secs()
                ),
            })
            .collect())
    }

    /// Deletes every key the balancers keep of backend `key` (`name@cluster`, and more after an
    /// `@` in host routing): [`Layout::of_backend`].
    /// What was done, in words: the keys deleted, or, where the operator's role may not delete
    /// them (docs/fleet.md's roles), left to expire with the balancers' leases they live by.
    fn forget(&self, backend: &str) -> Result<String, Refusal> {
        let snapshot = self.client.range(self.keys.mine(), true).map_err(output)?;
        let mut deleted = 0;
        for entry in snapshot.entries {
            if self.keys.of_backend(&entry.key, backend) {
                match self.client.delete(&entry.key) {
                    Ok(()) => deleted += 1,
                    Err(e) if e.to_string().contains("permission denied") => {
                        return Ok(format!(
                            "{deleted} keys the balancers kept of it deleted; the others expire \
                             with their balancers' leases (this user's role may not delete them)"
                        ))
                    }
                    Err(e) => return Err(output(e)),
                }
            }
        }
        Ok(format!("{deleted} keys the balancers kept of it deleted"))
    }
}

impl Fleet {
    /// A write of `key` that failed with `e`: etcd's permission denied said as what it means.
    fn refused_write(&self, key: &str, e: std::io::Error) -> Refusal {
        let text = e.to_string();
        if !text.contains("permission denied") {
            return Refusal::Output(text);
        }
        let user = self.client.user().map_or_else(
            || "no user (authentication off?)".to_owned(),
            |u| format!("user {u}"),
        );
        Refusal::Output(format!(
            "etcd refused to let {user} write {key} (permission denied): its role may not \
             write the membership; run as a user of the operators' role (--user, \
             UPCHECK_ETCD_PASSWORD), which docs/fleet.md gives"
        ))
    }
}

fn output(e: std::io::Error) -> Refusal {
    Refusal::Output(e.to_string())
}

/// `state` with the membership's backends in place of its own (itself before any was written).
fn as_shared(state: &State, shared: Option<Shared>) -> State {
    let mut view = state.clone();
    if let Some(shared) = shared {
        view.input
            .insert("upstreams".into(), Value::Array(shared.upstreams));
        view.removed = shared.removed;
        view.history = shared.history;
    }
    view
}

/// The name `backend` has in the balancers' keys: `name@cluster`.
fn shared_name(upstream: &Value) -> Option<String> {
    let name = upstream["name"].as_str()?;
    let cluster = upstream["cluster"].as_str().unwrap_or(name);
    Some(format!("{name}@{cluster}"))
}

/// Makes `change` to the fleet's membership, reached with `access` and recorded as `record`,
/// and waits until every follower has it.
pub fn change(
    file: &Path,
    state: &State,
    etcd: &Etcd,
    change: &Change,
    access: &Access,
    record: &Record,
) -> Result<Vec<String>, Refusal> {
    let fleet = Fleet::open(file, state, etcd, access)?;
    let (shared, revision) = fleet.read()?;
    let view = as_shared(state, shared);
    // Every refusal comes before anything is written.
    let after = recorded(edited(file, &view, change)?, record);
    let mut said = Vec::new();
    match change {
        Change::Remove { name, timeout, .. } => {
            let upstream = view
                .upstreams()
                .iter()
                .find(|u| u["name"] == name.as_str())
                .cloned()
                .unwrap_or_default();
            let mut revision = revision;
            if upstream["drain"] != true {
                let drain = Change::Drain {
                    name: name.clone(),
                    drained: true,
                };
                let drained = recorded(edited(file, &view, &drain)?, record);
                revision = fleet.write(&drained, revision)?;
                said.push(format!("{name} drained on every balancer first:"));
            }
            said.extend(fleet.until_applied(revision, Some((name, *timeout)))?);
            let removed = fleet.write(&after, revision)?;
            said.push(format!("{name} removed from the fleet's membership:"));
            said.extend(fleet.until_applied(removed, None)?);
            if let Some(key) = shared_name(&upstream) {
                said.push(format!("{name}: {}", fleet.forget(&key)?));
            }
        }
        Change::Add { name, .. } | Change::Drain { name, .. } => {
            let written = fleet.write(&after, revision)?;
            said.push(format!(
                "{name}: the fleet's membership changed (revision {written}):"
            ));
            said.extend(fleet.until_applied(written, None)?);
        }
    }
    Ok(said)
}

/// Each balancer's backends, as its follower last reported them, each with its last change
/// recorded in the membership.
pub fn list(
    file: &Path,
    state: &State,
    etcd: &Etcd,
    access: &Access,
) -> Result<Vec<String>, Refusal> {
    let fleet = Fleet::open(file, state, etcd, access)?;
    let (shared, revision) = fleet.read()?;
    let history = shared
        .as_ref()
        .map(|s| s.history.clone())
        .unwrap_or_default();
    let mut lines = Vec::new();
    for (balancer, report) in fleet.reports()? {
        let behind = match report.revision < revision {
            true => " (behind the membership)",
            false => "",
        };
        for b in report.backends {
            let line = format!("{balancer}{behind}\t{}\t{}\t{}", b.name, b.address, b.state);
            lines.push(with_last(line, &history, &b.name));
        }
    }
    if lines.is_empty() {
        lines.push("no balancer follows the fleet's membership yet".into());
        lines.extend(shared_lines(shared.as_ref(), revision, &history));
    }
    Ok(lines)
}

/// The membership's own backends, when no follower reports them: name, address, `drained`
/// when it is, and the last change.
fn shared_lines(shared: Option<&Shared>, revision: i64, history: &[Record]) -> Vec<String> {
    let Some(shared) = shared else {
        return Vec::new();
    };
    shared
        .upstreams
        .iter()
        .map(|u| {
            let name = u["name"].as_str().unwrap_or_default();
            let drained = if u["drain"] == true {
                "drained"
            } else {
                "in the membership"
            };
            let line = format!(
                "membership (revision {revision})\t{name}\t{}\t{drained}",
                u["address"].as_str().unwrap_or_default()
            );
            with_last(line, history, name)
        })
        .collect()
}

/// The records of the membership's last changes, oldest first: who asked and why.
pub fn history(
    file: &Path,
    state: &State,
    etcd: &Etcd,
    access: &Access,
) -> Result<Vec<Record>, Refusal> {
    let fleet = Fleet::open(file, state, etcd, access)?;
    let (shared, _) = fleet.read()?;
    Ok(shared.map(|s| s.history).unwrap_or_default())
}

/// This balancer's name in the reports: the host's name and where users connect.
pub fn balancer_name(state: &State) -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_default();
    format!("{host}:{}", state.listen)
}

/// Follows the fleet's membership for FILE's balancer until `stop`: reads it, makes FILE's
/// files say the same, reports, and watches for the next change; after any failure (etcd
/// gone, the watch ended or compacted), reads again a second later. What it does goes to
/// `say`, a line each.
pub fn follow(
    file: &Path,
    balancer: &str,
    stop: &AtomicBool,
    mut say: impl FnMut(&str),
) -> Result<(), Refusal> {
    let state = file_membership::read(file)?;
    let Some(etcd) = state.etcd.clone() else {
        return Err(Refusal::Input(format!(
            "{}: not written with `upcheck envoy --etcd`: its membership is its own (change it \
             with `upcheck backends`), so there is nothing to follow",
            file.display()
        )));
    };
    while !stop.load(Ordering::Relaxed) {
        let fleet = match Fleet::open(file, &state, &etcd, &Access::default()) {
            Ok(fleet) => fleet,
            Err(Refusal::Input(m)) => return Err(Refusal::Input(m)),
            Err(Refusal::Output(m)) => {
                say(&format!("follow: {m}; trying again in 1 s"));
                std::thread::sleep(Duration::from_secs(1));
                continue;
            }
        };
        if let Err(why) = session(file, &fleet, balancer, stop, &mut say) {
            say(&format!(
                "follow: {why}; reading the membership again in 1 s"
            ));
            std::thread::sleep(Duration::from_secs(1));
        }
    }
    Ok(())
}

/// One read of the membership and the watch after it, until it fails or `stop`.
fn session(
    file: &Path,
    fleet: &Fleet,
    balancer: &str,
    stop: &AtomicBool,
    say: &mut impl FnMut(&str),
) -> Result<(), String> {
    let text = |r: Refusal| match r {
        Refusal::Input(m) | Refusal::Output(m) => m,
    };
    let lease = fleet.client.grant(REPORT_TTL).map_err(|e| e.to_string())?;
    let report_key = fleet.keys.applied(balancer);
    let key = fleet.keys.membership();
    let mut watch_from = 0;
    let mut in_force = 0;
    let mut reported: Option<Applied> = None;
    let mut kept = Instant::now();
    let mut looked = Instant::now();
    let mut stream = None;
    while !stop.load(Ordering::Relaxed) {
        if stream.is_none() {
            // Read, take in, then watch from the revision after the read.
            let snapshot = fleet.client.range(&key, false).map_err(|e| e.to_string())?;
            if let Some(entry) = snapshot.entries.first() {
                match serde_json::from_slice::<Shared>(&entry.value) {
                    Ok(shared) if shared.kind == KIND => {
                        let last = shared
                            .history
                            .last()
                            .map(|r| format!(" ({} {})", r.backend, r.said()))
                            .unwrap_or_default();
                        let adopted = change_record::check(&shared.history)
                            .map_err(Refusal::Input)
                            .and_then(|()| {
                                file_membership::adopt(
                                    file,
                                    shared.upstreams,
                                    shared.removed,
                                    shared.history,
                                )
                            });
                        match adopted {
                            Ok(Some(line)) => {
                                say(&format!("revision {}: {line}{last}", entry.mod_revision));
                                in_force = entry.mod_revision;
                            }
                            Ok(None) => in_force = entry.mod_revision,
                            // A value from etcd is untrusted: one line, the backends as they
                            // were, and the report still says the revision in force.
                            Err(Refusal::Input(why)) => say(&format!(
                                "revision {} refused, the backends stay as they are: {why}",
                                entry.mod_revision
                            )),
                            Err(r) => return Err(text(r)),
                        }
                    }
                    _ => say(&format!(
                        "follow: {key} is not a membership `upcheck backends` wrote; the \
                         backends stay as they are"
                    )),
                }
            }
            watch_from = snapshot.revision + 1;
            stream = Some(
                fleet
                    .client
                    .watch(&key, watch_from, Duration::from_millis(200))
                    .map_err(|e| e.to_string())?,
            );
            reported = None;
        }
        if let Some(watch) = stream.as_mut() {
            match watch.next_value() {
                Ok(Some(message)) => {
                    let result = &message["result"];
                    if result["canceled"] == true {
                        return Err(format!(
                            "the watch from revision {watch_from} was canceled (compacted to {})",
                            result["compact_revision"]
                        ));
                    }
                    if result["events"].as_array().is_some_and(|e| !e.is_empty()) {
                        // Read again: the read is what is taken in, the event only says when.
                        stream = None;
                        continue;
                    }
                }
                Ok(None) => {}
                Err(e) => return Err(format!("the watch ended: {e}")),
            }
        }
        if kept.elapsed() >= KEEP_ALIVE {
            kept = Instant::now();
            if !fleet.client.keep_alive(lease).map_err(|e| e.to_string())? {
                return Err("the report's lease expired".into());
            }
        }
        if reported.is_none() || looked.elapsed() >= REPORT_EVERY {
            looked = Instant::now();
            let state = file_membership::read(file).map_err(text)?;
            let report = Applied {
                revision: in_force,
                backends: file_membership::now(file, &state).map_err(text)?,
            };
            if reported.as_ref() != Some(&report) {
                let value = serde_json::to_vec(&report).map_err(|e| e.to_string())?;
                fleet
                    .client
                    .put(&report_key, &value, lease)
                    .map_err(|e| e.to_string())?;
                reported = Some(report);
            }
        }
    }
    Ok(())
}
