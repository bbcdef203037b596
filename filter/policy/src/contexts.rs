//! The host's contexts by number, as the adapter keeps its request streams: found, added and
//! removed in a handful of instructions, because every request pays for each at least once.
//!
//! Hosts number contexts in sequence (Envoy counts per VM, ngx_wasm_module per instance), so a
//! context's number is already a good place for it: an open-addressing table of a power of two
//! slots, number `n` first tried at slot `n mod size` and then at the next ones, finds a stream
//! with one comparison almost always. It grows by count (doubling once three quarters of it are
//! held), never by how far apart the numbers alive are, so a hung request holding an old number
//! costs nothing but its slot. A removal shifts back the entries after it that belong nearer
//! their first slot, so no marker of a removed entry ever lengthens a search. std's `HashMap`
//! (hashbrown, with a one-multiplication hash) cost about 240 more instructions a request for the
//! same five operations on wasm (docs/history.md).
//!
//! Nothing here trusts the numbers: any `u32` may come, in any order, repeated or never seen.

/// The table's size when the first context comes: more than a VM holds at once in ordinary
/// traffic, so that it does not grow after start-up.
const FIRST_SIZE: usize = 256;

/// A context and its number.
#[derive(Debug)]
struct Entry<T> {
    id: u32,
    context: T,
}

/// Contexts of type `T` by the host's number for them.
#[derive(Debug)]
pub struct Contexts<T> {
    slots: Vec<Option<Entry<T>>>,
    /// The mask that makes a number a slot, the size less one (the size is a power of two; 0
    /// while there are no slots), kept so that a search does not work it out.
    mask: usize,
    held: usize,
}

impl<T> Default for Contexts<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Contexts<T> {
    /// No contexts (and no memory until the first).
    pub const fn new() -> Self {
        Contexts {
            slots: Vec::new(),
            mask: 0,
            held: 0,
        }
    }

    /// Where `id` is held, if it is.
    fn find(&self, id: u32) -> Option<usize> {
        let mask = self.mask;
        let mut at = usize::try_from(id).unwrap_or(0) & mask;
        for _ in 0..self.slots.len() {
            match self.slots.get(at)? {
                Some(slot) if slot.id == id => return Some(at),
                Some(_) => at = (at + 1) & mask,
                None => return None,
            }
        }
        None
    }

    /// Context `id`, if held.
    pub fn get_mut(&mut self, id: u32) -> Option<&mut T> {
        let at = self.find(id)?;
        self.slots
            .get_mut(at)?
            .as_mut()
            .map(|slot| &mut slot.context)
    }

    /// Holds the context `make` makes as number `id`, in place of any context held under it:
    /// made once its slot is found, so that it is written there rather than moved.
    #[inline(always)]
    pub fn insert_with(&mut self, id: u32, make: impl FnOnce() -> T) {
        if (self.held + 1) * 4 > self.slots.len() * 3 {
            self.grow();
        }
        self.put(id, make);
    }

    /// Puts the context `make` makes in `id`'s slot, or in place of the one held under `id`: one
    /// pass from the number's first slot, since with linear probing a held `id` sits before the
    /// first free slot (the table has room).
    #[inline(always)]
    fn put(&mut self, id: u32, make: impl FnOnce() -> T) {
        let mask = self.mask;
        let mut at = usize::try_from(id).unwrap_or(0) & mask;
        // The number's own slot, free for nearly every context.
        if let Some(place @ None) = self.slots.get_mut(at) {
            *place = Some(Entry {
                id,
                context: make(),
            });
            self.held += 1;
            return;
        }
        for _ in 0..self.slots.len() {
            match self.slots.get_mut(at) {
                Some(Some(slot)) if slot.id == id => {
                    slot.context = make();
                    return;
                }
                Some(Some(_)) => at = (at + 1) & mask,
                Some(place @ None) => {
                    *place = Some(Entry {
                        id,
                        context: make(),
                    });
                    self.held += 1;
                    return;
                }
                None => return,
            }
        }
    }

    /// Drops context `id` where it is held: whether it was. (Dropped in place, never moved out:
    /// every move of a context is a copy of it.)
    pub fn remove(&mut self, id: u32) -> bool {
        let Some(hole) = self.find(id) else {
            return false;
        };
        if let Some(place) = self.slots.get_mut(hole) {
            *place = None;
        }
        self.held -= 1;
        // Nearly always the slot after it is free, and nothing has to move.
        let next = (hole + 1) & self.mask;
        if self.slots.get(next).is_some_and(Option::is_some) {
            self.close(hole);
        }
        true
    }

    /// Shifts back each entry after `hole`, a slot just freed, that may sit there: one whose
    /// first slot is not between the hole and where it sits, cyclically. Out of line, as it is
    /// seldom needed.
    #[inline(never)]
    fn close(&mut self, mut hole: usize) {
        let mask = self.mask;
        let mut at = (hole + 1) & mask;
        while let Some(Some(slot)) = self.slots.get(at) {
            let first = usize::try_from(slot.id).unwrap_or(0) & mask;
            let stays = if hole <= at {
                hole < first && first <= at
            } else {
                hole < first || first <= at
            };
            if !stays {
                let moved = self.slots.get_mut(at).and_then(Option::take);
                if let Some(place) = self.slots.get_mut(hole) {
                    *place = moved;
                }
                hole = at;
            }
            at = (at + 1) & mask;
        }
    }

    /// Doubles the table (or makes the first) and places every context again.
    fn grow(&mut self) {
        let size = (self.slots.len() * 2).max(FIRST_SIZE);
        let mut slots = Vec::with_capacity(size);
        slots.resize_with(size, || None);
        let old = std::mem::replace(&mut self.slots, slots);
        self.mask = size - 1;
        self.held = 0;
        for slot in old.into_iter().flatten() {
            self.put(slot.id, || slot.context);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl<T> Contexts<T> {
        fn len(&self) -> usize {
            let counted = self.slots.iter().flatten().count();
            assert_eq!(counted, self.held);
            counted
        }

        fn capacity(&self) -> usize {
            self.slots.len()
        }
    }

    #[test]
    fn streams_numbered_in_sequence_are_found_removed_and_their_slots_used_again() {
        let mut contexts = Contexts::new();
        assert_eq!(contexts.capacity(), 0, "no memory before the first");
        for id in 2..10_002u32 {
            contexts.insert_with(id, || id * 10);
            assert_eq!(contexts.get_mut(id), Some(&mut (id * 10)));
            if id >= 22 {
                assert_eq!(contexts.get_mut(id - 20), Some(&mut ((id - 20) * 10)));
                assert!(contexts.remove(id - 20), "{id}");
            }
        }
        assert_eq!(contexts.len(), 20);
        assert_eq!(
            contexts.capacity(),
            FIRST_SIZE,
            "20 at once fit the first table"
        );
        assert_eq!(contexts.get_mut(500), None);
        assert!(!contexts.remove(500));
    }

    #[test]
    fn hung_streams_the_numbers_come_round_to_neither_lose_a_stream_nor_grow_the_table() {
        let mut contexts = Contexts::new();
        let hung: Vec<u32> = (1..=40).map(|i| i * 97).collect();
        for id in &hung {
            contexts.insert_with(*id, || 0);
        }
        for id in 10_000..200_000u32 {
            contexts.insert_with(id, || 1);
            assert_eq!(contexts.get_mut(id), Some(&mut 1), "{id}");
            if id >= 10_050 {
                assert!(contexts.remove(id - 50), "{id}");
            }
        }
        for id in &hung {
            assert_eq!(contexts.get_mut(*id), Some(&mut 0), "{id}");
        }
        assert_eq!(contexts.capacity(), FIRST_SIZE);
        assert_eq!(contexts.len(), 90);
    }

    #[test]
    fn many_at_once_grow_the_table_and_every_one_stays_found_whatever_its_number() {
        let mut contexts = Contexts::new();
        // Numbers spread over the whole range, colliding in any table size.
        let ids: Vec<u32> = (0..5_000u32)
            .map(|i| i.wrapping_mul(2_654_435_761))
            .collect();
        for (i, id) in ids.iter().enumerate() {
            contexts.insert_with(*id, || i);
        }
        assert_eq!(contexts.len(), ids.len());
        assert_eq!(
            contexts.capacity(),
            8_192,
            "grown by count: 5,000 in three quarters"
        );
        for (i, id) in ids.iter().enumerate() {
            let mut want = i;
            assert_eq!(contexts.get_mut(*id), Some(&mut want), "{id}");
        }
        // Removed in an order unlike the insertion's, each removal leaving the rest found.
        for (mut n, id) in ids.iter().enumerate().filter(|(n, _)| n % 3 == 1) {
            assert_eq!(contexts.get_mut(*id), Some(&mut n), "{id}");
            assert!(contexts.remove(*id), "{id}");
        }
        for (i, id) in ids.iter().enumerate() {
            let found = contexts.get_mut(*id).copied();
            assert_eq!(found, (i % 3 != 1).then_some(i), "{id}");
        }
    }

    #[test]
    fn a_number_the_host_gives_again_replaces_its_context() {
        let mut contexts = Contexts::new();
        contexts.insert_with(7, || 'a');
        contexts.insert_with(7 + FIRST_SIZE as u32, || 'c'); // the next slot: 7's is held
        contexts.insert_with(7, || 'b');
        contexts.insert_with(7 + FIRST_SIZE as u32, || 'd');
        assert_eq!(contexts.len(), 2);
        assert_eq!(contexts.get_mut(7), Some(&mut 'b'));
        assert!(contexts.remove(7));
        assert_eq!(contexts.get_mut(7), None);
        assert_eq!(
            contexts.get_mut(7 + FIRST_SIZE as u32),
            Some(&mut 'd'),
            "shifted back"
        );
        assert!(contexts.remove(7 + FIRST_SIZE as u32));
        assert_eq!(contexts.len(), 0);
    }
}
