//! Time as the policy sees it: a point on the host's clock, passed in by the caller (nothing
//! here reads a clock), and the tick every VM runs on.

/// A point in time: the host's clock since its epoch.
pub type Time = std::time::Duration;

/// How often every VM is to call [`crate::pool::Pool::tick`]: a worker sees another's change
/// within this long, latencies are known to within it, and the probing lease
/// ([`crate::lease::TTL`]) outlasts two.
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
