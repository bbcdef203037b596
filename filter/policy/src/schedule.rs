//! When each backend is probed next.
//!
//! Every backend is due at once when it first appears (a new backend is probed immediately, not
//! one interval later), then every interval, moved by up to ± jitter so a large fleet is not
//! probed in lockstep. Each backend keeps a nominal slot that advances by exactly one interval;
//! only the probe time is jittered around it, so neither the jitter nor the caller's tick
//! granularity accumulates into a longer interval. The jitter comes from a small seeded
//! generator: the same seed gives the same schedule, which keeps tests and probe counts
//! deterministic.

use crate::time::Time;
use std::time::Duration;

/// One backend's place in the probe schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbeSlot {
    /// When it is probed next (its slot, jittered).
    next: Time,
    /// Its nominal slot.
    slot: Time,
    /// Whether one probe out of turn is due before `next`.
    early: bool,
}

impl ProbeSlot {
    /// A slot due at `now`.
    pub fn due_at(now: Time) -> ProbeSlot {
        ProbeSlot {
            next: now,
            slot: now,
            early: false,
        }
    }

    /// When it is probed next.
    pub fn next(&self) -> Time {
        self.next
    }

    /// Makes one probe due at once, out of turn, leaving the regular ones where they are (a
    /// backend just ejected is probed at once, so it is not readmitted on expiring failures
    /// alone while it is still broken).
    pub fn due_now(&mut self) {
        self.early = true;
    }
}

/// The jitter generator and the rules that move slots.
#[derive(Debug, Clone)]
pub struct Schedule {
    rng: u64,
}

impl Schedule {
    /// A schedule whose jitter is drawn from `seed`.
    pub fn new(seed: u64) -> Schedule {
        Schedule { rng: seed | 1 }
    }

    /// Whether `slot` is due at `now`; if so it is moved one interval (± jitter) on.
    pub fn take(
        &mut self,
        slot: &mut ProbeSlot,
        now: Time,
        interval: Duration,
        jitter: Duration,
    ) -> bool {
        if slot.next > now {
            let early = slot.early;
            slot.early = false;
            return early;
        }
        slot.early = false;
        let mut nominal = slot.slot.saturating_add(interval);
        if nominal <= now {
            nominal = now.saturating_add(interval); // first probe, or far behind: start again from now
        }
        let shift = self.jitter(jitter);
        slot.slot = nominal;
        slot.next = nominal
            .saturating_add(jitter)
            .saturating_sub(shift)
            .max(now.saturating_add(interval / 2));
        true
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

    fn due(
        schedule: &mut Schedule,
        slots: &mut [ProbeSlot],
        now: Time,
        jitter: Duration,
    ) -> Vec<usize> {
        slots
            .iter_mut()
            .enumerate()
            .filter_map(|(i, s)| schedule.take(s, now, 10 * S, jitter).then_some(i))
            .collect()
    }

    #[test]
    fn every_backend_is_due_at_once_and_then_once_per_interval_within_jitter() {
        let mut s = Schedule::new(42);
        let mut slots = [ProbeSlot::due_at(Duration::ZERO); 3];
        assert_eq!(due(&mut s, &mut slots, Duration::ZERO, S), vec![0, 1, 2]);
        assert!(due(&mut s, &mut slots, 8 * S, S).is_empty());
        for slot in &slots {
            assert!(
                slot.next() >= 9 * S && slot.next() <= 11 * S,
                "next due at {slot:?}"
            );
        }
        assert_eq!(due(&mut s, &mut slots, 11 * S, S), vec![0, 1, 2]);
    }

    #[test]
    fn probes_checked_on_a_coarse_tick_keep_the_interval_on_average() {
        let mut s = Schedule::new(3);
        let mut slot = ProbeSlot::due_at(Duration::ZERO);
        let tick = Duration::from_millis(200);
        let (interval, jitter) = (Duration::from_millis(1_000), Duration::from_millis(100));
        let mut probes = 0;
        let mut now = Duration::ZERO;
        while now < Duration::from_secs(1_000) {
            probes += usize::from(s.take(&mut slot, now, interval, jitter));
            now += tick;
        }
        // 1,000 s at one probe a second: a drift of half a tick per probe would give ~900.
        assert!((999..=1_001).contains(&probes), "{probes} probes");
    }

    #[test]
    fn a_slot_made_due_now_is_taken_at_once_and_then_keeps_its_interval() {
        let mut s = Schedule::new(7);
        let mut slot = ProbeSlot::due_at(Duration::ZERO);
        assert!(s.take(&mut slot, Duration::ZERO, 10 * S, Duration::ZERO));
        slot.due_now();
        assert!(s.take(&mut slot, 3 * S, 10 * S, Duration::ZERO));
        assert!(!s.take(&mut slot, 4 * S, 10 * S, Duration::ZERO));
        assert_eq!(slot.next(), 10 * S, "the regular probe did not move");
        assert!(s.take(&mut slot, 10 * S, 10 * S, Duration::ZERO));
    }
}
