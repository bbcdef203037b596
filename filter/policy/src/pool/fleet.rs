//! The fleet's view in: on the prober, which backends another balancer probes, and the probe
//! state it published, taken in as this VM's own so its workers get it from the probe table as
//! they get every other result ([`crate::fleet`]).

use super::Pool;
use crate::events::Effects;
use crate::fleet::{Duty, Fleet};
use crate::time::Time;

impl<H> Pool<H> {
    /// Takes in where each backend's probe duty is: a backend another balancer probes is not
    /// probed here and takes that balancer's published state; one whose duty comes here is
    /// probed at its time (at once if that has passed).
    pub fn fleet_view(&mut self, fleet: &Fleet, now: Time) -> Effects {
        let mut effects = Effects::default();
        let mut adopted = false;
        let mut back = false;
        for m in &mut self.members {
            match fleet.duty(&m.key) {
                Duty::Here => {
                    back |= std::mem::take(&mut m.elsewhere);
                }
                Duty::Elsewhere { health, .. } => {
                    m.elsewhere = true;
                    if let Some(health) = health.filter(|h| *h != m.evidence.active) {
                        m.evidence.active = health;
                        self.changed = true;
                        self.heard |= m.evidence.heard_from();
                        adopted = true;
                    }
                }
            }
        }
        if let Some(prober) = self.prober.as_mut() {
            prober.unpublished |= adopted;
            if back {
                prober.earliest = now;
            }
        }
        if adopted {
            self.refresh(now, &mut effects);
        }
        effects
    }

    /// Whether another balancer probes backend `index` ([`Pool::fleet_view`]).
    pub fn probed_elsewhere(&self, index: usize) -> bool {
        self.members.get(index).is_some_and(|m| m.elsewhere)
    }
}
