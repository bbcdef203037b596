//! A running balancer's backends, changed by one command: `upcheck backends --config FILE add`,
//! `drain`, `remove` and `list`.
//!
//! FILE, written by `upcheck envoy --membership -o FILE`, keeps what it was written from
//! ([`State`]), and with it where its balancer's membership lives: in its own files
//! ([`file_membership`]), or, written with `--etcd`, in etcd, shared by
//! the fleet ([`etcd_membership`]). Each command here reads FILE and
//! goes to the one its state names.

use std::path::Path;

pub use crate::file_membership::{read, write, Change, Refusal, State};
use crate::{etcd_membership, file_membership};

/// Makes `change` to FILE's membership and waits until Envoy has it (each balancer's Envoy, for
/// a fleet); what happened, in lines.
pub fn change(file: &Path, change: &Change) -> Result<Vec<String>, Refusal> {
    let before = read(file)?;
    match &before.etcd {
        Some(etcd) => etcd_membership::change(file, &before, etcd, change),
        None => file_membership::change(file, &before, change),
    }
}

/// The backends, one line each: name, address, and what the status page says of it now (on
/// each balancer, for a fleet).
pub fn list(file: &Path) -> Result<Vec<String>, Refusal> {
    let state = read(file)?;
    match &state.etcd {
        Some(etcd) => etcd_membership::list(file, &state, etcd),
        None => file_membership::list(file, &state),
    }
}
