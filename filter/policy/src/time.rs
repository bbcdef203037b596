//! Time as the policy sees it: a point on the host's clock, passed in by the caller (nothing
//! here reads a clock), and the tick every VM runs on.

/// A point in time: the host's clock since its epoch.
pub type Time = std::time::Duration;

/// How often every VM is to call [`crate::pool::Pool::tick`]: a worker sees another's change
/// within this long, latencies are known to within it, and the probing lease
/// ([`crate::lease::TTL`]) outlasts two.
pub const TICK: std::time::Duration = std::time::Duration::from_millis(200);

/// The one period a VM's timer runs at, for the whole life of its root context: a host may
/// refuse to change a period once set (ngx_wasm_module traps, "tick_period already set"). The
/// timer wakes the VM this often and the VM does a [`TICK`]'s work when [`tick_due`] says so:
/// at the first wake-up after a (re)configuration, so the first probe round goes out within
/// this long of start, and then once a [`TICK`].
pub const WAKE: std::time::Duration = std::time::Duration::from_millis(20);

/// Whether a wake-up at `now` does a tick's work, the last having been done at `last` (none
/// since the last (re)configuration). A timer that fires a little early still ticks on time: a
/// tick is due less than half a wake-up before its time.
pub fn tick_due(last: Option<Time>, now: Time) -> bool {
    last.is_none_or(|last| now.saturating_sub(last) + WAKE / 2 > TICK)
}

/// `t` in whole nanoseconds, saturating past about 584 years. In u64, which wasm divides in one
/// instruction, where `Duration::as_nanos` gives a u128 whose division is a library routine of
/// hundreds of instructions: this runs per request and per backend per tick.
pub fn nanos(t: Time) -> u64 {
    t.as_secs()
        .saturating_mul(1_000_000_000)
        .saturating_add(u64::from(t.subsec_nanos()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_tick_is_done_at_once_then_every_tenth_wake_up() {
        let start = Duration::from_secs(7);
        assert!(tick_due(None, start));
        let due: Vec<u32> = (1..=12)
            .filter(|n| tick_due(Some(start), start + WAKE * *n))
            .collect();
        assert_eq!(due, [10, 11, 12]);
    }

    #[test]
    fn a_timer_firing_a_little_early_or_late_still_ticks_once_a_tick() {
        let start = Duration::from_secs(7);
        let early = start + TICK - Duration::from_millis(2);
        let late = start + TICK + Duration::from_millis(2);
        assert!(tick_due(Some(start), early) && tick_due(Some(start), late));
        assert!(!tick_due(Some(start), start + TICK - WAKE));
    }
}
