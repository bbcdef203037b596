//! A balancer's own membership, kept in its files: what `upcheck backends --config FILE add`,
//! `drain`, `remove` and `list` change and read when FILE was written without `--etcd`, and
//! where a fleet's follower makes the fleet's membership this balancer's ([`adopt`]).
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

mod edit;
mod files;
mod running;
mod state;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;

pub use edit::{edited, Change};
pub use files::write;
pub use running::{now, Backend};
pub use state::{directory, read, Refusal, State};

use crate::change_record::{appended, last_of, Record};
use crate::http1::get;
use edit::known;
use files::{write_part, write_state, Lock, Part};
use running::{active, has_host, host_prefix, in_force, wait};
use state::input;

/// Makes `change` to FILE's membership, whose state is `before`, recorded as `record` (who
/// asked and why), and waits until Envoy has it; what happened, in lines.
pub fn change(
    file: &Path,
    before: &State,
    change: &Change,
    record: &Record,
) -> Result<Vec<String>, Refusal> {
    let dir = directory(file).map_err(|e| input(e.to_string()))?;
    let _lock = Lock::take(&dir)?;
    let after = recorded(edited(file, before, change)?, record);
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
            let at = known(before, name)?;
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
            let at = known(before, name)?;
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

/// FILE's backends, whose state is `state`, one line each: name, address, and what the status page says of it now.
pub fn list(file: &Path, state: &State) -> Result<Vec<String>, Refusal> {
    Ok(now(file, state)?
        .iter()
        .map(|b| {
            with_last(
                format!("{}\t{}\t{}", b.name, b.address, b.state),
                &state.history,
                &b.name,
            )
        })
        .collect())
}

/// `state` with `record` kept in its history and said in its backend's `note`, which the
/// status page shows (a backend removed has none left).
pub fn recorded(mut state: State, record: &Record) -> State {
    state.history = appended(&state.history, record.clone());
    if let Ok(upstreams) = state.upstreams_mut() {
        for u in upstreams.iter_mut() {
            if u["name"] == record.backend.as_str() {
                if let Some(u) = u.as_object_mut() {
                    u.insert("note".into(), Value::from(record.said()));
                }
            }
        }
    }
    state
}

/// `line`, a backend's in `list`, with its last change recorded in `history` when there is one.
pub fn with_last(line: String, history: &[Record], backend: &str) -> String {
    match last_of(history, backend) {
        Some(r) => format!("{line}\t{}", r.said()),
        None => line,
    }
}

/// Makes FILE's backends `upstreams`, with `removed` its counts of removals and `history` the
/// records of who changed them, as a change would (the clusters first when one is gained, the
/// filters first otherwise), and waits until Envoy has them: what changed, or none when FILE
/// had them already.
pub fn adopt(
    file: &Path,
    upstreams: Vec<Value>,
    removed: BTreeMap<String, u32>,
    history: Vec<Record>,
) -> Result<Option<String>, Refusal> {
    let before = read(file)?;
    if before.upstreams() == upstreams.as_slice() && before.removed == removed {
        if before.history != history {
            let dir = directory(file).map_err(|e| input(e.to_string()))?;
            let _lock = Lock::take(&dir)?;
            let mut after = before.clone();
            after.history = history;
            write_state(&dir, &after)?;
        }
        return Ok(None);
    }
    let dir = directory(file).map_err(|e| input(e.to_string()))?;
    let _lock = Lock::take(&dir)?;
    let mut after = before.clone();
    *after.upstreams_mut()? = upstreams;
    after.removed = removed;
    after.history = history;
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
