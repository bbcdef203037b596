//! Weighted round robin over the routable backends, at a constant cost per pick.
//!
//! The rotation for one full cycle is laid out once whenever the routable set changes (rarely),
//! so a pick is an index bump whatever the fleet size. The layout is stride scheduling: each
//! backend's k-th turn is due at (2k − 1) / 2w, earliest first, ties to the earlier backend. Over a
//! cycle of Σw/gcd picks every backend gets exactly w/gcd of them, spread out rather than bunched.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

/// One cycle of picks and where the next one is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rotation {
    order: Vec<u32>,
    cursor: usize,
}

#[derive(Debug, PartialEq, Eq)]
struct Turn {
    /// Numerator and denominator of the deadline (2k − 1) / 2w.
    num: u64,
    den: u64,
    backend: u32,
}

impl Ord for Turn {
    fn cmp(&self, other: &Self) -> Ordering {
        (u128::from(self.num) * u128::from(other.den))
            .cmp(&(u128::from(other.num) * u128::from(self.den)))
            .then(self.backend.cmp(&other.backend))
    }
}

impl PartialOrd for Turn {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

fn gcd(a: u32, b: u32) -> u32 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

impl Rotation {
    /// Lays out one cycle over the backends marked routable, by weight.
    pub fn new(routable: &[bool], weights: &[u32]) -> Rotation {
        let members: Vec<(u32, u32)> = routable
            .iter()
            .zip(weights)
            .enumerate()
            .filter(|(_, (r, w))| **r && **w > 0)
            .filter_map(|(i, (_, w))| u32::try_from(i).ok().map(|i| (i, *w)))
            .collect();
        let g = members.iter().fold(0, |g, (_, w)| gcd(g, *w)).max(1);
        let total: usize = members.iter().map(|(_, w)| (w / g) as usize).sum();
        let mut heap: BinaryHeap<Reverse<Turn>> = members
            .iter()
            .map(|(i, w)| {
                Reverse(Turn {
                    num: 1,
                    den: 2 * u64::from(w / g),
                    backend: *i,
                })
            })
            .collect();
        let mut order = Vec::with_capacity(total);
        while order.len() < total {
            let Some(Reverse(turn)) = heap.pop() else {
                break;
            };
            order.push(turn.backend);
            heap.push(Reverse(Turn {
                num: turn.num + 2,
                ..turn
            }));
        }
        Rotation { order, cursor: 0 }
    }

    /// The backend the rotation would give next that is not `first`, without taking it: where
    /// to send a retry of a request that went to `first`.
    pub fn next_other_than(&self, first: usize) -> Option<usize> {
        let (after, before) = self.order.split_at(self.cursor.min(self.order.len()));
        before
            .iter()
            .chain(after)
            .filter_map(|b| usize::try_from(*b).ok())
            .find(|b| *b != first)
    }

    /// The next backend, or `None` if none is routable.
    pub fn advance(&mut self) -> Option<usize> {
        let picked = self.order.get(self.cursor).copied()?;
        self.cursor = if self.cursor + 1 >= self.order.len() {
            0
        } else {
            self.cursor + 1
        };
        usize::try_from(picked).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cycle(routable: &[bool], weights: &[u32]) -> Vec<usize> {
        let mut r = Rotation::new(routable, weights);
        let n = r.order.len();
        (0..n).filter_map(|_| r.advance()).collect()
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
    }
}
