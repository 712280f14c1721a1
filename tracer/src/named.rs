//! What the open trace file has named: a File or Cgroup frame goes before the first record of
//! each file or cgroup in each trace file (and flight-recorder segment), so that any one file
//! reads on its own.

use std::collections::HashSet;
use std::hash::Hash;

/// The keys the open trace file has named, and the last one asked about (consecutive records
/// mostly share theirs: no hashing for those).
pub struct NamedOnce<K> {
    named: HashSet<K>,
    last: Option<K>,
}

impl<K> Default for NamedOnce<K> {
    fn default() -> Self {
        NamedOnce {
            named: HashSet::new(),
            last: None,
        }
    }
}

impl<K: Copy + Eq + Hash> NamedOnce<K> {
    /// Whether the open file still has to name `k`; marks it named.
    #[inline]
    pub fn first(&mut self, k: K) -> bool {
        if self.last == Some(k) {
            return false;
        }
        self.last = Some(k);
        self.named.insert(k)
    }

    /// `k` has a new name: name it again before its next record.
    pub fn forget(&mut self, k: &K) {
        self.named.remove(k);
        self.last = None;
    }

    /// A new trace file names its own.
    pub fn new_file(&mut self) {
        self.named.clear();
        self.last = None;
    }
}

#[cfg(test)]
mod tests {
    use super::NamedOnce;

    #[test]
    fn each_key_once_per_file_and_again_when_forgotten() {
        let mut n = NamedOnce::default();
        assert!(n.first(1));
        assert!(!n.first(1));
        assert!(n.first(2));
        assert!(!n.first(1));
        n.forget(&1);
        assert!(n.first(1));
        assert!(!n.first(2));
        n.new_file();
        assert!(n.first(2));
    }
}
