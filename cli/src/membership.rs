//! A running balancer's backends, changed by one command: `upcheck backends --config FILE add`,
//! `drain`, `remove` and `list`.
//!
//! FILE, written by `upcheck envoy --membership -o FILE`, keeps what it was written from
//! ([`State`]), and with it where its balancer's membership lives: in its own files
//! ([`file_membership`]), or, written with `--etcd`, in etcd, shared by
//! the fleet ([`etcd_membership`]). Each command here reads FILE and
//! goes to the one its state names.

use std::path::Path;

pub use crate::change_record::Record;
pub use crate::etcd_access::Access;
pub use crate::file_membership::{read, write, Change, Refusal, State};
use crate::{change_record, etcd_membership, file_membership};

/// Who asks for a change, why, and how they reach a fleet's etcd.
#[derive(Debug, Clone)]
pub struct Operator {
    /// Who asks (`--by`): letters, digits and `._@:+-`, at most 64.
    pub by: String,
    /// Why (`--reason`), printable ASCII, at most 200.
    pub reason: Option<String>,
    /// Their certificate and user for etcd; what is not given is FILE's.
    pub access: Access,
}

impl Operator {
    /// The local user at this host, no reason, FILE's access.
    pub fn local() -> Operator {
        Operator {
            by: change_record::local_user(),
            reason: None,
            access: Access::default(),
        }
    }

    /// This operator's record of `change`, or why `--by` or `--reason` cannot be recorded.
    fn record(&self, change: &Change) -> Result<Record, Refusal> {
        change_record::check_by(&self.by)
            .map_err(|why| Refusal::Input(format!("--by {:?} {why}", self.by)))?;
        if let Some(reason) = &self.reason {
            change_record::check_text(reason)
                .map_err(|why| Refusal::Input(format!("--reason {why}")))?;
        }
        let (backend, what) = match change {
            Change::Add { name, address, .. } => (name, format!("add {address}")),
            Change::Drain {
                name,
                drained: true,
            } => (name, "drain".into()),
            Change::Drain {
                name,
                drained: false,
            } => (name, "back in service".into()),
            Change::Remove { name, .. } => (name, "remove".into()),
        };
        let record = change_record::record(backend, what, &self.by, self.reason.as_deref());
        // What followers would refuse is refused here, before anything is written.
        change_record::check(std::slice::from_ref(&record))
            .map_err(|why| Refusal::Input(format!("{backend}: {why}")))?;
        Ok(record)
    }
}

/// Makes `change` to FILE's membership as the local user and waits until Envoy has it (each
/// balancer's Envoy, for a fleet); what happened, in lines.
pub fn change(file: &Path, change: &Change) -> Result<Vec<String>, Refusal> {
    change_as(file, change, &Operator::local())
}

/// [`change`], asked by `operator`, whose name and reason are recorded with it.
pub fn change_as(
    file: &Path,
    change: &Change,
    operator: &Operator,
) -> Result<Vec<String>, Refusal> {
    let record = operator.record(change)?;
    let before = read(file)?;
    match &before.etcd {
        Some(etcd) => {
            etcd_membership::change(file, &before, etcd, change, &operator.access, &record)
        }
        None => file_membership::change(file, &before, change, &record),
    }
}

/// The backends, one line each: name, address, and what the status page says of it now (on
/// each balancer, for a fleet), and its last change: what, by whom, when and why.
pub fn list(file: &Path) -> Result<Vec<String>, Refusal> {
    list_as(file, &Access::default())
}

/// [`list`], reaching a fleet's etcd with `access`.
pub fn list_as(file: &Path, access: &Access) -> Result<Vec<String>, Refusal> {
    let state = read(file)?;
    match &state.etcd {
        Some(etcd) => etcd_membership::list(file, &state, etcd, access),
        None => file_membership::list(file, &state),
    }
}

/// The membership's last changes, oldest first, a line each: when, the backend, what, who
/// asked and why.
pub fn history(file: &Path, access: &Access) -> Result<Vec<String>, Refusal> {
    let state = read(file)?;
    let records = match &state.etcd {
        Some(etcd) => etcd_membership::history(file, &state, etcd, access)?,
        None => state.history.clone(),
    };
    if records.is_empty() {
        return Ok(vec!["no change recorded yet".into()]);
    }
    Ok(records.iter().map(Record::line).collect())
}
