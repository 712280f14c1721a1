//! Joining half records into the probe's records (docs/design/records-without-shared-state.md).
//!
//! Each program of a request writes what it alone knows to the ring of the CPU it runs on (in a
//! batch of that CPU's halves, `crate::HalfBatch`): the
//! submitter at the start, the instant of each issue, requeues and merges, the rest at the
//! completion. [`Joiner`] takes the halves in any order across rings and replays their
//! instants (each program's own clock) in time order. In that order the events at one request
//! address belong to one request after another (the kernel frees a request before it reuses
//! it), so the join is by address alone, at the replay: a start makes the address's request,
//! its issues, requeues and end find it there. (The kernel's start stamp cannot pair them:
//! `block_io_start` runs before Linux 6.18 stamps the request.) A start that finds a request
//! still there counts that one's completion as missed. The replay counts the requests in
//! flight that each record carries at its issue: in the OS from the start program to the
//! completion or merge, at the device from each issue to the completion or requeue, as the
//! in-kernel counters do. A sweep goes as far as the caller says every half is in hand
//! ([`Joiner::sweep`]): the rings are drained, less a slack for a program that read its clock
//! but has not yet written its half.

use crate::{
    END_LAST, END_OFF_DEVICE, END_PART, EV_NEVER_ISSUED, EV_NOT_ACCOUNTED,
    EV_STARTED_BEFORE_ATTACH, EndHalf, HALF_END, HALF_ISSUE, HALF_LOST, HALF_MERGE, HALF_REQUEUE,
    HALF_START, HalfHead, IoEvent, IssueHalf, MarkHalf, START_AT_ISSUE, StartHalf,
};

use crate::fasthash::FastMap as Map;

/// What the sweep replays, in this order at equal instants: a request leaves before another
/// enters at its address, and enters the OS before it is issued.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum What {
    End,
    Merge,
    Requeue,
    Start,
    Issue,
}

const WHATS: [What; 5] = [
    What::End,
    What::Merge,
    What::Requeue,
    What::Start,
    What::Issue,
];

/// An instant to replay: time and [`What`] packed into one sort key (time << 3 | what;
/// monotonic nanoseconds stay below 2^61 for 73 years of uptime), the request's address and
/// device, and where its half waits (a start's or an end's payload), if it has one.
#[derive(Clone, Copy, Debug)]
struct Event {
    sort: u64,
    key: u64,
    dev: u32,
    payload: u32,
}

impl Event {
    fn at_ns(self) -> u64 {
        self.sort >> 3
    }
    fn what(self) -> What {
        WHATS[(self.sort & 7) as usize]
    }
}

/// The submitter, from the start half.
#[derive(Clone, Copy, Default)]
struct Submitter {
    pid: u32,
    comm: [u8; 16],
    cgroup: u64,
    flags: u16,
    /// The start program's clock.
    at_ns: u64,
    /// Written at an issue (the flush request's, [`START_AT_ISSUE`]).
    at_issue: bool,
}

impl Submitter {
    /// The submitter of a start half; its instant the start program's clock (or, from a
    /// probe that did not write one, the kernel's stamp).
    fn of(h: &StartHalf) -> Submitter {
        Submitter {
            pid: h.pid,
            comm: h.comm,
            cgroup: h.cgroup,
            // EV_* bits are the low 16.
            flags: u16::try_from(h.flags & 0xffff).unwrap_or_default(),
            at_ns: if h.at_ns != 0 {
                h.at_ns
            } else {
                h.head.start_ns
            },
            at_issue: h.flags & START_AT_ISSUE != 0,
        }
    }
}

/// How a pushed record's payloads are kept until their replay.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Keep {
    /// Copied into the slabs.
    Copy,
    /// Left where they are ([`Joiner::push_in_place`]).
    InPlace,
    /// None: the record is of the ring of lost marks.
    Lost,
}

/// Halves' payloads between their push and their replay, in reused slots.
struct Slab<T> {
    items: Vec<T>,
    free: Vec<u32>,
}

impl<T: Copy> Slab<T> {
    fn new() -> Self {
        Slab {
            items: Vec::new(),
            free: Vec::new(),
        }
    }
    fn put(&mut self, v: T) -> u32 {
        if let Some(i) = self.free.pop() {
            self.items[i as usize] = v;
            i
        } else {
            self.items.push(v);
            // Halves waiting at once are a drain's worth: far below 2^32.
            u32::try_from(self.items.len() - 1).expect("fewer than 2^32 halves waiting")
        }
    }
    fn get(&self, i: u32) -> &T {
        &self.items[i as usize]
    }
    fn take(&mut self, i: u32) -> T {
        self.free.push(i);
        self.items[i as usize]
    }
}

/// The request at an address, from its start (or its first event) to its end, as far as the
/// sweep has come. Requests at one address follow one another: in time order, each event at
/// an address is the current request's.
#[derive(Clone, Copy)]
struct Live {
    /// Its start half's slot in [`Joiner::starts`], or [`NONE`]: the submitter stays there
    /// until the request leaves (the map moves less on each insert).
    start: u32,
    /// Its first event's instant (its start's, if seen).
    since_ns: u64,
    issue_ns: u64,
    os_at_issue: u32,
    dev_at_issue: u32,
    bytes_done: u32,
    requeues: u16,
    at_device: bool,
    /// Seen leaving the device inside a flush sequence.
    off_device: bool,
}

impl Live {
    /// A request met first at `since_ns`, with the start half in slot `start` (or [`NONE`]).
    fn new(since_ns: u64, start: u32) -> Live {
        Live {
            start,
            since_ns,
            issue_ns: 0,
            os_at_issue: 0,
            dev_at_issue: 0,
            bytes_done: 0,
            requeues: 0,
            at_device: false,
            off_device: false,
        }
    }

    /// Its last instant seen before its end: its start, or its latest issue (a request issued
    /// after an instant completes after it).
    fn last_seen_ns(&self) -> u64 {
        self.since_ns.max(self.issue_ns)
    }

    /// How far the request had been seen: 0 completing (in part, or off the device inside a
    /// flush sequence), 1 issued, 2 never issued.
    fn stage(&self) -> usize {
        if self.bytes_done != 0 || self.off_device {
            0
        } else if self.issue_ns != 0 {
            1
        } else {
            2
        }
    }
}

/// Counts a user should see beside the records: what the join could not pair or place.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct JoinStats {
    /// Records put together.
    pub joined: u64,
    /// Requests whose address came back in a new request before their completion was seen:
    /// completions the probe did not see (the kernel did not run its program, or its half was
    /// lost to a full ring).
    pub missed_completions: u64,
    /// Completed requests that started before the probe attached (no submitter).
    pub started_before_attach: u64,
    /// Completed requests without a start half although they started after the probe
    /// attached (the start half was lost): recorded without a submitter.
    pub starts_lost: u64,
    /// Halves that arrived after the sweep had passed their instant (their program ran
    /// later than the slack allows): counted where the sweep was.
    pub late: u64,
    /// Halves too short for their kind, or of no known kind.
    pub malformed: u64,
    /// Requests still open when the join ended (in flight at the end, or their completion
    /// lost).
    pub open_at_end: u64,
    /// Of `missed_completions` and `open_at_end`, how far each request had been seen: (seen
    /// completing in part or off the device in a flush sequence, issued, never issued), as
    /// [`crate::format::ProbeCounters::missed_stage`].
    pub missed_stage: [u64; 3],
    /// Requests whose last end half was lost to a full ring, named by a lost mark
    /// ([`crate::HALF_LOST`]): closed without a record (a ring drop).
    pub gone: u64,
    /// Completions not seen that came before the run's start or after its end
    /// ([`Joiner::set_run`]): IOs the run does not count, so not among `missed_completions`.
    pub missed_outside_run: u64,
}

/// Requests in flight on one device.
#[derive(Clone, Copy)]
struct DevCount {
    dev: u32,
    os: u32,
    device: u32,
}

pub struct Joiner {
    /// When the probe was whole: a request stamped before it has no start half.
    attach_ns: u64,
    /// Events pushed and not yet replayed, per ring, each in time order.
    events: Vec<Vec<Event>>,
    /// The sweep's merge: a run per ring with events due (kept to reuse its allocation).
    runs: Vec<Run>,
    starts: Slab<Submitter>,
    ends: Slab<EndHalf>,
    /// Addresses of halves pushed in place ([`Joiner::push_in_place`]) whose payload has not
    /// been replayed or copied: a start or an end half at each, as its event says.
    borrowed: Vec<usize>,
    /// Address -> the request there, as far as the sweep has come.
    live: Map<u64, Live>,
    /// Where the last sweep stopped: events at or before it are replayed.
    swept_ns: u64,
    counts: Vec<DevCount>,
    stats: JoinStats,
    /// The run's instants ([`Joiner::set_run`]): completions after the first and at or before
    /// the second are the run's.
    run: (u64, u64),
}

/// Read a plain-old-data half from the start of `bytes`, if it is long enough.
fn read<T: Copy>(bytes: &[u8]) -> Option<T> {
    if bytes.len() < std::mem::size_of::<T>() {
        return None;
    }
    // SAFETY: length checked; the halves are plain old data for which any bit pattern is
    // valid.
    Some(unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<T>()) })
}

/// No payload.
const NONE: u32 = u32::MAX;
/// A payload left in the caller's memory: the low bits index [`Joiner::borrowed`].
const BORROWED: u32 = 1 << 31;

fn borrowed(p: u32) -> bool {
    p != NONE && p & BORROWED != 0
}

/// A ring's events due in a sweep: `at..end` of its events left, the next one's sort key
/// (or [`DONE`]).
#[derive(Clone, Copy)]
struct Run {
    next: u64,
    ring: usize,
    at: usize,
    end: usize,
}

/// A run replayed to its end: above every sort key (at most (2^61 - 1) << 3 | 4).
const DONE: u64 = u64::MAX;

impl Joiner {
    /// A joiner for halves from `rings` rings (one per CPU).
    pub fn new(attach_ns: u64, rings: usize) -> Joiner {
        Joiner {
            attach_ns,
            events: vec![Vec::new(); rings.max(1)],
            runs: Vec::new(),
            starts: Slab::new(),
            ends: Slab::new(),
            borrowed: Vec::new(),
            live: Map::default(),
            swept_ns: 0,
            counts: Vec::new(),
            stats: JoinStats::default(),
            run: (0, u64::MAX),
        }
    }

    /// The run counts the completions after `start_ns` and at or before `end_ns` (its cut): a
    /// completion not seen is counted missed only if it may have come in between. The end
    /// is known only when the run stops, and the join goes on while the daemon waits for the
    /// requests in flight then; the completions it finds missed meanwhile, of requests seen
    /// only after the end, are not the run's (else, at tens of thousands of IOs a second, a
    /// completion the kernel skipped inside that wait would count in the run's misses, which
    /// would then exceed the IOs it really missed).
    pub fn set_run(&mut self, start_ns: u64, end_ns: u64) {
        self.run = (start_ns, end_ns);
    }

    /// When the probe was whole: requests stamped before it have no start half.
    pub fn set_attach_ns(&mut self, attach_ns: u64) {
        self.attach_ns = attach_ns;
    }

    pub fn stats(&self) -> JoinStats {
        self.stats
    }

    /// Requests in the OS as far as the sweep has come, and halves waiting for it.
    pub fn open(&self) -> usize {
        self.live.len() + self.events.iter().map(Vec::len).sum::<usize>()
    }

    /// Requests in the OS, as far as the sweep has come, that started at or before `at_ns`
    /// (those met first after their start, from their first event): the ones in flight at a
    /// cut that have not completed yet.
    pub fn open_started_by(&self, at_ns: u64) -> usize {
        self.open_started_in(0, at_ns)
    }

    /// [`Joiner::open_started_by`], of the requests that started at or after `from_ns`.
    pub fn open_started_in(&self, from_ns: u64, at_ns: u64) -> usize {
        self.live
            .values()
            .filter(|l| (from_ns..=at_ns).contains(&l.since_ns))
            .count()
    }

    /// Take a record as read from ring `ring`: a half, or a CPU's batch of halves one after
    /// another (`tracer_common::HalfBatch`).
    pub fn push(&mut self, ring: usize, bytes: &[u8]) {
        self.push_record(ring, bytes, Keep::Copy);
    }

    /// [`Joiner::push`] without copying the start and end halves' payloads: the sweep reads
    /// them where they are (a ring's memory, read once instead of copied and read again).
    /// [`Joiner::unborrow`] copies those not yet replayed.
    ///
    /// # Safety
    /// `bytes` stays valid and unchanged until the next call of [`Joiner::unborrow`].
    pub unsafe fn push_in_place(&mut self, ring: usize, bytes: &[u8]) {
        self.push_record(ring, bytes, Keep::InPlace);
    }

    /// Copy every payload still left in place ([`Joiner::push_in_place`]) into the join's
    /// own memory: the halves waiting for a later sweep and the submitters of the requests
    /// still open. After it, the memory pushed in place is no longer read.
    pub fn unborrow(&mut self) {
        if self.borrowed.is_empty() {
            return;
        }
        let mut events = std::mem::take(&mut self.events);
        for e in events.iter_mut().flatten() {
            if borrowed(e.payload) {
                // Only start and end halves have payloads.
                e.payload = if e.what() == What::Start {
                    let s = self.borrowed_start(e.payload);
                    self.starts.put(s)
                } else {
                    let h = self.borrowed_end(e.payload);
                    self.ends.put(h)
                };
            }
        }
        self.events = events;
        let mut live = std::mem::take(&mut self.live);
        for l in live.values_mut() {
            if borrowed(l.start) {
                let s = self.borrowed_start(l.start);
                l.start = self.starts.put(s);
            }
        }
        self.live = live;
        self.borrowed.clear();
    }

    /// The start half left in place at `p`.
    fn borrowed_start(&self, p: u32) -> Submitter {
        let at = self.borrowed[(p & !BORROWED) as usize];
        // SAFETY: push_in_place's caller keeps the half there until unborrow, and push_half
        // checked that it is a whole start half.
        let h = unsafe { std::ptr::read_unaligned(at as *const StartHalf) };
        Submitter::of(&h)
    }

    /// The end half left in place at `p`.
    fn borrowed_end(&self, p: u32) -> EndHalf {
        let at = self.borrowed[(p & !BORROWED) as usize];
        // SAFETY: as in borrowed_start.
        unsafe { std::ptr::read_unaligned(at as *const EndHalf) }
    }

    /// Whether the start half at `p` was written at an issue ([`START_AT_ISSUE`]).
    fn start_at_issue(&self, p: u32) -> bool {
        if borrowed(p) {
            self.borrowed_start(p).at_issue
        } else {
            self.starts.get(p).at_issue
        }
    }

    /// The submitter at `p`, its slot freed.
    fn take_start(&mut self, p: u32) -> Submitter {
        if borrowed(p) {
            self.borrowed_start(p)
        } else {
            self.starts.take(p)
        }
    }

    /// The payload of a half left in place at the start of `bytes`.
    fn borrow(&mut self, bytes: &[u8]) -> u32 {
        self.borrowed.push(bytes.as_ptr() as usize);
        // Halves waiting at once are a drain's worth: far below 2^31.
        u32::try_from(self.borrowed.len() - 1).expect("fewer than 2^31 halves waiting") | BORROWED
    }

    /// Take a record of the ring of lost marks ([`crate::MAP_HALF_LOST`]): marks, or a batch
    /// the rings had no room for, whose halves are taken as their marks (a partial end's is
    /// not named: the probe counted it as a half drop).
    pub fn push_lost(&mut self, ring: usize, bytes: &[u8]) {
        self.push_record(ring, bytes, Keep::Lost);
    }

    fn push_record(&mut self, ring: usize, mut bytes: &[u8], keep: Keep) {
        let ring = ring % self.events.len();
        while !bytes.is_empty() {
            let Some(n) = self.push_half(ring, bytes, keep) else {
                // Nothing after a half of no known size can be read.
                self.stats.malformed += 1;
                return;
            };
            bytes = bytes.get(n..).unwrap_or_default();
        }
    }

    /// Take the half at the start of `bytes`; its size, or None if it is short or of no known
    /// kind. `keep`: how its payload waits for the replay ([`Keep::Lost`]: a half of a lost
    /// batch, taken as its mark).
    fn push_half(&mut self, ring: usize, bytes: &[u8], keep: Keep) -> Option<usize> {
        let lost = keep == Keep::Lost;
        let head = read::<HalfHead>(bytes)?;
        match head.half {
            HALF_START => {
                let h = read::<StartHalf>(bytes)?;
                let s = Submitter::of(&h);
                let p = match keep {
                    Keep::Lost => NONE,
                    Keep::InPlace => self.borrow(bytes),
                    Keep::Copy => self.starts.put(s),
                };
                self.event(ring, &head, s.at_ns, What::Start, p);
                Some(size_of::<StartHalf>())
            }
            HALF_ISSUE => {
                let h = read::<IssueHalf>(bytes)?;
                self.event(ring, &head, h.issue_ns, What::Issue, NONE);
                Some(size_of::<IssueHalf>())
            }
            HALF_REQUEUE | HALF_MERGE => {
                let h = read::<MarkHalf>(bytes)?;
                let what = if head.half == HALF_MERGE {
                    What::Merge
                } else {
                    What::Requeue
                };
                self.event(ring, &head, h.at_ns, what, NONE);
                Some(size_of::<MarkHalf>())
            }
            HALF_END => {
                let h = read::<EndHalf>(bytes)?;
                match h.end {
                    // A lost last end leaves as a merged request: no record.
                    END_LAST if lost => {
                        self.stats.gone += 1;
                        self.event(ring, &head, h.complete_ns, What::Merge, NONE);
                    }
                    END_PART | END_OFF_DEVICE if lost => {}
                    END_LAST | END_PART | END_OFF_DEVICE => {
                        let p = if keep == Keep::InPlace {
                            self.borrow(bytes)
                        } else {
                            self.ends.put(h)
                        };
                        self.event(ring, &head, h.complete_ns, What::End, p);
                    }
                    _ => return None,
                }
                Some(size_of::<EndHalf>())
            }
            marked if marked & HALF_LOST != 0 => {
                // A half lost to a full ring, named: its event without its payload.
                let h = read::<MarkHalf>(bytes)?;
                let what = match marked & !HALF_LOST {
                    HALF_START => What::Start,
                    HALF_ISSUE => What::Issue,
                    HALF_REQUEUE => What::Requeue,
                    // A lost last end leaves as a merged request: no record.
                    HALF_END => {
                        self.stats.gone += 1;
                        What::Merge
                    }
                    HALF_MERGE => What::Merge,
                    _ => return None,
                };
                self.event(ring, &head, h.at_ns, what, NONE);
                Some(size_of::<MarkHalf>())
            }
            _ => None,
        }
    }

    fn event(&mut self, ring: usize, head: &HalfHead, at_ns: u64, what: What, payload: u32) {
        if at_ns <= self.swept_ns {
            self.stats.late += 1;
        }
        let e = Event {
            sort: (at_ns.min(u64::MAX >> 3) << 3) | what as u64,
            key: head.key,
            dev: head.dev,
            payload,
        };
        // A ring is nearly in the order its CPU ran the programs (a program that interrupts
        // another inside the CPU's batch writes its half to the ring itself, ahead of the
        // batch), and each program stamps its event with its own clock: insertion from the
        // back keeps the ring sorted, at a step each but for those.
        let v = &mut self.events[ring];
        v.push(e);
        let mut i = v.len() - 1;
        while i > 0 && v[i - 1].sort > e.sort {
            v[i] = v[i - 1];
            i -= 1;
        }
        v[i] = e;
    }

    fn count(&mut self, dev: u32) -> &mut DevCount {
        let i = self.count_index(dev);
        &mut self.counts[i]
    }

    fn count_index(&mut self, dev: u32) -> usize {
        if let Some(i) = self.counts.iter().position(|c| c.dev == dev) {
            i
        } else {
            self.counts.push(DevCount {
                dev,
                os: 0,
                device: 0,
            });
            self.counts.len() - 1
        }
    }

    /// Give back what a request leaving the OS held of the counts.
    fn leave(&mut self, dev: u32, l: &Live) {
        let c = self.count(dev);
        c.os = c.os.saturating_sub(1);
        if l.at_device {
            c.device = c.device.saturating_sub(1);
        }
    }

    /// The request at `key`: the live one, or one met first here (started before the probe
    /// attached, or its start half lost), entering the OS now.
    fn current(&mut self, key: u64, dev: u32, at_ns: u64) -> &mut Live {
        let ci = self.count_index(dev);
        let counts = &mut self.counts;
        self.live.entry(key).or_insert_with(|| {
            counts[ci].os += 1;
            Live::new(at_ns, NONE)
        })
    }

    /// A request leaving without a record: its start half's slot freed.
    fn drop_start(&mut self, l: &Live) {
        if l.start != NONE && !borrowed(l.start) {
            self.starts.take(l.start);
        }
    }

    /// Replay every event at or before `upto_ns` in time order, handing each completed
    /// request's record to `out`. The caller promises that every half of an instant at or
    /// before `upto_ns` has been pushed; one that comes later is counted as late.
    pub fn sweep(&mut self, upto_ns: u64, out: &mut impl FnMut(IoEvent)) {
        let mut events = std::mem::take(&mut self.events);
        let mut runs = std::mem::take(&mut self.runs);
        // Each ring is sorted: merge their due prefixes, at equal instants ring by ring (as a
        // stable sort of the rings one after another would).
        runs.clear();
        for (r, v) in events.iter().enumerate() {
            let end = v.partition_point(|e| e.at_ns() <= upto_ns);
            if end != 0 {
                runs.push(Run {
                    next: v[0].sort,
                    ring: r,
                    at: 0,
                    end,
                });
            }
        }
        if let &[a, b] = runs.as_slice() {
            // Two rings (a small ring per CPU on two CPUs): the runs are short, and a compare
            // per event beats a scan per run.
            let (va, vb) = (&events[a.ring][..a.end], &events[b.ring][..b.end]);
            let (mut i, mut k) = (0, 0);
            while i < va.len() && k < vb.len() {
                if vb[k].sort < va[i].sort {
                    self.replay(vb[k], out);
                    k += 1;
                } else {
                    self.replay(va[i], out);
                    i += 1;
                }
            }
            for &e in va[i..].iter().chain(&vb[k..]) {
                self.replay(e, out);
            }
        } else {
            self.merge_runs(&events, &mut runs, out);
        }
        for run in &runs {
            events[run.ring].drain(..run.end);
        }
        self.events = events;
        self.runs = runs;
        self.swept_ns = self.swept_ns.max(upto_ns);
    }

    /// Merge the runs of more rings than two (or one): the ring with the least next event
    /// replays up to the next ring's least, without a scan per event.
    fn merge_runs(
        &mut self,
        events: &[Vec<Event>],
        runs: &mut [Run],
        out: &mut impl FnMut(IoEvent),
    ) {
        loop {
            // The least next event (the first such run: the lowest ring), and the next least.
            let (mut m, mut second) = (usize::MAX, (u64::MAX, usize::MAX));
            let mut least = u64::MAX;
            for (i, run) in runs.iter().enumerate() {
                if run.next < least {
                    if m != usize::MAX {
                        second = (least, m);
                    }
                    (least, m) = (run.next, i);
                } else if run.next < second.0 {
                    second = (run.next, i);
                }
            }
            let Some(run) = runs.get_mut(m) else {
                break;
            };
            let ring = &events[run.ring];
            loop {
                self.replay(ring[run.at], out);
                run.at += 1;
                if run.at == run.end {
                    run.next = DONE;
                    break;
                }
                run.next = ring[run.at].sort;
                // Ahead of the other runs still, or level with one behind it in ring order.
                if run.next > second.0 || (run.next == second.0 && m > second.1) {
                    break;
                }
            }
        }
    }

    /// Replay everything pushed, whatever its instant (at the end of a run).
    pub fn finish(&mut self, out: &mut impl FnMut(IoEvent)) {
        self.finish_by(u64::MAX, out);
    }

    /// [`Joiner::finish`] for a run that ended at `end_ns`: requests that started after it
    /// and are still open are not counted as open at the end (the probe went away first).
    pub fn finish_by(&mut self, end_ns: u64, out: &mut impl FnMut(IoEvent)) {
        self.sweep(u64::MAX, out);
        for l in self.live.values().filter(|l| l.last_seen_ns() <= end_ns) {
            self.stats.open_at_end += 1;
            self.stats.missed_stage[l.stage()] += 1;
        }
    }

    fn replay(&mut self, ev: Event, out: &mut impl FnMut(IoEvent)) {
        let (key, dev) = (ev.key, ev.dev);
        match ev.what() {
            What::Start => {
                if ev.payload != NONE
                    && self.start_at_issue(ev.payload)
                    && self
                        .live
                        .get(&key)
                        .is_some_and(|l| l.requeues > 0 && !l.at_device)
                {
                    // The flush request issued again after its requeue: the same request,
                    // whose start half its issue program writes each time.
                    self.take_start(ev.payload);
                    return;
                }
                // NONE: its start half was lost, only its instant named.
                let new = Live::new(ev.at_ns(), ev.payload);
                self.count(dev).os += 1;
                if let Some(old) = self.live.insert(key, new) {
                    // Still in the OS when its address starts a new request: its completion
                    // was not seen (the kernel frees a request before it reuses it). It came
                    // after the last event seen of it and before this start: the run's unless
                    // that is all before the run's start or after its end.
                    self.leave(dev, &old);
                    self.drop_start(&old);
                    if ev.at_ns() <= self.run.0 || old.last_seen_ns() > self.run.1 {
                        self.stats.missed_outside_run += 1;
                    } else {
                        self.stats.missed_completions += 1;
                        self.stats.missed_stage[old.stage()] += 1;
                    }
                }
            }
            What::Issue => {
                let ci = self.count_index(dev);
                let mut fresh = false;
                let l = self.live.entry(key).or_insert_with(|| {
                    fresh = true;
                    Live::new(ev.at_ns(), NONE)
                });
                let c = &mut self.counts[ci];
                if fresh {
                    // Met first at its issue: in the OS from here.
                    c.os += 1;
                }
                if !l.at_device {
                    c.device += 1;
                }
                l.at_device = true;
                l.issue_ns = ev.at_ns();
                l.dev_at_issue = c.device;
                l.os_at_issue = c.os.max(c.device);
            }
            What::Requeue => {
                let l = self.current(key, dev, ev.at_ns());
                l.requeues = l.requeues.saturating_add(1);
                if l.at_device {
                    l.at_device = false;
                    let c = self.count(dev);
                    c.device = c.device.saturating_sub(1);
                }
            }
            What::Merge => {
                if let Some(l) = self.live.remove(&key) {
                    self.leave(dev, &l);
                    self.drop_start(&l);
                }
            }
            What::End => {
                let half = if borrowed(ev.payload) {
                    self.borrowed_end(ev.payload)
                } else {
                    self.ends.take(ev.payload)
                };
                match half.end {
                    END_PART => {
                        let l = self.current(key, dev, ev.at_ns());
                        l.bytes_done = l.bytes_done.wrapping_add(half.bytes);
                    }
                    END_OFF_DEVICE => {
                        let l = self.current(key, dev, ev.at_ns());
                        l.bytes_done = l.bytes_done.wrapping_add(half.bytes);
                        l.off_device = true;
                        if l.at_device {
                            l.at_device = false;
                            let c = self.count(dev);
                            c.device = c.device.saturating_sub(1);
                        }
                    }
                    _ => {
                        // END_LAST (push takes no other value).
                        let l = match self.live.remove(&key) {
                            Some(l) => {
                                self.leave(dev, &l);
                                l
                            }
                            // Met first at its end: it holds no count.
                            None => Live::new(0, NONE),
                        };
                        let record = self.record(dev, &l, &half);
                        self.stats.joined += 1;
                        out(record);
                    }
                }
            }
        }
    }

    /// The record of a completed request.
    fn record(&mut self, dev: u32, l: &Live, h: &EndHalf) -> IoEvent {
        let mut flags = h.flags;
        let submitter = (l.start != NONE).then(|| self.take_start(l.start));
        let (pid, comm, cgroup) = if let Some(s) = submitter {
            flags |= s.flags;
            (s.pid, s.comm, s.cgroup)
        } else {
            // A request the kernel does not account has a stale start stamp: its issue or
            // completion instant says at least whether it went on after the attach.
            let started = if flags & EV_NOT_ACCOUNTED == 0 {
                h.head.start_ns
            } else if l.issue_ns != 0 {
                l.issue_ns
            } else {
                h.complete_ns
            };
            if started < self.attach_ns {
                flags |= EV_STARTED_BEFORE_ATTACH;
                self.stats.started_before_attach += 1;
            } else {
                self.stats.starts_lost += 1;
            }
            (0, [0; 16], 0)
        };
        // The issue instant: from the issue half; else the kernel's stamp at completion.
        let mut issue_ns = if l.issue_ns != 0 {
            l.issue_ns
        } else {
            h.issue_ns
        };
        // The start: the kernel's stamp, which its counters use; on a request it does not
        // account the stamp is an earlier request's, so the start program's clock (else the
        // issue's, else the completion's).
        let enter_ns = if flags & EV_NOT_ACCOUNTED == 0 {
            h.head.start_ns
        } else {
            if l.issue_ns == 0 {
                // The kernel's issue stamp is as stale as its start stamp here.
                issue_ns = 0;
            }
            submitter
                .map(|s| s.at_ns)
                .filter(|&t| t != 0)
                .or((issue_ns != 0).then_some(issue_ns))
                .unwrap_or(h.complete_ns)
        };
        if issue_ns == 0 {
            flags |= EV_NEVER_ISSUED;
        }
        IoEvent {
            enter_ns,
            issue_ns,
            complete_ns: h.complete_ns,
            sector: h.sector,
            dev,
            bytes: l.bytes_done.wrapping_add(h.bytes),
            cmd_flags: h.cmd_flags,
            pid,
            dev_inflight: l.dev_at_issue,
            os_inflight: l.os_at_issue,
            error: h.error,
            requeues: l.requeues,
            kind: h.kind,
            flags,
            hw_queue: h.hw_queue,
            file_dev: h.file_dev,
            comm,
            cgroup,
            owner_cgroup: h.owner_cgroup,
            file_ino: h.file_ino,
        }
    }
}

#[cfg(test)]
#[expect(
    clippy::cast_possible_truncation,
    reason = "the simulation's indices and sizes are small and its numbers its own"
)]
mod tests {
    use std::collections::{HashMap, HashSet};

    use crate::{
        END_LAST, END_PART, EV_NEVER_ISSUED, EV_NOT_ACCOUNTED, EV_STARTED_BEFORE_ATTACH, EndHalf,
        HALF_END, HALF_ISSUE, HALF_LOST, HALF_MERGE, HALF_REQUEUE, HALF_START, HalfHead, IoEvent,
        IssueHalf, KIND_FLUSH_RQ, MarkHalf, START_AT_ISSUE, StartHalf,
    };

    use super::Joiner;

    /// xorshift64*: reproducible draws without a dependency.
    struct Rng(u64);
    impl Rng {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n
        }
    }

    fn bytes_of<T: Copy>(v: &T) -> Vec<u8> {
        // SAFETY: the halves are repr(C) plain old data without padding bytes read here
        // uninitialised (Default-built, then fields set).
        unsafe { std::slice::from_raw_parts(std::ptr::from_ref(v).cast::<u8>(), size_of::<T>()) }
            .to_vec()
    }

    const DEV: u32 = 7 << 20;

    /// One simulated request: its instants as the kernel stamps them.
    struct SimReq {
        key: u64,
        start: u64,
        /// Issues, each with the requeue that ended it (the last has none).
        issues: Vec<(u64, Option<u64>)>,
        merged: Option<u64>,
        /// Parts completed before the last (instant, bytes).
        parts: Vec<(u64, u32)>,
        complete: Option<u64>,
        bytes: u32,
        /// The completion half is lost.
        missed: bool,
        /// When its address is free again.
        free_at: u64,
    }

    /// What a program writes, when, on which ring.
    struct Prog {
        at_ns: u64,
        ring: usize,
        bytes: Vec<u8>,
    }

    struct Sim {
        reqs: Vec<SimReq>,
        progs: Vec<Prog>,
    }

    /// Requests on one device at a queue depth around 100, with requeues, merges, parts and
    /// lost completions; start halves written up to `start_delay` after the kernel's stamp
    /// (and now and then `preempted` after), before the request's issue or merge.
    #[expect(
        clippy::too_many_lines,
        clippy::many_single_char_names,
        reason = "one request's life drawn step by step, then its halves; split up, the two \
                  would no longer read side by side"
    )]
    fn simulate(seed: u64, n: usize, start_delay: u64, preempted: u64) -> Sim {
        let mut rng = Rng(seed | 1);
        let mut used = HashSet::new();
        let mut t = 1_000_000;
        let mut unique = |mut v: u64| {
            while !used.insert(v) {
                v += 1;
            }
            v
        };
        let mut key_free: Vec<u64> = vec![0; 256];
        let mut reqs = Vec::new();
        for _ in 0..n {
            t += 1 + rng.below(500);
            let start = unique(t);
            let Some(k) = (0..256).find(|&k| key_free[k] < start) else {
                continue;
            };
            let key = 0xffff_8880_0000_0000 + k as u64 * 0x140;
            let mut r = SimReq {
                key,
                start,
                issues: Vec::new(),
                merged: None,
                parts: Vec::new(),
                complete: None,
                bytes: 4096 * (1 + rng.below(32) as u32),
                missed: false,
                free_at: 0,
            };
            if rng.below(100) < 3 {
                let m = unique(start + 1 + rng.below(3_000));
                r.merged = Some(m);
                r.free_at = m;
            } else {
                let mut at = unique(start + 1 + rng.below(5_000));
                if rng.below(100) < 5 {
                    let rq = unique(at + 1 + rng.below(5_000));
                    r.issues.push((at, Some(rq)));
                    at = unique(rq + 1 + rng.below(1_000));
                }
                r.issues.push((at, None));
                let mut c = at + 1 + rng.below(20_000);
                if rng.below(100) < 3 {
                    let part = unique(c);
                    r.parts.push((part, 4096));
                    r.bytes += 4096;
                    c = part + 1 + rng.below(2_000);
                }
                let c = unique(c);
                r.complete = Some(c);
                r.missed = rng.below(100) < 2;
                r.free_at = c;
            }
            key_free[k] = r.free_at;
            reqs.push(r);
        }
        let mut progs = Vec::new();
        for (i, r) in reqs.iter().enumerate() {
            let head = |half| HalfHead {
                half,
                dev: DEV,
                key: r.key,
                start_ns: r.start,
            };
            let cpu = rng.below(2) as usize;
            let delay = if rng.below(100) == 0 {
                preempted
            } else {
                rng.below(start_delay + 1)
            };
            // The kernel stamps the start, then (preemptible in between) the start program
            // runs, always before the request can be issued or merged.
            let first = r
                .issues
                .first()
                .map(|i| i.0)
                .or(r.merged)
                .unwrap_or(u64::MAX);
            // Now and then the start program reads a stale stamp (the kernel stamps the request
            // when it accounts it, after the program).
            let restamped = r.merged.is_none() && rng.below(100) < 5;
            progs.push(Prog {
                at_ns: (r.start + delay).min(first - 1),
                ring: cpu,
                bytes: bytes_of(&StartHalf {
                    head: HalfHead {
                        start_ns: if restamped {
                            r.start.saturating_sub(25_000_000_000)
                        } else {
                            r.start
                        },
                        ..head(HALF_START)
                    },
                    pid: 1000 + i as u32,
                    comm: *b"fio\0\0\0\0\0\0\0\0\0\0\0\0\0",
                    cgroup: 42,
                    flags: 0,
                    at_ns: r.start,
                }),
            });
            for &(at, requeue) in &r.issues {
                progs.push(Prog {
                    at_ns: at,
                    ring: cpu,
                    bytes: bytes_of(&IssueHalf {
                        head: head(HALF_ISSUE),
                        issue_ns: at,
                    }),
                });
                if let Some(rq) = requeue {
                    progs.push(Prog {
                        at_ns: rq,
                        ring: 1 - cpu,
                        bytes: bytes_of(&MarkHalf {
                            head: head(HALF_REQUEUE),
                            at_ns: rq,
                        }),
                    });
                }
            }
            if let Some(m) = r.merged {
                progs.push(Prog {
                    at_ns: m,
                    ring: cpu,
                    bytes: bytes_of(&MarkHalf {
                        head: head(HALF_MERGE),
                        at_ns: m,
                    }),
                });
            }
            let end_cpu = rng.below(2) as usize;
            let end = |complete_ns, bytes, end| EndHalf {
                head: head(HALF_END),
                complete_ns,
                issue_ns: r.issues.last().map_or(0, |i| i.0),
                sector: i as u64,
                bytes,
                cmd_flags: 0,
                end,
                ..EndHalf::default()
            };
            for &(at, bytes) in &r.parts {
                progs.push(Prog {
                    at_ns: at,
                    ring: end_cpu,
                    bytes: bytes_of(&end(at, bytes, END_PART)),
                });
            }
            if let Some(c) = r.complete
                && !r.missed
            {
                let last = r.bytes - r.parts.iter().map(|p| p.1).sum::<u32>();
                progs.push(Prog {
                    at_ns: c,
                    ring: end_cpu,
                    bytes: bytes_of(&end(c, last, END_LAST)),
                });
            }
        }
        progs.sort_by_key(|p| p.at_ns);
        Sim { reqs, progs }
    }

    /// Drain both rings every `period` ns and sweep up to the drain less `slack`.
    fn join(sim: &Sim, period: u64, slack: u64) -> (Vec<IoEvent>, Joiner) {
        join_on(sim, period, slack, 2)
    }

    /// [`join`] with the halves spread over `rings` rings (the `i`th half of the simulation's
    /// ring `r` on ring `(r + 2 i) % rings`: each ring still in time order).
    fn join_on(sim: &Sim, period: u64, slack: u64, rings: usize) -> (Vec<IoEvent>, Joiner) {
        join_batched(sim, period, slack, rings, 0)
    }

    /// As [`join_on`], each ring's halves of a drain pushed in records of up to `batch`
    /// bytes (several halves one after another, as a CPU's `HalfBatch`); 0: a half a record.
    fn join_batched(
        sim: &Sim,
        period: u64,
        slack: u64,
        rings: usize,
        batch: usize,
    ) -> (Vec<IoEvent>, Joiner) {
        join_drains(sim, period, slack, rings, batch, false)
    }

    /// [`join_batched`], or with `in_place` each record pushed in place
    /// ([`Joiner::push_in_place`]) and kept alive until the join copies what it still needs:
    /// after the sweep of two drains in three, before the next drain's pushes in the third (as
    /// the daemon does when a sweep could not run). Records given back are overwritten, as a
    /// ring's memory is.
    fn join_drains(
        sim: &Sim,
        period: u64,
        slack: u64,
        rings: usize,
        batch: usize,
        in_place: bool,
    ) -> (Vec<IoEvent>, Joiner) {
        fn give_back(j: &mut Joiner, held: &mut Vec<Vec<u8>>) {
            j.unborrow();
            for r in held.iter_mut() {
                r.fill(0xa5);
            }
            held.clear();
        }
        let mut j = Joiner::new(0, rings);
        let mut out = Vec::new();
        let mut next = 0;
        let end = sim.progs.last().map_or(0, |p| p.at_ns);
        let mut drain = sim.progs.first().map_or(0, |p| p.at_ns) + period;
        let mut held: Vec<Vec<u8>> = Vec::new();
        let mut drains = 0;
        loop {
            give_back(&mut j, &mut held);
            let upto = sim.progs[next..].partition_point(|p| p.at_ns <= drain) + next;
            for ring in 0..rings {
                let mut records = Vec::new();
                let mut record = Vec::new();
                for (i, p) in sim.progs.iter().enumerate().take(upto).skip(next) {
                    if (p.ring + 2 * i) % rings != ring {
                        continue;
                    }
                    if record.len() + p.bytes.len() > batch && !record.is_empty() {
                        records.push(std::mem::take(&mut record));
                    }
                    record.extend_from_slice(&p.bytes);
                }
                if !record.is_empty() {
                    records.push(record);
                }
                for r in records {
                    if in_place {
                        held.push(r);
                        // SAFETY: the record stays in `held`, unchanged, until give_back.
                        unsafe { j.push_in_place(ring, held.last().unwrap()) };
                    } else {
                        j.push(ring, &r);
                    }
                }
            }
            next = upto;
            j.sweep(drain.saturating_sub(slack), &mut |e| out.push(e));
            drains += 1;
            if drains % 3 != 0 {
                give_back(&mut j, &mut held);
            }
            if drain > end {
                break;
            }
            drain += period;
        }
        j.finish(&mut |e| out.push(e));
        give_back(&mut j, &mut held);
        (out, j)
    }

    /// The counts each completed request must carry at its (last) issue, from the simulated
    /// intervals: in the OS from the start to the completion, merge, or (completion lost) the
    /// next start at its address; at the device over each issue until its requeue or end.
    fn expected(sim: &Sim) -> HashMap<u64, (u32, u32)> {
        let mut next_start: HashMap<u64, u64> = HashMap::new();
        let mut leave = vec![u64::MAX; sim.reqs.len()];
        for (i, r) in sim.reqs.iter().enumerate().rev() {
            leave[i] = match (r.merged, r.complete, r.missed) {
                (Some(m), _, _) => m,
                (None, Some(c), false) => c,
                _ => next_start.get(&r.key).copied().unwrap_or(u64::MAX),
            };
            next_start.insert(r.key, r.start);
        }
        let mut want = HashMap::new();
        for (i, r) in sim.reqs.iter().enumerate() {
            if r.missed || r.complete.is_none() {
                continue;
            }
            let t = r.issues.last().unwrap().0;
            let os = (0..sim.reqs.len())
                .filter(|&q| sim.reqs[q].start <= t && t < leave[q])
                .count() as u32;
            let dev = (0..sim.reqs.len())
                .filter(|&q| {
                    let iq = &sim.reqs[q].issues;
                    iq.iter().enumerate().any(|(k, &(at, rq))| {
                        let until = rq.unwrap_or(if k + 1 == iq.len() {
                            leave[q]
                        } else {
                            u64::MAX
                        });
                        at <= t && t < until
                    })
                })
                .count() as u32;
            want.insert(i as u64, (os.max(dev), dev));
        }
        want
    }

    #[test]
    fn joined_records_carry_the_exact_counts_of_their_intervals() {
        // Two rings merged pairwise; one ring; six merged by runs.
        for (seed, rings) in (1..=8).map(|s| (s, [2, 1, 6][s as usize % 3])) {
            let sim = simulate(seed, 3_000, 2_000, 50_000);
            let want = expected(&sim);
            let (out, j) = join_on(&sim, 20_000, 60_000, rings);
            let st = j.stats();
            assert_eq!(st.late, 0, "seed {seed}, {rings} rings");
            assert_eq!(st.malformed, 0);
            assert_eq!(
                out.len(),
                want.len(),
                "seed {seed}: every completion one record"
            );
            for e in &out {
                let r = &sim.reqs[e.sector as usize];
                assert_eq!(
                    (e.os_inflight, e.dev_inflight),
                    want[&e.sector],
                    "seed {seed}, request {}",
                    e.sector
                );
                assert_eq!(e.bytes, r.bytes);
                assert_eq!(e.enter_ns, r.start);
                assert_eq!(e.issue_ns, r.issues.last().unwrap().0);
                assert_eq!(e.requeues as usize, r.issues.len() - 1);
                assert_eq!(e.pid, 1000 + e.sector as u32);
                assert_eq!(&e.comm[..4], b"fio\0");
            }
            // A lost completion is seen when its address comes back; the others are open.
            let reused = sim
                .reqs
                .iter()
                .enumerate()
                .filter(|(i, r)| r.missed && sim.reqs[i + 1..].iter().any(|q| q.key == r.key))
                .count() as u64;
            let never = sim.reqs.iter().filter(|r| r.missed).count() as u64 - reused;
            assert_eq!(st.missed_completions, reused, "seed {seed}");
            assert_eq!(st.open_at_end, never, "seed {seed}");
            assert_eq!(j.open(), never as usize);
            // Each one's stage: every missed request was issued, some completed in part.
            let parted = sim
                .reqs
                .iter()
                .filter(|r| r.missed && !r.parts.is_empty())
                .count() as u64;
            assert_eq!(
                st.missed_stage,
                [parted, reused + never - parted, 0],
                "seed {seed}"
            );
            // Records come out in completion order within a sweep, and every one exactly
            // once.
            let ids: HashSet<u64> = out.iter().map(|e| e.sector).collect();
            assert_eq!(ids.len(), out.len());
        }
    }

    #[test]
    fn halves_in_batches_join_as_they_do_one_by_one() {
        for (seed, rings) in [(3, 2), (4, 1), (5, 6)] {
            let sim = simulate(seed, 2_000, 2_000, 50_000);
            let (one, j1) = join_on(&sim, 20_000, 60_000, rings);
            for batch in [100, crate::HALF_BATCH_BYTES] {
                let (batched, j) = join_batched(&sim, 20_000, 60_000, rings, batch);
                assert_eq!(
                    batched, one,
                    "seed {seed}, {rings} rings, batches of {batch}"
                );
                assert_eq!(j.stats(), j1.stats());
            }
        }
    }

    #[test]
    fn halves_read_in_place_join_as_they_do_copied() {
        for (seed, rings, batch) in [
            (3, 2, 0),
            (4, 1, 100),
            (5, 6, crate::HALF_BATCH_BYTES),
            (6, 2, crate::HALF_BATCH_BYTES),
        ] {
            // Preempted programs (halves behind the sweep) and drains shorter than a request.
            let sim = simulate(seed, 2_000, 2_000, 50_000);
            for (period, slack) in [(20_000, 60_000), (7_000, 1_000)] {
                let (copied, jc) = join_batched(&sim, period, slack, rings, batch);
                let (in_place, j) = join_drains(&sim, period, slack, rings, batch, true);
                assert_eq!(
                    in_place, copied,
                    "seed {seed}, {rings} rings, batches of {batch}, drains {period}"
                );
                assert_eq!(j.stats(), jc.stats());
                assert!(j.borrowed.is_empty());
            }
        }
    }

    #[test]
    fn a_batch_lost_whole_names_its_halves_as_marks() {
        let head = |half, key| HalfHead {
            half,
            dev: DEV,
            key,
            start_ns: 1,
        };
        let end = |key, complete_ns, end| EndHalf {
            head: head(HALF_END, key),
            complete_ns,
            bytes: 4096,
            end,
            ..EndHalf::default()
        };
        let mut j = Joiner::new(0, 3);
        // A and B start and are issued on ring 0; the batch with A's end, B's partial end and
        // last end, and C's start went to the ring of lost marks (ring 2), whole.
        let mut written = Vec::new();
        for (key, at) in [(0xa, 100), (0xb, 105)] {
            written.extend(bytes_of(&StartHalf {
                head: head(HALF_START, key),
                pid: 7,
                at_ns: at,
                ..StartHalf::default()
            }));
            written.extend(bytes_of(&IssueHalf {
                head: head(HALF_ISSUE, key),
                issue_ns: at + 5,
            }));
        }
        j.push(0, &written);
        let mut lost = bytes_of(&end(0xa, 150, END_LAST));
        lost.extend(bytes_of(&end(0xb, 155, END_PART)));
        lost.extend(bytes_of(&end(0xb, 160, END_LAST)));
        lost.extend(bytes_of(&StartHalf {
            head: head(HALF_START, 0xc),
            pid: 9,
            at_ns: 170,
            ..StartHalf::default()
        }));
        j.push_lost(2, &lost);
        // C's issue and end reach ring 1.
        let mut rest = bytes_of(&IssueHalf {
            head: head(HALF_ISSUE, 0xc),
            issue_ns: 175,
        });
        rest.extend(bytes_of(&end(0xc, 190, END_LAST)));
        j.push(1, &rest);
        let mut out = Vec::new();
        j.finish(&mut |e| out.push(e));
        // A and B closed by their named last ends, without records; C recorded without its
        // submitter (its start half lost), alone in the OS and at the device.
        assert_eq!(out.len(), 1);
        assert_eq!(
            (
                out[0].pid,
                out[0].enter_ns,
                out[0].issue_ns,
                out[0].os_inflight,
                out[0].dev_inflight
            ),
            (0, 1, 175, 1, 1)
        );
        let st = j.stats();
        assert_eq!((st.gone, st.missed_completions, st.open_at_end), (2, 0, 0));
        assert_eq!((st.starts_lost, st.malformed), (1, 0));
    }

    #[test]
    fn halves_behind_the_sweep_are_counted_late_and_still_joined() {
        // A start half written 50 µs after its stamp, with a slack of 1 µs: the sweep has
        // passed its instant. The record still comes out whole, with its submitter.
        let sim = simulate(3, 2_000, 2_000, 50_000);
        let want = expected(&sim);
        let (out, j) = join(&sim, 20_000, 1_000);
        let st = j.stats();
        assert!(st.late > 0);
        assert_eq!(out.len(), want.len());
        assert!(out.iter().all(|e| e.pid == 1000 + e.sector as u32));
        // Counts move by the late ones only, never wrap.
        let off = out
            .iter()
            .filter(|e| (e.os_inflight, e.dev_inflight) != want[&e.sector])
            .count();
        assert!(off > 0 && (off as u64) < st.late * 200, "{off} off, {st:?}");
        assert!(out.iter().all(|e| e.os_inflight < 1_000));
    }

    #[test]
    fn the_flush_request_issued_again_after_a_requeue_is_one_request() {
        // The issue program writes the flush request's start half at each issue, at the
        // issue's instant; after a requeue the second is the same request, not a new one.
        let mut j = Joiner::new(1_000, 1);
        let head = |half, start_ns| HalfHead {
            half,
            dev: DEV,
            key: 0x2000,
            start_ns,
        };
        let start_at = |at_ns| StartHalf {
            head: head(HALF_START, 3_000),
            pid: 44,
            flags: START_AT_ISSUE,
            at_ns,
            ..StartHalf::default()
        };
        let issue = |issue_ns| IssueHalf {
            head: head(HALF_ISSUE, 3_000),
            issue_ns,
        };
        j.push(0, &bytes_of(&start_at(4_000)));
        j.push(0, &bytes_of(&issue(4_000)));
        j.push(
            0,
            &bytes_of(&MarkHalf {
                head: head(HALF_REQUEUE, 3_000),
                at_ns: 5_000,
            }),
        );
        j.push(0, &bytes_of(&start_at(6_000)));
        j.push(0, &bytes_of(&issue(6_000)));
        j.push(
            0,
            &bytes_of(&EndHalf {
                head: head(HALF_END, 3_000),
                complete_ns: 7_000,
                kind: KIND_FLUSH_RQ,
                end: END_LAST,
                ..EndHalf::default()
            }),
        );
        // The next flush at the address: a new request (another stamp), met at its issue.
        j.push(
            0,
            &bytes_of(&StartHalf {
                head: head(HALF_START, 8_000),
                ..start_at(9_000)
            }),
        );
        j.push(
            0,
            &bytes_of(&IssueHalf {
                head: head(HALF_ISSUE, 8_000),
                issue_ns: 9_000,
            }),
        );
        j.push(
            0,
            &bytes_of(&EndHalf {
                head: head(HALF_END, 8_000),
                complete_ns: 10_000,
                kind: KIND_FLUSH_RQ,
                end: END_LAST,
                ..EndHalf::default()
            }),
        );
        let mut out = Vec::new();
        j.sweep(20_000, &mut |e| out.push(e));
        let st = j.stats();
        assert_eq!(st.missed_completions, 0, "{st:?}");
        assert_eq!(out.len(), 2);
        assert_eq!(
            (out[0].requeues, out[0].pid, out[0].issue_ns),
            (1, 44, 6_000)
        );
        assert_eq!((out[0].os_inflight, out[0].dev_inflight), (1, 1));
        assert_eq!(out[1].requeues, 0);
        assert_eq!(j.open(), 0);
    }

    #[test]
    fn completions_missed_before_the_run_or_after_its_end_are_not_the_runs() {
        // The run counts completions in (10_000, 20_000]; the join goes on past its end (the
        // daemon waits for the requests in flight at the end).
        let mut j = Joiner::new(1_000, 1);
        j.set_run(10_000, 20_000);
        let head = |half, key, start_ns| HalfHead {
            half,
            dev: DEV,
            key,
            start_ns,
        };
        let mut request = |key: u64, start_ns: u64, issue_ns: u64, end_ns: Option<u64>| {
            j.push(
                0,
                &bytes_of(&StartHalf {
                    head: head(HALF_START, key, start_ns),
                    at_ns: start_ns,
                    ..StartHalf::default()
                }),
            );
            j.push(
                0,
                &bytes_of(&IssueHalf {
                    head: head(HALF_ISSUE, key, start_ns),
                    issue_ns,
                }),
            );
            if let Some(complete_ns) = end_ns {
                j.push(
                    0,
                    &bytes_of(&EndHalf {
                        head: head(HALF_END, key, start_ns),
                        complete_ns,
                        end: END_LAST,
                        ..EndHalf::default()
                    }),
                );
            }
        };
        // At 0x100: the first completion missed before the start (found at 8_000), the
        // second inside the run (found at 15_000), then one seen, then one missed after the
        // end (its request issued at 21_100), and one open past the end.
        request(0x100, 5_000, 5_100, None);
        request(0x100, 8_000, 8_100, None);
        request(0x100, 15_000, 15_100, Some(16_000));
        request(0x100, 21_000, 21_100, None);
        request(0x100, 22_000, 22_100, None);
        // At 0x200: seen issued before the end and found missed after it, which may have
        // come before the end: counted.
        request(0x200, 19_000, 19_500, None);
        request(0x200, 25_000, 25_100, Some(26_000));
        // At 0x300: started before the end, issued after it, never completed: its completion
        // would come after the end.
        request(0x300, 19_800, 20_500, None);
        let mut out = Vec::new();
        j.finish_by(20_000, &mut |e| out.push(e));
        let st = j.stats();
        assert_eq!(out.len(), 2, "{st:?}");
        assert_eq!(
            (st.missed_completions, st.missed_outside_run, st.open_at_end),
            (2, 2, 0),
            "{st:?}"
        );
        assert_eq!(st.missed_stage, [0, 2, 0]);
    }

    #[test]
    fn a_request_from_before_the_attach_has_no_submitter_and_is_flagged() {
        let mut j = Joiner::new(5_000, 2);
        let head = |half, start_ns| HalfHead {
            half,
            dev: DEV,
            key: 0x1000,
            start_ns,
        };
        j.push(
            0,
            &bytes_of(&IssueHalf {
                head: head(HALF_ISSUE, 4_000),
                issue_ns: 6_000,
            }),
        );
        j.push(
            0,
            &bytes_of(&EndHalf {
                head: head(HALF_END, 4_000),
                complete_ns: 9_000,
                issue_ns: 6_000,
                bytes: 4096,
                ..EndHalf::default()
            }),
        );
        // Its address comes back for a request started after the attach whose start half is
        // lost: no submitter either, but not "before the attach".
        j.push(
            0,
            &bytes_of(&EndHalf {
                head: head(HALF_END, 10_000),
                complete_ns: 12_000,
                issue_ns: 11_000,
                bytes: 512,
                ..EndHalf::default()
            }),
        );
        let mut out = Vec::new();
        j.sweep(20_000, &mut |e| out.push(e));
        assert_eq!(out.len(), 2);
        assert_ne!(out[0].flags & EV_STARTED_BEFORE_ATTACH, 0);
        assert_eq!((out[0].os_inflight, out[0].dev_inflight), (1, 1));
        assert_eq!(out[1].flags & EV_STARTED_BEFORE_ATTACH, 0);
        assert_eq!(out[1].issue_ns, 11_000);
        assert_eq!(j.stats().starts_lost, 1);
        assert_eq!(j.open(), 0);
    }

    #[test]
    fn a_request_the_kernel_does_not_account_is_timed_by_the_programs_clocks() {
        // iostats off: the kernel's start and issue stamps are an earlier request's.
        let mut j = Joiner::new(1_000, 1);
        let head = |half| HalfHead {
            half,
            dev: DEV,
            key: 0x2000,
            start_ns: 7,
        };
        j.push(
            0,
            &bytes_of(&StartHalf {
                head: head(HALF_START),
                pid: 42,
                at_ns: 50_000,
                ..StartHalf::default()
            }),
        );
        j.push(
            0,
            &bytes_of(&IssueHalf {
                head: head(HALF_ISSUE),
                issue_ns: 51_000,
            }),
        );
        let end = EndHalf {
            head: head(HALF_END),
            complete_ns: 60_000,
            issue_ns: 9,
            bytes: 4096,
            flags: EV_NOT_ACCOUNTED,
            ..EndHalf::default()
        };
        j.push(0, &bytes_of(&end));
        // Its address again, its start and issue halves lost: no instant but the completion's.
        j.push(
            0,
            &bytes_of(&EndHalf {
                complete_ns: 70_000,
                ..end
            }),
        );
        let mut out = Vec::new();
        j.finish(&mut |e| out.push(e));
        assert_eq!(out.len(), 2);
        assert_eq!(
            (
                out[0].enter_ns,
                out[0].issue_ns,
                out[0].complete_ns,
                out[0].pid
            ),
            (50_000, 51_000, 60_000, 42)
        );
        assert_eq!((out[1].enter_ns, out[1].issue_ns), (70_000, 0));
        assert_ne!(out[1].flags & EV_NEVER_ISSUED, 0);
        assert_eq!(out[1].flags & EV_STARTED_BEFORE_ATTACH, 0);
        assert_eq!(j.stats().starts_lost, 1);
    }

    #[test]
    fn halves_lost_to_a_full_ring_and_named_still_count_and_close() {
        let mut j = Joiner::new(0, 2);
        let head = |half, key| HalfHead {
            half,
            dev: DEV,
            key,
            start_ns: 1,
        };
        let lost = |half, key, at_ns| MarkHalf {
            head: head(half | HALF_LOST, key),
            at_ns,
        };
        // A: start and issue halves lost, named; its end written.
        j.push(1, &bytes_of(&lost(HALF_START, 0xa, 100)));
        j.push(1, &bytes_of(&lost(HALF_ISSUE, 0xa, 110)));
        // B: started and issued while A is at the device, its last end lost, named.
        j.push(
            0,
            &bytes_of(&StartHalf {
                head: head(HALF_START, 0xb),
                at_ns: 120,
                ..StartHalf::default()
            }),
        );
        j.push(
            0,
            &bytes_of(&IssueHalf {
                head: head(HALF_ISSUE, 0xb),
                issue_ns: 130,
            }),
        );
        j.push(1, &bytes_of(&lost(HALF_END, 0xb, 140)));
        j.push(
            0,
            &bytes_of(&EndHalf {
                head: head(HALF_END, 0xa),
                complete_ns: 150,
                bytes: 4096,
                ..EndHalf::default()
            }),
        );
        // C at B's address: B closed by its lost end, so no missed completion; C's issue
        // finds one request at the device, itself.
        j.push(
            0,
            &bytes_of(&StartHalf {
                head: head(HALF_START, 0xb),
                at_ns: 160,
                ..StartHalf::default()
            }),
        );
        j.push(
            0,
            &bytes_of(&IssueHalf {
                head: head(HALF_ISSUE, 0xb),
                issue_ns: 170,
            }),
        );
        j.push(
            0,
            &bytes_of(&EndHalf {
                head: head(HALF_END, 0xb),
                complete_ns: 180,
                bytes: 512,
                ..EndHalf::default()
            }),
        );
        let mut out = Vec::new();
        j.finish(&mut |e| out.push(e));
        assert_eq!(out.len(), 2, "A and C, not B");
        // A: no submitter, its issue instant from the mark; it was alone at the device.
        assert_eq!(
            (out[0].pid, out[0].issue_ns, out[0].dev_inflight),
            (0, 110, 1)
        );
        // C: B gone, A done, alone in the OS and at the device.
        assert_eq!(
            (
                out[1].bytes,
                out[1].issue_ns,
                out[1].dev_inflight,
                out[1].os_inflight
            ),
            (512, 170, 1, 1)
        );
        let st = j.stats();
        assert_eq!((st.gone, st.missed_completions, st.open_at_end), (1, 0, 0));
        assert_eq!(st.starts_lost, 1);
    }

    #[test]
    fn short_or_unknown_halves_are_counted_malformed() {
        let mut j = Joiner::new(0, 2);
        j.push(0, &[1, 0, 0]);
        let mut h = bytes_of(&StartHalf::default());
        h[0] = 99;
        j.push(1, &h);
        let mut s = bytes_of(&StartHalf {
            head: HalfHead {
                half: HALF_START,
                ..HalfHead::default()
            },
            ..StartHalf::default()
        });
        s.truncate(30);
        j.push(0, &s);
        assert_eq!(j.stats().malformed, 3);
        assert_eq!(j.open(), 0);
    }
}
