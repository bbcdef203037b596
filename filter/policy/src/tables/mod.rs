//! The tables every VM of a process shares, their byte form, and the changes made to them.
//!
//! proxy-wasm shared data holds bytes, per `vm_id`; several plugin configurations (listeners,
//! or an old one draining after an update) can share one. The backend tables are keyed by a
//! backend's [`Upstream::key`](upcheck_config::Upstream::key), so a pool only ever reads its own
//! backends; the lease table ([`LeaseTable`](crate::lease::LeaseTable), see [`crate::lease`]) is
//! keyed by configuration. Besides the leases, the history of changes
//! ([`HistoryTable`](crate::history::HistoryTable), see [`crate::history`]) and what each fleet's
//! prober shows of it ([`crate::etcd::shown`]), three tables live there (every key, one line
//! each, is in [`keys`]):
//! - the announcements ([`AnnounceTable`]): for each backend, the newest configuration that lists
//!   it, written when a configuration is taken; that configuration's prober probes it, so a
//!   backend is probed once however many configurations list it, and an update's new backends
//!   are probed at once rather than after the old configuration drains;
//! - the probe table ([`ActiveTable`]): every backend's probe state, each entry written only by
//!   the prober of the configuration it is announced to, merged by compare-and-swap;
//! - the passive table ([`PassiveTable`]): every backend's remembered request failures, last
//!   contact and outlier record (traffic counts, run of failures, standing), changed by
//!   compare-and-swap from whichever VM saw the request, so one failure on worker A and two on
//!   worker B are three. A change is a value ([`PassiveChange`]) applied to the table as read;
//!   the adapter only retries the swap, so a decision made while applying (an ejection by the
//!   run rule) is atomic.
//!
//! The byte form is postcard over the types themselves, behind a four-byte tag (`u`, `c`, the
//! table's kind, the format version): a table written by another version of upcheck sharing the
//! `vm_id` is refused, never misread. Decoding is bounds-checked by postcard, and a table with
//! more failures per backend than any configuration keeps is refused too, so corrupt or hostile
//! bytes give an error, never a panic or an unbounded allocation.
//!
//! Each concern has a file of its own: the byte form and the format version (`bytes`), the
//! tables of who probes and what they found (`probing`), the passive table and its changes
//! (`passive`), and the tables the status page shows (`shown`).

mod bytes;
pub mod keys;
mod passive;
mod probing;
mod shown;

pub use bytes::TableError;
pub(crate) use bytes::{tagged, untagged};
pub use passive::{
    decode_passive, encode_passive, Applied, OutlierNews, PassiveChange, PassiveTable, RequestNews,
};
pub use probing::{
    decode_active, decode_announce, decode_leases, encode_active, encode_announce, encode_leases,
    merge_active, ActiveTable, AnnounceTable,
};
pub use shown::{
    decode_fleet, decode_history, encode_fleet, encode_history, fleet_key, FLEET_HEAD,
};

#[cfg(test)]
mod tests;
