//! The host's contexts by number, as the adapter keeps its request streams: found, added and
//! removed in a handful of instructions, because every request pays for each at least once.
//!
//! Hosts number contexts in sequence (Envoy counts per VM, ngx_wasm_module per instance), so the
//! streams alive at once hold nearby numbers: a direct-mapped table of a power of two slots,
//! number `n` in slot `n mod size`, finds each with one comparison. A number whose slot is still
//! held (by a long-lived stream the numbers have come round to) goes to a short list beside the
//! table; when that list grows past an eighth of the table, the table doubles. A slab keyed by
//! our own index would need the host's number mapped to it anyway, and a hash map costs a hash
//! and a probe sequence on each look (about 150 instructions an insert, measured with hashbrown).
//!
//! Nothing here trusts the numbers: any `u32` may come, in any order, repeated or never seen.

/// The table's size when the first context comes.
const FIRST_SIZE: usize = 64;

/// A context and its number.
#[derive(Debug)]
struct Slot<T> {
    id: u32,
    context: T,
}

/// Contexts of type `T` by the host's number for them.
#[derive(Debug)]
pub struct Contexts<T> {
    slots: Vec<Option<Slot<T>>>,
    /// Those whose slot was taken when they came.
    spilled: Vec<Slot<T>>,
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
            spilled: Vec::new(),
        }
    }

    fn slot(&self, id: u32) -> usize {
        // The size is a power of two: the mask is `n mod size`.
        usize::try_from(id).unwrap_or(0) & self.slots.len().saturating_sub(1)
    }

    /// Context `id`, if held.
    pub fn get_mut(&mut self, id: u32) -> Option<&mut T> {
        let at = self.slot(id);
        if let Some(Some(slot)) = self.slots.get_mut(at) {
            if slot.id == id {
                return Some(&mut slot.context);
            }
        }
        self.spilled
            .iter_mut()
            .find(|s| s.id == id)
            .map(|s| &mut s.context)
    }

    /// Holds `context` as number `id`, in place of any context held under it.
    pub fn insert(&mut self, id: u32, context: T) {
        let at = self.slot(id);
        let taken = match self.slots.get_mut(at) {
            Some(Some(slot)) if slot.id == id => {
                slot.context = context;
                return;
            }
            Some(Some(_)) => true,
            Some(None) => false,
            None => true, // no table yet
        };
        if taken {
            if let Some(held) = self.spilled.iter_mut().find(|s| s.id == id) {
                held.context = context;
                return;
            }
            if self.slots.is_empty() || self.spilled.len() >= self.slots.len() / 8 {
                self.grow();
            }
        }
        self.place(Slot { id, context });
    }

    /// Takes context `id` out, if held.
    pub fn remove(&mut self, id: u32) -> Option<T> {
        let at = self.slot(id);
        if let Some(slot) = self.slots.get_mut(at) {
            if slot.as_ref().is_some_and(|s| s.id == id) {
                return slot.take().map(|s| s.context);
            }
        }
        let spilled = self.spilled.iter().position(|s| s.id == id)?;
        Some(self.spilled.swap_remove(spilled).context)
    }

    /// Puts `slot` in its place in the table, or beside it if that place is held.
    fn place(&mut self, slot: Slot<T>) {
        let at = self.slot(slot.id);
        match self.slots.get_mut(at) {
            Some(place @ None) => *place = Some(slot),
            _ => self.spilled.push(slot),
        }
    }

    /// Doubles the table (or makes the first) and places every context again.
    fn grow(&mut self) {
        let size = (self.slots.len() * 2).max(FIRST_SIZE);
        let mut slots = Vec::with_capacity(size);
        slots.resize_with(size, || None);
        let old = std::mem::replace(&mut self.slots, slots);
        let spilled = std::mem::take(&mut self.spilled);
        for slot in old.into_iter().flatten().chain(spilled) {
            self.place(slot);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl<T> Contexts<T> {
        fn len(&self) -> usize {
            self.slots.iter().flatten().count() + self.spilled.len()
        }

        fn capacity(&self) -> usize {
            self.slots.len()
        }
    }

    #[test]
    fn streams_numbered_in_sequence_are_found_removed_and_their_slots_used_again() {
        let mut contexts = Contexts::new();
        assert_eq!(contexts.capacity(), 0, "no memory before the first");
        for id in 2..1_002u32 {
            contexts.insert(id, id * 10);
            assert_eq!(contexts.get_mut(id), Some(&mut (id * 10)));
            if id >= 22 {
                assert_eq!(contexts.remove(id - 20), Some((id - 20) * 10), "{id}");
            }
        }
        assert_eq!(contexts.len(), 20);
        assert_eq!(
            contexts.capacity(),
            FIRST_SIZE,
            "20 at once fit the first table"
        );
        assert_eq!(contexts.get_mut(500), None);
        assert_eq!(contexts.remove(500), None);
    }

    #[test]
    fn a_long_lived_stream_the_numbers_come_round_to_neither_loses_a_stream_nor_grows_the_table() {
        let mut contexts = Contexts::new();
        contexts.insert(1, "long");
        for id in 2..100_000u32 {
            contexts.insert(id, "short");
            assert_eq!(contexts.get_mut(id), Some(&mut "short"), "{id}");
            assert_eq!(contexts.remove(id), Some("short"), "{id}");
        }
        assert_eq!(contexts.get_mut(1), Some(&mut "long"));
        assert_eq!(contexts.capacity(), FIRST_SIZE);
        assert_eq!(contexts.len(), 1);
    }

    #[test]
    fn many_at_once_grow_the_table_and_every_one_stays_found() {
        let mut contexts = Contexts::new();
        // Numbers spread over the whole range, colliding in any table size.
        let ids: Vec<u32> = (0..5_000u32)
            .map(|i| i.wrapping_mul(2_654_435_761))
            .collect();
        for (i, id) in ids.iter().enumerate() {
            contexts.insert(*id, i);
        }
        assert_eq!(contexts.len(), ids.len());
        for (i, id) in ids.iter().enumerate() {
            let mut want = i;
            assert_eq!(contexts.get_mut(*id), Some(&mut want), "{id}");
        }
        assert!(contexts.capacity() >= 1_024, "{}", contexts.capacity());
        for (i, id) in ids.iter().enumerate().rev() {
            assert_eq!(contexts.remove(*id), Some(i), "{id}");
        }
        assert_eq!(contexts.len(), 0);
    }

    #[test]
    fn a_number_the_host_gives_again_replaces_its_context_wherever_it_is_held() {
        let mut contexts = Contexts::new();
        contexts.insert(7, 'a');
        contexts.insert(7, 'b');
        contexts.insert(7 + FIRST_SIZE as u32, 'c'); // spilled: slot 7 is held
        contexts.insert(7 + FIRST_SIZE as u32, 'd');
        assert_eq!(contexts.len(), 2);
        assert_eq!(contexts.remove(7), Some('b'));
        assert_eq!(contexts.remove(7 + FIRST_SIZE as u32), Some('d'));
        assert_eq!(contexts.len(), 0);
    }
}
