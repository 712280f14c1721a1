//! Lanes for the Perfetto export's slices: each IO (or application span) takes the lowest lane
//! free at its start, so that slices on a lane never overlap.

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap};

/// One device's lanes: each lane's last completion, the free ones (lowest first), and the
/// busy ones by completion.
#[derive(Default)]
pub(super) struct Lanes {
    pub(super) uuid: Vec<u64>,
    pub(super) end_ns: Vec<u64>,
    free: BTreeSet<u32>,
    busy: BinaryHeap<Reverse<(u64, u32)>>,
    last_enter_ns: u64,
}

impl Lanes {
    /// The lane for an IO over [enter, complete]: a lane is free after its last IO completed
    /// (strictly before: a slice that ends where the next begins would sort ambiguously).
    /// Returns (lane, whether it is new).
    pub(super) fn take(&mut self, enter: u64, complete: u64) -> (u32, bool) {
        if enter >= self.last_enter_ns {
            self.last_enter_ns = enter;
            while let Some(&Reverse((end, l))) = self.busy.peek() {
                if end >= enter {
                    break;
                }
                self.busy.pop();
                self.free.insert(l);
            }
        }
        // In submission order the lowest free lane qualifies; for an IO met late, the lowest
        // whose last IO ended before it began.
        let pick = self
            .free
            .iter()
            .copied()
            .find(|&l| self.end_ns[l as usize] < enter);
        let (lane, new) = if let Some(l) = pick {
            self.free.remove(&l);
            (l, false)
        } else {
            self.end_ns.push(0);
            // Past u32::MAX lanes (IOs in flight at once) the last is shared: slices there may
            // overlap, a display matter, where the lanes' memory would have run out long before.
            let lane = u32::try_from(self.end_ns.len() - 1).unwrap_or(u32::MAX);
            (lane, true)
        };
        self.end_ns[lane as usize] = complete;
        self.busy.push(Reverse((complete, lane)));
        (lane, new)
    }
}
