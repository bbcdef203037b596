//! A backend's record as a repeat offender: each ejection twice as long as the one before, and a
//! probation after each re-admission (see [`crate::outlier`]).

use super::verdict::Verdict;
use crate::time::Time;
use serde::{Deserialize, Serialize};
use std::time::Duration;
use upcheck_config::Outlier as OutlierConfig;

/// An outlier ejection in force.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct InForce {
    until: Time,
    length: Duration,
    verdict: Verdict,
}

/// A re-admission after an outlier ejection, on probation until `clean_at`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct Readmission {
    at: Time,
    clean_at: Time,
}

/// One backend's record as an outlier, shared process-wide: the ejection in force, the offences
/// that lengthen the next one, and its probation after a re-admission.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Standing {
    ejection: Option<InForce>,
    /// Consecutive offences, each without a clean period in between.
    offences: u32,
    readmitted: Option<Readmission>,
}

/// An outlier ejection just decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ejection {
    /// When it ends.
    pub until: Time,
    /// How long it lasts.
    pub length: Duration,
}

/// An outlier ejection that ended: the backend is back in rotation, on probation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ended {
    /// What it was ejected for.
    pub verdict: Verdict,
    /// How long it was out.
    pub length: Duration,
    /// Its consecutive offences so far.
    pub offences: u32,
}

impl Standing {
    /// The standing with each of its times taken through `here`: another balancer's clock to
    /// this one's ([`crate::etcd`]).
    pub(crate) fn retimed(mut self, here: impl Fn(Time) -> Time) -> Standing {
        if let Some(e) = &mut self.ejection {
            e.until = here(e.until);
        }
        if let Some(r) = &mut self.readmitted {
            r.at = here(r.at);
            r.clean_at = here(r.clean_at);
        }
        self
    }

    /// Whether an outlier ejection is in force at `now`.
    pub fn is_ejected(&self, now: Time) -> bool {
        self.ejection.as_ref().is_some_and(|e| now < e.until)
    }

    /// The ejection in force at `now`: what it was for and when it ends.
    pub fn in_force(&self, now: Time) -> Option<(&Verdict, Time)> {
        self.ejection
            .as_ref()
            .filter(|e| now < e.until)
            .map(|e| (&e.verdict, e.until))
    }

    /// When the ejection in force at `now` began.
    pub fn ejected_since(&self, now: Time) -> Option<Time> {
        self.ejection
            .as_ref()
            .filter(|e| now < e.until)
            .map(|e| e.until.saturating_sub(e.length))
    }

    /// Consecutive offences: the next ejection lasts `ejection` × 2^offences.
    pub fn offences(&self) -> u32 {
        self.offences
    }

    /// When it was re-admitted, while it is on probation at `now`.
    pub fn readmitted_at(&self, now: Time) -> Option<Time> {
        match &self.ejection {
            Some(e) if now < e.until => None,
            // Ended, though not yet ticked.
            Some(e) => (now < e.until.saturating_add(e.length)).then_some(e.until),
            None => self.readmitted.filter(|r| now < r.clean_at).map(|r| r.at),
        }
    }

    /// Ejects the backend at `now` for `verdict`: for `ejection`, doubled for each offence since
    /// it was last clean, at most `max_ejection`. Call [`Standing::tick`] first, or the end of an
    /// earlier ejection goes unreported.
    pub fn eject(&mut self, verdict: Verdict, now: Time, config: &OutlierConfig) -> Ejection {
        // Settles an earlier ejection and probation; reporting their end is `tick`'s caller's.
        self.tick(now);
        self.offences = self.offences.saturating_add(1);
        let doubling = 2u32.checked_pow(self.offences - 1);
        let length = doubling
            .and_then(|d| config.ejection.checked_mul(d))
            .unwrap_or(Duration::MAX)
            .min(config.max_ejection);
        let until = now.saturating_add(length);
        self.ejection = Some(InForce {
            until,
            length,
            verdict,
        });
        self.readmitted = None;
        Ejection { until, length }
    }

    /// Holds at `now` the ejection in force in `theirs`, another balancer's standing of the
    /// backend ([`crate::etcd`]), until its end: the next offence here lasts as long as the next
    /// one there. `None` if one is in force here already, or none there.
    pub fn adopt(&mut self, theirs: &Standing, now: Time) -> Option<Ejection> {
        self.tick(now);
        let e = theirs.ejection.as_ref().filter(|e| now < e.until)?;
        if self.is_ejected(now) {
            return None;
        }
        self.offences = self.offences.max(theirs.offences);
        self.ejection = Some(e.clone());
        self.readmitted = None;
        Some(Ejection {
            until: e.until,
            length: e.length,
        })
    }

    /// Brings the standing to `now`: an ejection that has run its course ends (returned once, for
    /// the log), starting the backend's probation; a probation served without offence makes it
    /// clean again.
    pub fn tick(&mut self, now: Time) -> Option<Ended> {
        let ended = match self.ejection.take() {
            Some(e) if now >= e.until => {
                self.readmitted = Some(Readmission {
                    at: e.until,
                    clean_at: e.until.saturating_add(e.length),
                });
                Some(Ended {
                    verdict: e.verdict,
                    length: e.length,
                    offences: self.offences,
                })
            }
            in_force => {
                self.ejection = in_force;
                None
            }
        };
        if self.ejection.is_none() && self.readmitted.is_some_and(|r| now >= r.clean_at) {
            self.offences = 0;
            self.readmitted = None;
        }
        ended
    }
}
