//! The retry budget: extra attempts at most a share of the requests of a sliding window, plus a
//! floor, so that a fleet failing at once never doubles its load while a quiet balancer can
//! still repeat a request.
//!
//! Shared by the workers of a process as the outlier counts are: each extra attempt is counted
//! in the traffic of the backend its request was first sent to ([`crate::outlier::Traffic`]),
//! which each VM adds to the process-wide counts at its tick. So at each tick a VM takes in the
//! process's requests and extra attempts of the window, and between ticks adds its own: every
//! worker spends from one budget, late by at most a tick of the others' spending. Without outlier
//! detection no request is counted, and the floor alone applies.

use std::time::Duration;
use upcheck_config::Retries;

/// The process's requests and extra attempts over the outlier window, as counted at a tick.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Spent {
    /// Requests that ended in the window (estimated, as the sliding window weighs them).
    pub requests: f64,
    /// Extra attempts made for them (repeats and hedges).
    pub extra: f64,
}

/// Whether one more extra attempt is within the budget, as of the latest tick and this VM's own
/// requests and attempts since.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Budget {
    /// The process's, as of the latest tick.
    process: Spent,
    /// This VM's requests asking for advice since the latest tick.
    requests: u32,
    /// This VM's extra attempts since the latest tick.
    extra: u32,
    /// The share of requests extra attempts may be, in percent, as configured at the latest tick.
    percent: f64,
    /// Extra attempts allowed over the window whatever the traffic.
    floor: f64,
    /// Whether one more extra attempt is within the budget: worked out at each tick and after
    /// each extra attempt, and while it is not, at each request (more requests allow more).
    open: bool,
    /// Requests the budget withheld their advice from since the latest tick.
    refused: u32,
    /// Whether it has withheld advice since it was last open at a tick: said once when it
    /// starts, and once when it ends.
    spent: bool,
}

/// What changed about the budget over a tick, for the log and the metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BudgetNews {
    /// It withheld the advice of `refused` requests, the first since it was last open.
    Spent {
        /// How many requests went without their advice.
        refused: u32,
    },
    /// It withheld the advice of `refused` more requests.
    StillSpent {
        /// How many.
        refused: u32,
    },
    /// It was spent, and is open again.
    Available,
}

impl BudgetNews {
    /// The requests that went without their advice over the tick.
    pub fn refused(self) -> u32 {
        match self {
            BudgetNews::Spent { refused } | BudgetNews::StillSpent { refused } => refused,
            BudgetNews::Available => 0,
        }
    }
}

impl Budget {
    /// Time passing: the process spent `process` over the latest `window`, the configuration's
    /// budget is taken in. What changed since the tick before, if anything.
    pub fn tick(
        &mut self,
        process: Spent,
        window: Duration,
        retries: &Retries,
    ) -> Option<BudgetNews> {
        self.process = process;
        self.requests = 0;
        self.extra = 0;
        self.percent = f64::from(retries.budget_percent);
        self.floor = f64::from(retries.min_per_second) * window.as_secs_f64();
        self.open = self.within();
        let refused = std::mem::take(&mut self.refused);
        match (refused, self.spent) {
            (1.., false) => {
                self.spent = true;
                Some(BudgetNews::Spent { refused })
            }
            (1.., true) => Some(BudgetNews::StillSpent { refused }),
            (0, true) if self.open => {
                self.spent = false;
                Some(BudgetNews::Available)
            }
            (0, _) => None,
        }
    }

    /// Whether one more extra attempt would be within the budget.
    fn within(&self) -> bool {
        let requests = self.process.requests + f64::from(self.requests);
        let extra = self.process.extra + f64::from(self.extra);
        extra + 1.0 <= requests * self.percent / 100.0 + self.floor
    }

    /// A request asks whether one more extra attempt would be within the budget: counted as a
    /// request either way. Whether it is; a request it is not for is counted as refused.
    #[inline(always)]
    pub fn allows(&mut self) -> bool {
        self.requests = self.requests.saturating_add(1);
        if !self.open {
            self.open = self.within();
            if !self.open {
                self.refused = self.refused.saturating_add(1);
            }
        }
        self.open
    }

    /// An extra attempt was made (the proxy repeated or hedged a request).
    pub fn spend(&mut self) {
        self.extra = self.extra.saturating_add(1);
        self.open = self.within();
    }
}
