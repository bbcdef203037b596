//! Weighted round robin over the routable backends, laid out in O(N log N) time and O(N) memory
//! whatever the weights, at a constant cost per pick.
//!
//! The rotation is laid out again on every routing change, which can happen inside a request
//! callback, so the layout must not grow with the weights: spelling out one cycle of Σw turns
//! costs about a second and tens of megabytes for thousands of backends weighted in the hundreds.
//!
//! The scheme is interleaved weighted round robin. Weights are divided by their gcd and the
//! backends sorted by weight, heaviest first (equal weights in config order). A cycle is `max w`
//! rounds; in round r every backend of weight ≥ r takes one turn, in that order. Those backends
//! are a prefix of the sorted list that only shrinks as r grows, so the cursor is (round, position,
//! prefix length), and a pick is a step of the position; the prefix shrinks by at most N over a
//! whole cycle of at least N picks, so that work is constant per pick on average. Over a cycle of
//! Σw/gcd picks every backend gets exactly w/gcd turns, one per round, so a heavy backend's turns
//! are spread over the cycle rather than bunched (except the rounds it has to itself).

/// A backend taking turns, with its weight divided by the weights' gcd.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Weighted {
    backend: u32,
    weight: u32,
}

/// The routable backends by weight and where the next pick is. The default has no backend.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rotation {
    /// Heaviest first, equal weights in config order.
    members: Vec<Weighted>,
    /// The round in the cycle, from 1 to the heaviest weight.
    round: u32,
    /// The position of the next pick in `members`.
    position: usize,
    /// How many members take a turn this round: those of weight ≥ `round`.
    width: usize,
}

fn gcd(a: u32, b: u32) -> u32 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

impl Rotation {
    /// Lays out the rotation over the backends marked routable, by weight; a backend of weight 0
    /// gets no turn. The next pick is the heaviest backend's, at the start of a cycle.
    pub fn new(routable: &[bool], weights: &[u32]) -> Rotation {
        let mut members: Vec<Weighted> = routable
            .iter()
            .zip(weights)
            .enumerate()
            .filter(|(_, (r, w))| **r && **w > 0)
            .filter_map(|(i, (_, w))| {
                u32::try_from(i).ok().map(|backend| Weighted {
                    backend,
                    weight: *w,
                })
            })
            .collect();
        let g = members.iter().fold(0, |g, m| gcd(g, m.weight)).max(1);
        // Heaviest first, then in configuration order: sorted as (u32::MAX − weight, backend)
        // pairs of (u64, usize), the pairs the ejection cap sorts too ([`crate::guard`]), so
        // that the module carries one sort (2.8 KB each).
        let mut order: Vec<(u64, usize)> = members
            .iter()
            .map(|m| (u64::from(u32::MAX - m.weight / g), m.backend as usize))
            .collect();
        order.sort_unstable();
        for (m, (key, backend)) in members.iter_mut().zip(order) {
            m.weight = u32::MAX - u32::try_from(key).unwrap_or(u32::MAX);
            m.backend = u32::try_from(backend).unwrap_or(u32::MAX);
        }
        Rotation {
            width: members.len(),
            members,
            round: 1,
            position: 0,
        }
    }

    /// The rotation laid out again over new weights (a warm-up's step), continuing the cycle
    /// at the same share of its rounds rather than at its start: a rotation started afresh
    /// gives the light backends their turns first, so one laid out anew every few picks would
    /// give a warming backend more than its share.
    pub fn reweighted(&self, routable: &[bool], weights: &[u32]) -> Rotation {
        let mut next = Rotation::new(routable, weights);
        let rounds = |r: &Rotation| r.members.first().map_or(1, |m| u64::from(m.weight));
        let round = u64::from(self.round.saturating_sub(1)) * rounds(&next) / rounds(self);
        next.round = u32::try_from(round).unwrap_or(0).saturating_add(1);
        next.width = next
            .members
            .iter()
            .take_while(|m| m.weight >= next.round)
            .count();
        if next.width == 0 {
            next.round = 1;
            next.width = next.members.len();
        }
        next
    }

    /// The backend the rotation would give next that is not `first`, without taking it: where
    /// to send a retry of a request that went to `first`. `None` when no other is routable.
    pub fn next_other_than(&self, first: usize) -> Option<usize> {
        let next = self.backend_at(self.position)?;
        if next != first {
            return Some(next);
        }
        // Within a round every member appears once, and every round starts with the heaviest;
        // so a turn repeats only when the heaviest has the round to itself, and then every
        // round does until the cycle ends, after which the second heaviest follows it.
        let after = if self.position + 1 < self.width {
            self.position + 1
        } else if self.width > 1 {
            0
        } else {
            1
        };
        self.backend_at(after)
    }

    /// The next backend, or `None` if none is routable.
    pub fn advance(&mut self) -> Option<usize> {
        let picked = self.backend_at(self.position)?;
        self.position += 1;
        if self.position >= self.width {
            self.position = 0;
            self.round += 1;
            if self
                .members
                .first()
                .is_none_or(|heaviest| heaviest.weight < self.round)
            {
                // The cycle ends (at once when every weight is equal): all take the next round.
                self.round = 1;
                self.width = self.members.len();
                return Some(picked);
            }
            while self
                .width
                .checked_sub(1)
                .and_then(|last| self.members.get(last))
                .is_some_and(|m| m.weight < self.round)
            {
                self.width -= 1;
            }
        }
        Some(picked)
    }

    fn backend_at(&self, position: usize) -> Option<usize> {
        self.members
            .get(position)
            .and_then(|m| usize::try_from(m.backend).ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Each backend's turns in one cycle: w/gcd of the routable weights, 0 if not routable.
    fn shares(routable: &[bool], weights: &[u32]) -> Vec<usize> {
        let live = || routable.iter().zip(weights).filter(|(r, _)| **r);
        let g = live().fold(0, |g, (_, w)| gcd(g, *w)).max(1);
        let share = |(r, w): (&bool, &u32)| if *r { (w / g) as usize } else { 0 };
        routable.iter().zip(weights).map(share).collect()
    }

    fn cycle_length(routable: &[bool], weights: &[u32]) -> usize {
        shares(routable, weights).iter().sum()
    }

    fn picks(rotation: &mut Rotation, n: usize) -> Vec<usize> {
        (0..n).filter_map(|_| rotation.advance()).collect()
    }

    fn cycle(routable: &[bool], weights: &[u32]) -> Vec<usize> {
        let n = cycle_length(routable, weights);
        picks(&mut Rotation::new(routable, weights), n)
    }

    #[test]
    fn equal_weights_take_turns_in_order() {
        assert_eq!(cycle(&[true, true, true], &[1, 1, 1]), vec![0, 1, 2]);
        assert_eq!(cycle(&[true, true], &[7, 7]), vec![0, 1]);
    }

    #[test]
    fn backends_not_routable_get_no_turn() {
        assert_eq!(cycle(&[true, false, true], &[1, 1, 1]), vec![0, 2]);
        assert_eq!(Rotation::new(&[false, false], &[1, 1]).advance(), None);
        assert_eq!(Rotation::default().advance(), None);
        assert_eq!(Rotation::default().next_other_than(0), None);
    }

    #[test]
    fn the_retry_choice_is_the_next_other_backend_in_turn_and_none_when_alone() {
        let mut r = Rotation::new(&[true, true, true], &[1, 1, 1]);
        assert_eq!(r.advance(), Some(0));
        assert_eq!(r.next_other_than(0), Some(1));
        assert_eq!(r.advance(), Some(1), "peeking takes no turn");
        assert_eq!(r.advance(), Some(2));
        assert_eq!(r.next_other_than(2), Some(0));
        let alone = Rotation::new(&[false, true, false], &[1, 1, 1]);
        assert_eq!(alone.next_other_than(1), None);
    }

    #[test]
    fn a_heavier_backend_gets_its_turns_spread_over_the_cycle() {
        let picks = cycle(&[true, true, true], &[4, 1, 1]);
        assert_eq!(picks.len(), 6);
        assert_eq!(picks.iter().filter(|b| **b == 0).count(), 4);
        assert_ne!(picks[..4], [0, 0, 0, 0], "turns bunched: {picks:?}");
        let picks = cycle(&[true, true, true], &[3, 3, 1]);
        assert_eq!(picks, vec![0, 1, 2, 0, 1, 0, 1]);
    }

    #[test]
    fn laying_out_ten_thousand_upstreams_weighted_1000_and_999_takes_memory_proportional_to_their_number(
    ) {
        let n = 10_000;
        let routable = vec![true; n];
        let weights: Vec<u32> = (0..n).map(|i| 1000 - (i % 2) as u32).collect();
        let r = Rotation::new(&routable, &weights);
        assert_eq!(r.members.len(), n);
        assert!(
            r.members.capacity() <= 2 * n,
            "{} members held for {n} upstreams",
            r.members.capacity()
        );
        let unweighted = Rotation::new(&routable, &vec![1; n]);
        assert_eq!(r.members.capacity(), unweighted.members.capacity());
    }

    #[test]
    fn a_rotation_laid_out_again_over_new_weights_continues_its_cycle_where_it_was() {
        let routable = [true, true];
        let mut r = Rotation::new(&routable, &[20, 3]);
        // Rounds 1 to 3 of 20 have both backends, 4 and 5 the heavier alone.
        assert_eq!(picks(&mut r, 8), [0, 1, 0, 1, 0, 1, 0, 0]);
        // 20:4 is 5:1, whose round 2 is as far into its cycle as round 6 of 20.
        let mut again = r.reweighted(&routable, &[20, 4]);
        assert_eq!(again.round, 2);
        assert_eq!(picks(&mut again, 6), [0, 0, 0, 0, 0, 1]);
        let mut fresh = Rotation::new(&routable, &[20, 4]);
        assert_eq!(
            picks(&mut fresh, 6),
            [0, 1, 0, 0, 0, 0],
            "started afresh, 1 turns early"
        );
        let same = Rotation::new(&routable, &[1, 1]);
        assert_eq!(same.reweighted(&routable, &[1, 1]), same);
    }

    fn pool() -> impl Strategy<Value = (Vec<bool>, Vec<u32>)> {
        (1usize..=12).prop_flat_map(|n| {
            (
                proptest::collection::vec(any::<bool>(), n),
                proptest::collection::vec(1u32..=1000, n),
            )
        })
    }

    proptest! {
        #[test]
        fn picks_over_several_cycles_give_each_backend_exactly_its_share((routable, weights) in pool(), cycles in 1usize..=3) {
            let n = cycle_length(&routable, &weights);
            let got = picks(&mut Rotation::new(&routable, &weights), cycles * n);
            for (b, share) in shares(&routable, &weights).into_iter().enumerate() {
                let turns = got.iter().filter(|p| **p == b).count();
                prop_assert_eq!(turns, cycles * share, "backend {} of weight {}", b, weights[b]);
            }
        }

        #[test]
        fn the_retry_choice_is_the_next_different_backend_advance_would_give((routable, weights) in pool(), into_cycle in 0.0f64..1.0) {
            let n = cycle_length(&routable, &weights);
            let mut r = Rotation::new(&routable, &weights);
            picks(&mut r, (into_cycle * n as f64) as usize);
            for first in 0..=routable.len() {
                let ahead = picks(&mut r.clone(), n).into_iter().find(|b| *b != first);
                prop_assert_eq!(r.next_other_than(first), ahead, "for {}", first);
            }
        }
    }
}
