//! Warm-up (Envoy's slow start): a backend that enters service gets a share of its weight that
//! rises from `min_weight_percent` to the whole over `health_checks.slow_start.window`, so a
//! process with cold caches is not handed its full share at its first passing probe.
//!
//! The share is Envoy's: `max(min_weight_percent / 100, time_factor ^ (1 / aggression))`, with
//! `time_factor` the elapsed share of the window (at least one second's worth, as in Envoy). It
//! is applied in steps of 1/[`STEPS`] of the weight (at least one step): the rotation is laid out
//! again only when a backend's step changes, at a tick, never per request, and a short cycle
//! (at most `STEPS` turns of the heaviest per turn of the weight) spreads the warming backend's
//! turns evenly even at a few requests a second.
//!
//! The ramp starts at the backend's [`ActiveHealth::warm_up`], which its prober records with the
//! probe state every VM shares, so every worker ramps alike.

use crate::active::{ActiveHealth, Health};
use crate::time::Time;
use std::time::Duration;
use upcheck_config::SlowStart;

/// How finely the share is applied: in twentieths (5 %) of a backend's weight.
pub const STEPS: u32 = 20;

/// A backend's warm-up under way: its share now and when it ends.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Warming {
    /// The share of its weight it gets, in [`STEPS`] (1 to `STEPS - 1`).
    pub steps: u32,
    /// The share by the formula, 0 to 1, before it is applied in steps.
    pub share: f64,
    /// When it gets its full weight.
    pub until: Time,
}

impl Warming {
    /// The share applied, in whole percent of the weight.
    pub fn percent(&self) -> u32 {
        self.steps * (100 / STEPS)
    }
}

/// The formula's share of the weight `elapsed` into a warm-up of `window`.
pub fn share(slow_start: &SlowStart, window: Duration, elapsed: Duration) -> f64 {
    let time_factor = elapsed.max(Duration::from_secs(1)).as_secs_f64() / window.as_secs_f64();
    let floor = f64::from(slow_start.min_weight_percent) / 100.0;
    time_factor
        .min(1.0)
        .powf(1.0 / slow_start.aggression)
        .max(floor)
}

/// The warm-up of a backend whose probe state is `active`, at `now`, if one is under way.
pub fn warming(slow_start: &SlowStart, active: &ActiveHealth, now: Time) -> Option<Warming> {
    let window = slow_start.window?;
    let start = active
        .warm_up
        .filter(|_| active.status == Health::Healthy)?;
    let until = start.saturating_add(window);
    if now >= until {
        return None;
    }
    let share = share(slow_start, window, now.saturating_sub(start));
    // The share is in 0.01..=1, so the product is within 0.2..=20.
    let steps = (share * f64::from(STEPS)).round() as u32;
    (steps < STEPS).then_some(Warming {
        steps: steps.max(1),
        share,
        until,
    })
}
