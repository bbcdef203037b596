//! How much of each part a run measures: the counts and durations that make a figure worth
//! reading, or the fewest that still go through every step of every part.
//!
//! `make test` runs the quick form so that a benchmark broken by a change of the module, of the
//! host or of Envoy fails there, on the day of the change, and not months later when someone
//! needs a figure. It asserts that each part ran to the end, never a figure: on a shared machine
//! its few, short runs measure nothing worth comparing.

use std::time::Duration;

/// The counts of one run.
#[derive(Clone, Copy, Debug)]
pub struct Effort {
    /// The quick form: its figures say that the benchmark ran, nothing more.
    pub quick: bool,
    /// Rounds of the four throughput setups, one wrk run of each per round.
    pub throughput_rounds: usize,
    /// Length of one measured wrk run.
    pub throughput_run: Duration,
    /// Load per setup before the rounds, not measured.
    pub throughput_warm_up: Duration,
    /// Starts of each start-up setup (module × worker count).
    pub start_up_repeats: usize,
    /// Probe intervals counted per worker count.
    pub probe_intervals: u32,
    /// Length of a detection replay.
    pub detection_length: Duration,
    /// When app2 breaks in a detection replay, from its start.
    pub detection_break_at: Duration,
    /// Requests and probe rounds of the memory runs, by [`crate::inhost::BACKENDS`].
    pub memory_runs: [(u64, u64); 3],
}

impl Effort {
    /// The figures of `docs/benchmarks.md`: about 8 minutes on a 2-core machine.
    pub const FULL: Effort = Effort {
        quick: false,
        throughput_rounds: 5,
        throughput_run: Duration::from_secs(5),
        throughput_warm_up: Duration::from_secs(2),
        start_up_repeats: 5,
        probe_intervals: 15,
        detection_length: Duration::from_secs(60),
        detection_break_at: Duration::from_secs(20),
        // A million requests and ten thousand rounds where they fit in the bench's time, fewer
        // rounds at 1,000 backends, where a round is a thousand probes.
        memory_runs: [(1_000_000, 10_000), (1_000_000, 10_000), (1_000_000, 1_000)],
    };

    /// Every step of every part once, as briefly as each allows (`--quick`): a probe interval
    /// (10 s) and a passive window must still fit in a detection replay.
    pub const QUICK: Effort = Effort {
        quick: true,
        throughput_rounds: 1,
        throughput_run: Duration::from_secs(1),
        throughput_warm_up: Duration::from_millis(500),
        start_up_repeats: 1,
        probe_intervals: 2,
        detection_length: Duration::from_secs(24),
        detection_break_at: Duration::from_secs(12),
        memory_runs: [(20_000, 20), (20_000, 20), (5_000, 2)],
    };
}
