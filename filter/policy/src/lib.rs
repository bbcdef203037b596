//! upcheck's health policy, with no I/O.
//!
//! Every decision upcheck makes lives here as plain Rust: time comes in as an argument, decisions
//! go out as values. The proxy-wasm adapter (the `upcheck` crate) turns host callbacks into these
//! inputs and these outputs into host calls; nothing here can call the host, so all of it is
//! tested natively and deterministically.
//!
//! It runs inside every proxy worker, where a panic kills the worker's VM; so outside tests it
//! may not unwrap, index or panic.

#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::indexing_slicing
    )
)]

pub mod active;
pub mod config;
pub mod events;
pub mod fleet;
pub mod lease;
pub mod outlier;
pub mod page;
pub mod passive;
pub mod pool;
pub mod schedule;
pub mod select;
pub mod tables;

/// The configuration's value grammars, also used to read and write durations and statuses
/// elsewhere.
pub use config::{duration, status_match};

/// A point in time: the host's clock since its epoch.
pub type Time = std::time::Duration;

/// How often every VM is to call [`Pool::tick`]: a worker sees another's change within this
/// long, latencies are known to within it, and the probing lease ([`lease::TTL`]) outlasts two.
pub const TICK: std::time::Duration = std::time::Duration::from_millis(200);

/// The first tick after a (re)configuration, so probing starts at once.
pub const FIRST_TICK: std::time::Duration = std::time::Duration::from_millis(20);

/// `t` in whole nanoseconds, saturating past about 584 years. In u64, which wasm divides in one
/// instruction, where `Duration::as_nanos` gives a u128 whose division is a library routine of
/// hundreds of instructions: this runs per request and per backend per tick.
pub fn nanos(t: Time) -> u64 {
    t.as_secs()
        .saturating_mul(1_000_000_000)
        .saturating_add(u64::from(t.subsec_nanos()))
}

pub use active::{ActiveHealth, Down, Health, Pages, ProbeOutcome, Transition};
pub use config::{Config, ConfigError, Role, RoutingMode, StatusPage};
pub use events::{Effects, Event, Level};
pub use fleet::{Evidence, Guard, Routing};
pub use passive::{Outstanding, PassiveHealth, ProxyFailure, RequestOutcome};
pub use pool::{Member, Pick, Pool, Routed};
