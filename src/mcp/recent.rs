//! A thread's few most recent entries of something it would otherwise compute again, the
//! oldest making way for the next: the shape of the per-thread memos of the hot `tasks/get`
//! (`rendered`, `era2025::opened`), which look entries up by what they were made from.

/// Up to `N` entries, newest written over the oldest.
pub(super) struct Recent<T, const N: usize> {
    slots: [Option<T>; N],
    next: usize,
}

impl<T, const N: usize> Default for Recent<T, N> {
    fn default() -> Self {
        Self {
            slots: std::array::from_fn(|_| None),
            next: 0,
        }
    }
}

impl<T, const N: usize> Recent<T, N> {
    /// The first entry `matches` accepts.
    pub(super) fn find(&self, matches: impl Fn(&T) -> bool) -> Option<&T> {
        self.slots.iter().flatten().find(|e| matches(e))
    }

    /// Keep `entry`, in place of the oldest when all `N` are taken.
    pub(super) fn keep(&mut self, entry: T) {
        self.slots[self.next] = Some(entry);
        self.next = (self.next + 1) % N;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_makes_way() {
        let mut r = Recent::<u32, 3>::default();
        assert!(r.find(|_| true).is_none());
        for n in 1..=4 {
            r.keep(n);
        }
        assert!(r.find(|&n| n == 1).is_none(), "the oldest went");
        for n in 2..=4 {
            assert_eq!(r.find(|&e| e == n), Some(&n));
        }
    }
}
