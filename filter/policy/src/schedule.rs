//! When each backend is probed next.
//!
//! Every backend is due at once when it first appears (a new backend is probed immediately, not
//! one interval later), then every interval, moved by up to ± jitter so a large fleet is not
//! probed in lockstep. Each backend keeps a nominal slot that advances by exactly one interval;
//! only the probe time is jittered around it, so neither the jitter nor the caller's tick
//! granularity accumulates into a longer interval. The jitter comes from a small seeded
//! generator: the same seed gives the same schedule, which keeps tests and probe counts
//! deterministic.

use crate::Time;
use std::time::Duration;

/// Next probe time per backend.
#[derive(Debug, Clone)]
pub struct Schedule {
    /// When each backend is probed next (its slot, jittered).
    next: Vec<Time>,
    /// Each backend's nominal slot.
    slot: Vec<Time>,
    /// The earliest of `next`, so a call with nothing due costs nothing.
    earliest: Time,
    rng: u64,
}

impl Schedule {
    /// A schedule with every one of `backends` due at `now`.
    pub fn new(backends: usize, now: Time, seed: u64) -> Schedule {
        Schedule {
            next: vec![now; backends],
            slot: vec![now; backends],
            earliest: now,
            rng: seed | 1,
        }
    }

    /// Keeps the times of backends that stay (`kept[new] = Some(old)`); new ones are due at `now`.
    pub fn remap(&mut self, kept: &[Option<usize>], now: Time) {
        let carry = |times: &[Time]| -> Vec<Time> {
            kept.iter()
                .map(|old| old.and_then(|o| times.get(o).copied()).unwrap_or(now))
                .collect()
        };
        self.next = carry(&self.next);
        self.slot = carry(&self.slot);
        self.earliest = self.next.iter().min().copied().unwrap_or(now);
    }

    /// Makes backend `i` due at `now` (a backend just ejected is probed at once, so it is not
    /// readmitted on expiring failures alone while it is still broken).
    pub fn due_now(&mut self, i: usize, now: Time) {
        if let Some(slot) = self.next.get_mut(i) {
            *slot = (*slot).min(now);
            self.earliest = self.earliest.min(now);
        }
    }

    /// The backends due at `now`; each is rescheduled one interval (± jitter) later.
    pub fn due(&mut self, now: Time, interval: Duration, jitter: Duration) -> Vec<usize> {
        let mut due = Vec::new();
        if now < self.earliest {
            return due;
        }
        for i in 0..self.next.len() {
            let at = self.next.get(i).copied().unwrap_or(now);
            if at <= now {
                let mut slot = self.slot.get(i).copied().unwrap_or(now) + interval;
                if slot <= now {
                    slot = now + interval; // first probe, or far behind: start again from now
                }
                let shift = self.jitter(jitter);
                let next = (slot + jitter)
                    .saturating_sub(shift)
                    .max(now + interval / 2);
                if let (Some(s), Some(n)) = (self.slot.get_mut(i), self.next.get_mut(i)) {
                    *s = slot;
                    *n = next;
                }
                due.push(i);
            }
        }
        self.earliest = self.next.iter().min().copied().unwrap_or(now + interval);
        due
    }

    /// The earliest time any backend is due.
    pub fn next_due(&self) -> Option<Time> {
        (!self.next.is_empty()).then_some(self.earliest)
    }

    /// A uniform duration in [0, 2 × jitter].
    fn jitter(&mut self, jitter: Duration) -> Duration {
        // xorshift64*: plenty for spreading probes.
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        let r = self.rng.wrapping_mul(0x2545_F491_4F6C_DD1D);
        let span = u64::try_from(jitter.as_nanos().saturating_mul(2)).unwrap_or(u64::MAX);
        Duration::from_nanos(r.checked_rem(span.saturating_add(1)).unwrap_or(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn every_backend_is_due_at_once_and_then_once_per_interval_within_jitter() {
        let mut s = Schedule::new(3, Duration::ZERO, 42);
        assert_eq!(s.due(Duration::ZERO, 10 * S, S), vec![0, 1, 2]);
        assert!(s.due(8 * S, 10 * S, S).is_empty());
        let next = s.next_due().unwrap_or_default();
        assert!(next >= 9 * S && next <= 11 * S, "next due at {next:?}");
        assert_eq!(s.due(11 * S, 10 * S, S), vec![0, 1, 2]);
    }

    #[test]
    fn probes_checked_on_a_coarse_tick_keep_the_interval_on_average() {
        let mut s = Schedule::new(1, Duration::ZERO, 3);
        let tick = Duration::from_millis(200);
        let (interval, jitter) = (Duration::from_millis(1_000), Duration::from_millis(100));
        let mut probes = 0;
        let mut now = Duration::ZERO;
        while now < Duration::from_secs(1_000) {
            probes += s.due(now, interval, jitter).len();
            now += tick;
        }
        // 1,000 s at one probe a second: a drift of half a tick per probe would give ~900.
        assert!((999..=1_001).contains(&probes), "{probes} probes");
    }

    #[test]
    fn a_new_backend_is_due_at_once_while_the_others_keep_their_times() {
        let mut s = Schedule::new(1, Duration::ZERO, 7);
        s.due(Duration::ZERO, 10 * S, Duration::ZERO);
        s.remap(&[Some(0), None], 3 * S);
        assert_eq!(s.due(3 * S, 10 * S, Duration::ZERO), vec![1]);
        assert_eq!(s.due(10 * S, 10 * S, Duration::ZERO), vec![0]);
    }
}
