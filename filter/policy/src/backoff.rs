//! Backoff: how long to wait before trying again something that keeps failing (a stream that
//! keeps ending, a server that keeps refusing), so a backend or a store that is down is not
//! hammered, and one that comes back is tried again soon.
//!
//! The wait starts at a first delay and doubles at each failure up to a ceiling; what the thing
//! delivers resets it (a stream that carried a message was working). A failure that trying again
//! soon cannot mend (a server that does not implement the method) goes straight to the ceiling.

use std::time::Duration;

/// A doubling wait between `first` and `max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    first: Duration,
    max: Duration,
    /// The wait after the next failure.
    next: Duration,
}

impl Backoff {
    /// A backoff whose first wait is `first`, doubling to at most `max`.
    pub const fn new(first: Duration, max: Duration) -> Backoff {
        Backoff {
            first,
            max,
            next: first,
        }
    }

    /// Something failed: how long to wait before trying again (then doubled for the next time,
    /// up to the ceiling).
    pub fn failed(&mut self) -> Duration {
        let wait = self.next.min(self.max);
        self.next = wait.saturating_mul(2).min(self.max);
        wait
    }

    /// Something failed in a way trying again soon cannot mend: the longest wait, and the
    /// next one as long.
    pub fn gave_up(&mut self) -> Duration {
        self.next = self.max;
        self.max
    }

    /// It worked: the next failure waits the first delay again.
    pub fn reset(&mut self) {
        self.next = self.first;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_doubles_at_each_failure_up_to_its_ceiling_and_starts_over_once_it_works() {
        let mut backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(30));
        let waits: Vec<u64> = (0..7).map(|_| backoff.failed().as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 30, 30]);
        backoff.reset();
        assert_eq!(backoff.failed(), Duration::from_secs(1));
    }

    #[test]
    fn a_failure_retrying_cannot_mend_waits_the_longest_until_it_works_again() {
        let mut backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(30));
        assert_eq!(backoff.gave_up(), Duration::from_secs(30));
        assert_eq!(backoff.failed(), Duration::from_secs(30));
        backoff.reset();
        assert_eq!(backoff.failed(), Duration::from_secs(1));
    }
}
