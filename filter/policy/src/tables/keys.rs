//! The shared-data keys, named with the tables' format version (`v7`): a build of another
//! version reads and writes keys of its own, so two builds that share a `vm_id` (an upgrade while
//! the old listener drains) never overwrite each other's tables or leases; each runs its own
//! prober for its own VMs. Every key upcheck keeps in shared data, one line each:
//!
//! - `upcheck.v7.leases` ([`LEASES`]): probing leases by configuration;
//! - `upcheck.v7.announce` ([`ANNOUNCE`]): by backend, the newest configuration that lists it;
//! - `upcheck.v7.active` ([`ACTIVE`]): probe state by backend;
//! - `upcheck.v7.passive` ([`PASSIVE`]): request failures and outlier records by backend;
//! - `upcheck.v7.passive_taken_out` (the adapter's, `filter/src/shared.rs`): an empty value set
//!   after each passive change that takes a backend out, whose compare-and-swap number every VM
//!   reads before a pick;
//! - `upcheck.v7.history` ([`HISTORY`]): the newest changes of every pool's backends and pool
//!   guard;
//! - `upcheck.v7.fleet.<prefix>` ([`FLEET`], [`super::fleet_key`]): per fleet prefix, what that
//!   fleet's prober shows of it;
//! - `upcheck.vm_sequence` (the adapter's): a counter that numbers VMs apart, of no version, so
//!   shared by every build.
//!
//! Shared data has no delete, so a version leaves its six fixed keys behind, and one more per
//! fleet prefix its probers served; `upcheck.vm_sequence` is one for every version.

/// Probing leases by configuration ([`crate::lease`]).
pub const LEASES: &str = "upcheck.v7.leases";
/// By backend, the newest configuration that lists it.
pub const ANNOUNCE: &str = "upcheck.v7.announce";
/// Probe state by backend.
pub const ACTIVE: &str = "upcheck.v7.active";
/// Request failures and outlier records by backend.
pub const PASSIVE: &str = "upcheck.v7.passive";
/// The newest changes of every pool's backends and pool guard ([`crate::history`]).
pub const HISTORY: &str = "upcheck.v7.history";
/// Followed by `.` and a fleet prefix ([`super::fleet_key`]): what that fleet's prober
/// shows of it ([`crate::etcd::shown`]).
pub const FLEET: &str = "upcheck.v7.fleet";
