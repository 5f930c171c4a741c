//! [`SortedMap`] and [`SortedSet`]: ordered maps over a sorted `Vec`, for the WebAssembly module's
//! size.
//!
//! `std`'s `BTreeMap` is the right structure for large maps, but each key–value pair it is used
//! with instantiates its whole node machinery again (merge, steal, split, search, iterators): in
//! this crate ≈ 6 KB of code per pair, 82 KB in all, the largest single item of the module
//! (docs/benchmarks.md, "Size"). The maps of the client are small — the aggregates of one group
//! commit (at most 512), of one 40 ms flush, of the views and subscriptions open, of what is
//! parked — so a sorted `Vec` with binary search does the same job in a few hundred bytes per
//! pair.
//!
//! Costs: lookups are O(log n); an insert or a removal moves the entries after it, O(n), except
//! an insert past the last key (the order IndexedDB answers in), which is a push. Iteration is in
//! key order, as with `BTreeMap`. The worst cases in use: a group commit of 512 distinct
//! aggregates in random order moves ≈ 6 MB in all (≈ 1 ms, next to 512 appends' IndexedDB
//! work), and the drain's set of aggregates to prune (up to its high-water mark) pays one move
//! per insert or `first` removal, each beside an IndexedDB transaction. A map that could grow
//! large with random keys on a hot path wants another structure.

use std::fmt;

/// An ordered map over a `Vec` of `(key, value)` sorted by key, each key once.
#[derive(Clone, PartialEq, Eq)]
pub struct SortedMap<K, V> {
    items: Vec<(K, V)>,
}

impl<K, V> Default for SortedMap<K, V> {
    fn default() -> Self {
        Self { items: Vec::new() }
    }
}

impl<K: fmt::Debug, V: fmt::Debug> fmt::Debug for SortedMap<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.items.iter().map(|(k, v)| (k, v)))
            .finish()
    }
}

impl<K: Ord, V> SortedMap<K, V> {
    /// An empty map.
    pub const fn new() -> Self {
        Self { items: Vec::new() }
    }

    /// Where `key` is (`Ok`) or would go (`Err`). An insert past the last key, the common case,
    /// is found without a search.
    fn find(&self, key: &K) -> Result<usize, usize> {
        match self.items.last() {
            None => Err(0),
            Some((last, _)) if *last < *key => Err(self.items.len()),
            Some(_) => self.items.binary_search_by(|(k, _)| k.cmp(key)),
        }
    }

    /// How many entries.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// No entries.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The value for `key`.
    pub fn get(&self, key: &K) -> Option<&V> {
        self.find(key).ok().map(|i| &self.items[i].1)
    }

    /// The value for `key`, to change.
    pub fn get_mut(&mut self, key: &K) -> Option<&mut V> {
        self.find(key).ok().map(|i| &mut self.items[i].1)
    }

    /// Whether `key` has an entry.
    pub fn contains_key(&self, key: &K) -> bool {
        self.find(key).is_ok()
    }

    /// Sets `key` to `value`; returns the value it replaced.
    pub fn insert(&mut self, key: K, value: V) -> Option<V> {
        match self.find(&key) {
            Ok(i) => Some(std::mem::replace(&mut self.items[i].1, value)),
            Err(i) => {
                self.items.insert(i, (key, value));
                None
            }
        }
    }

    /// Removes `key`'s entry; returns its value.
    pub fn remove(&mut self, key: &K) -> Option<V> {
        self.find(key).ok().map(|i| self.items.remove(i).1)
    }

    /// The value for `key`, inserted by `make` first if there is none.
    pub fn get_or_insert_with(&mut self, key: K, make: impl FnOnce() -> V) -> &mut V {
        let i = match self.find(&key) {
            Ok(i) => i,
            Err(i) => {
                self.items.insert(i, (key, make()));
                i
            }
        };
        &mut self.items[i].1
    }

    /// The value for `key`, `V::default()` inserted first if there is none.
    pub fn get_or_default(&mut self, key: K) -> &mut V
    where
        V: Default,
    {
        self.get_or_insert_with(key, V::default)
    }

    /// The entries in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.items.iter().map(|(k, v)| (k, v))
    }

    /// The keys in order.
    pub fn keys(&self) -> impl Iterator<Item = &K> {
        self.items.iter().map(|(k, _)| k)
    }

    /// The values in key order.
    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.items.iter().map(|(_, v)| v)
    }

    /// The values in key order, to change.
    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut V> {
        self.items.iter_mut().map(|(_, v)| v)
    }
}

impl<K, V> SortedMap<K, V> {
    /// The values in key order, consuming the map.
    pub fn into_values(self) -> impl Iterator<Item = V> {
        self.items.into_iter().map(|(_, v)| v)
    }
}

impl<K: Ord, V> FromIterator<(K, V)> for SortedMap<K, V> {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let mut map = Self::new();
        for (k, v) in iter {
            map.insert(k, v);
        }
        map
    }
}

/// An ordered set over a sorted `Vec`, each key once: a [`SortedMap`] without values.
#[derive(Clone, PartialEq, Eq)]
pub struct SortedSet<K> {
    map: SortedMap<K, ()>,
}

impl<K> Default for SortedSet<K> {
    fn default() -> Self {
        Self {
            map: SortedMap::default(),
        }
    }
}

impl<K: fmt::Debug> fmt::Debug for SortedSet<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set()
            .entries(self.map.items.iter().map(|(k, _)| k))
            .finish()
    }
}

impl<K: Ord> SortedSet<K> {
    /// An empty set.
    pub const fn new() -> Self {
        Self {
            map: SortedMap::new(),
        }
    }

    /// How many keys.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// No keys.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Whether `key` is in the set.
    pub fn contains(&self, key: &K) -> bool {
        self.map.contains_key(key)
    }

    /// Adds `key`; says whether it was new.
    pub fn insert(&mut self, key: K) -> bool {
        self.map.insert(key, ()).is_none()
    }

    /// Removes `key`; says whether it was there.
    pub fn remove(&mut self, key: &K) -> bool {
        self.map.remove(key).is_some()
    }

    /// The smallest key.
    pub fn first(&self) -> Option<&K> {
        self.map.items.first().map(|(k, _)| k)
    }

    /// The keys in order.
    pub fn iter(&self) -> impl Iterator<Item = &K> {
        self.map.keys()
    }
}

impl<K: Ord> Extend<K> for SortedSet<K> {
    fn extend<I: IntoIterator<Item = K>>(&mut self, iter: I) {
        for k in iter {
            self.insert(k);
        }
    }
}

impl<K> IntoIterator for SortedSet<K> {
    type Item = K;
    type IntoIter = std::iter::Map<std::vec::IntoIter<(K, ())>, fn((K, ())) -> K>;

    /// The keys in order.
    fn into_iter(self) -> Self::IntoIter {
        self.map.items.into_iter().map(|(k, ())| k)
    }
}

impl<K: Ord> FromIterator<K> for SortedSet<K> {
    fn from_iter<I: IntoIterator<Item = K>>(iter: I) -> Self {
        let mut set = Self::new();
        set.extend(iter);
        set
    }
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::{BTreeMap, BTreeSet};

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u8, u16),
        Remove(u8),
        Default(u8),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (any::<u8>(), any::<u16>()).prop_map(|(k, v)| Op::Insert(k, v)),
            any::<u8>().prop_map(Op::Remove),
            any::<u8>().prop_map(Op::Default),
        ]
    }

    proptest! {
        /// Every operation answers as `BTreeMap`'s does, and the entries stay in key order.
        #[test]
        fn behaves_as_a_btree_map(ops in proptest::collection::vec(op(), 0..200)) {
            let mut ours = SortedMap::new();
            let mut theirs = BTreeMap::new();
            for op in ops {
                match op {
                    Op::Insert(k, v) => prop_assert_eq!(ours.insert(k, v), theirs.insert(k, v)),
                    Op::Remove(k) => prop_assert_eq!(ours.remove(&k), theirs.remove(&k)),
                    Op::Default(k) => {
                        let (o, t) = (ours.get_or_default(k), theirs.entry(k).or_default());
                        prop_assert_eq!(*o, *t);
                        *o = o.wrapping_add(1);
                        *t = t.wrapping_add(1);
                    }
                }
                prop_assert_eq!(ours.len(), theirs.len());
                prop_assert!(ours.iter().eq(theirs.iter()));
                for k in [0u8, 1, 127, 255] {
                    prop_assert_eq!(ours.get(&k), theirs.get(&k));
                    prop_assert_eq!(ours.contains_key(&k), theirs.contains_key(&k));
                }
            }
        }

        /// The set answers as `BTreeSet` does.
        #[test]
        fn behaves_as_a_btree_set(ops in proptest::collection::vec((any::<bool>(), any::<u8>()), 0..200)) {
            let mut ours = SortedSet::new();
            let mut theirs = BTreeSet::new();
            for (add, k) in ops {
                if add {
                    prop_assert_eq!(ours.insert(k), theirs.insert(k));
                } else {
                    prop_assert_eq!(ours.remove(&k), theirs.remove(&k));
                }
                prop_assert!(ours.iter().eq(theirs.iter()));
                prop_assert_eq!(ours.first(), theirs.first());
                prop_assert_eq!(ours.contains(&7), theirs.contains(&7));
            }
        }
    }

    #[test]
    fn builds_from_unsorted_input_with_duplicates() {
        let map: SortedMap<u8, char> = [(3, 'a'), (1, 'b'), (3, 'c'), (2, 'd')]
            .into_iter()
            .collect();
        assert_eq!(
            map.iter().map(|(k, v)| (*k, *v)).collect::<Vec<_>>(),
            [(1, 'b'), (2, 'd'), (3, 'c')]
        );
        let set: SortedSet<u8> = [5, 1, 5, 3].into_iter().collect();
        assert_eq!(set.iter().copied().collect::<Vec<_>>(), [1, 3, 5]);
        assert_eq!(format!("{map:?}"), "{1: 'b', 2: 'd', 3: 'c'}");
        assert_eq!(map.into_values().collect::<String>(), "bdc");
        assert_eq!(format!("{set:?}"), "{1, 3, 5}");
    }
}
