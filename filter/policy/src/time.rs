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

/// `t` in whole nanoseconds, saturating past about 584 years. In u64, which wasm multiplies and
/// divides in one instruction each, where `Duration::as_nanos` gives a u128 whose arithmetic is
/// a library routine (as is `u64::saturating_mul`, which widens to u128 to see the overflow):
/// this runs per request and per backend per tick.
pub fn nanos(t: Time) -> u64 {
    in_units(t, 1_000_000_000, t.subsec_nanos())
}

/// `t` in whole milliseconds, saturating, without u128 arithmetic ([`nanos`]).
pub fn millis(t: Time) -> u64 {
    in_units(t, 1_000, t.subsec_millis())
}

/// `t`'s whole seconds × `per_second` + `part`, or `u64::MAX` past what u64 holds.
fn in_units(t: Time, per_second: u64, part: u32) -> u64 {
    match t.as_secs() {
        secs if secs <= u64::MAX / per_second => {
            (secs * per_second).saturating_add(u64::from(part))
        }
        _ => u64::MAX,
    }
}

/// The proleptic Gregorian date of day `days` since 1970-01-01 (Howard Hinnant's
/// `civil_from_days`, for days on or after the epoch).
pub fn civil_date(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
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
