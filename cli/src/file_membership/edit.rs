//! A change to the membership ([`Change`]) as an edit of FILE's input, checked as `upcheck
//! envoy` checks one before anything is written.

use std::path::Path;
use std::time::Duration;

use serde_json::{Map, Value};

use super::running::{page_path, serving};
use super::state::{input, Refusal, State};

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

/// Where backend `name` is in `state`, or a refusal naming the backends there are.
pub(super) fn known(state: &State, name: &str) -> Result<usize, Refusal> {
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
