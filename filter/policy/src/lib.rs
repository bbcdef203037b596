//! upcheck's health policy, with no I/O.
//!
//! Every decision upcheck makes lives here as plain Rust: time comes in as an argument, decisions
//! go out as values. The proxy-wasm adapter (the `upcheck` crate) turns host callbacks into these
//! inputs and these outputs into host calls; nothing here can call the host, so all of it is
//! tested natively and deterministically.
//!
//! It runs inside every proxy worker, where a panic kills the worker's VM; so outside tests it
//! may not unwrap, index or panic.

pub mod active;
pub mod backoff;
pub mod contexts;
pub mod drain;
pub mod etcd;
pub mod events;
pub mod grpc;
pub mod guard;
pub mod history;
pub mod host;
pub mod json_string;
pub mod lease;
pub mod level;
pub mod outcome;
pub mod outlier;
pub mod page;
pub mod passive;
pub mod pool;
pub mod retry;
pub mod schedule;
pub mod select;
pub mod series;
pub mod state;
pub mod tables;
pub mod time;
pub mod warm_up;

/// The plugin configuration, a crate of its own (built for size: it is read once, not per
/// request).
pub use upcheck_config as config;

/// The configuration's value grammars, also used to read and write durations and statuses
/// elsewhere.
pub use config::{duration, status_match};

pub use active::{
    ActiveHealth, Down, GrpcProbeAnswer, Health, MadeBy, Pages, ProbeAnswer, ProbeOutcome, Said,
    Transition,
};
pub use config::{Config, ConfigError, Proxy, Role, RoutingMode, StatusPage};
pub use events::{Effects, Event};
pub use guard::{Evidence, Guard, Routing};
pub use level::Level;
pub use outcome::{ProxyFailure, RequestOutcome};
pub use passive::{InFlight, Outstanding, PassiveHealth};
pub use pool::{LeaseHeld, Member, Pick, Pool, Retried, Routed};
pub use state::State;
pub use time::{nanos, tick_due, Time, TICK, WAKE};
