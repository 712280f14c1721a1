//! The running classification: [`Engine`] over the records, and the per-class tables it
//! makes ([`Classes`]).

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};
use tracer_common::format::{IoRecord, Task};
use tracer_common::op::StatGroup;

use super::{
    DATA_FILE, Grouping, MAX_GROUPS, MAX_PENDING, NO_GROUP, Profile, any, data_of, sstable_group,
};
use crate::analysis::loghist::LogHist;
use crate::analysis::sizes::SizeClass;

/// IOs of one class (or waiting for one) on one device.
#[derive(Default, Clone)]
struct Tally {
    ios: u64,
    read_ios: u64,
    write_ios: u64,
    read_bytes: u64,
    write_bytes: u64,
    other_bytes: u64,
    sizes: Sizes,
    latency: LogHist,
}

/// IOs per exact size, folded into size classes at the end. A class's tally counts multiples
/// of 512 bytes up to [`DIRECT_MAX`] by index (query reads come in dozens of sizes); others,
/// and the tallies of IO waiting for a group's maker (many, small), in a list whose last hit is
/// looked at first.
#[derive(Default, Clone)]
struct Sizes {
    direct: bool,
    by_sector: Vec<u64>,
    list: Vec<(u32, u64)>,
    last: usize,
}

/// 4 MiB: at most 64 KiB of counts per class and device.
const DIRECT_MAX: u32 = 4 << 20;

impl Sizes {
    #[inline]
    fn add(&mut self, bytes: u32, n: u64) {
        if self.direct && bytes.is_multiple_of(512) && bytes <= DIRECT_MAX {
            let i = (bytes / 512) as usize;
            if i >= self.by_sector.len() {
                self.by_sector.resize(i + 1, 0);
            }
            self.by_sector[i] += n;
            return;
        }
        if let Some(e) = self.list.get_mut(self.last).filter(|e| e.0 == bytes) {
            e.1 += n;
            return;
        }
        if let Some(i) = self.list.iter().position(|e| e.0 == bytes) {
            self.list[i].1 += n;
            self.last = i;
        } else {
            self.list.push((bytes, n));
            self.last = self.list.len() - 1;
        }
    }

    fn each(&self) -> impl Iterator<Item = (u32, u64)> + '_ {
        let sectors = (0u32..)
            .zip(&self.by_sector)
            .filter(|(_, n)| **n > 0)
            .map(|(i, &n)| (i * 512, n));
        sectors.chain(self.list.iter().copied())
    }
}

impl Tally {
    #[inline]
    fn record(&mut self, r: &IoRecord, g: StatGroup) {
        let b = u64::from(r.bytes);
        self.ios += 1;
        match g {
            StatGroup::Read => {
                self.read_ios += 1;
                self.read_bytes += b;
            }
            StatGroup::Write => {
                self.write_ios += 1;
                self.write_bytes += b;
            }
            _ => self.other_bytes += b,
        }
        if r.bytes > 0 {
            self.sizes.add(r.bytes, 1);
        }
        self.latency.record(r.total_ns().max(1));
    }

    /// A class's tally (sizes counted by index).
    fn direct() -> Tally {
        Tally {
            sizes: Sizes {
                direct: true,
                ..Sizes::default()
            },
            ..Tally::default()
        }
    }

    /// IOs and bytes per size class.
    fn size_classes(&self) -> BTreeMap<SizeClass, (u64, u64)> {
        let mut out: BTreeMap<SizeClass, (u64, u64)> = BTreeMap::new();
        for (b, n) in self.sizes.each() {
            let e = out.entry(SizeClass::of(u64::from(b))).or_default();
            e.0 += n;
            e.1 += n * u64::from(b);
        }
        out
    }

    fn add(&mut self, o: &Tally) {
        self.ios += o.ios;
        self.read_ios += o.read_ios;
        self.write_ios += o.write_ios;
        self.read_bytes += o.read_bytes;
        self.write_bytes += o.write_bytes;
        self.other_bytes += o.other_bytes;
        for (b, n) in o.sizes.each() {
            self.sizes.add(b, n);
        }
        self.latency.add(&o.latency);
    }

    fn bytes(&self) -> u64 {
        self.read_bytes + self.write_bytes + self.other_bytes
    }
}

#[derive(Clone, Copy)]
struct FileEntry {
    /// Rules that hold for the file's name.
    mask: u64,
    group: u32,
}

struct Group {
    path: String,
    /// The maker's comm and the rules that hold for it.
    creator: Option<(String, u64)>,
    /// The class of the maker's first write.
    made_as: Option<usize>,
}

/// A file group the trace saw made, for the comparison with the application's log.
#[derive(Clone, Debug, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct Made {
    /// `<dir>/nb-12-big` for an SSTable, else the file's path.
    pub path: String,
    pub class: String,
    pub creator: String,
}

/// The per-class table of one device.
#[derive(Clone, Debug, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct DeviceClasses {
    pub name: String,
    pub classes: Vec<ClassRow>,
}

#[derive(Clone, Debug, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct ClassRow {
    pub class: String,
    pub ios: u64,
    pub bytes: u64,
    pub pct_ios: f64,
    pub pct_bytes: f64,
    pub read_ios: u64,
    pub read_bytes: u64,
    pub write_ios: u64,
    pub write_bytes: u64,
    /// Size classes by IOs, most first.
    pub block_sizes: Vec<crate::report::model::JsonSize>,
    /// Total latency (entry into the block layer to completion), microseconds.
    pub p50_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
}

/// The classes of a report: the profile and, per device, the table.
#[derive(Clone, Debug, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct Classes {
    pub profile: String,
    pub devices: Vec<DeviceClasses>,
    /// Groups the trace saw made (SSTables), with the class of their maker's first write.
    #[serde(skip)]
    pub made: Vec<Made>,
    /// The class names, and the bytes written per class per (device, fine bin) (empty when
    /// left out for memory), for the time series.
    #[serde(skip)]
    pub names: Vec<String>,
    #[serde(skip)]
    pub written: HashMap<(u32, u64), Vec<u64>>,
}

impl Classes {
    /// A device's written bytes per class and fine bin, for bins `0..bins`: (class, bytes per
    /// bin) for each class that wrote anything.
    pub fn fine_written(&self, dev: u32, bins: usize) -> Vec<(&str, Vec<u64>)> {
        let mut out: Vec<(&str, Vec<u64>)> = self
            .names
            .iter()
            .map(|n| (n.as_str(), vec![0; bins]))
            .collect();
        for ((d, b), v) in &self.written {
            let Some(b) = usize::try_from(*b).ok().filter(|b| *d == dev && *b < bins) else {
                continue;
            };
            for (o, x) in out.iter_mut().zip(v) {
                o.1[b] += x;
            }
        }
        out.retain(|(_, v)| v.iter().any(|&x| x > 0));
        out
    }
}

/// The running classification.
pub struct Engine {
    p: Profile,
    op_masks: [u64; 4],
    needs_creator: u64,
    /// By task index: rules that hold for its comm, and whether it is writeback.
    tasks: Vec<Option<(u64, bool)>>,
    /// By file id ([`IoRecord::file_id`]): the file's rules and group, once named.
    files: Vec<Option<FileEntry>>,
    groups: Vec<Group>,
    group_of: HashMap<String, u32>,
    /// Per device, per class.
    per_dev: Vec<(u32, Vec<Tally>)>,
    /// The index in `per_dev` found last.
    last_dev: usize,
    /// Per group: (device, rules that held but for the maker, tally).
    pending: HashMap<u32, Vec<(u32, u64, Pending)>>,
    pending_n: usize,
    /// Written bytes per (device, fine bin of completion) and class, for the bursts.
    bins: HashMap<(u32, u64), Vec<u64>>,
    bins_full: bool,
    t0_ns: u64,
    fine_ns: u64,
}

/// IO waiting for its group's maker: its tally, and its written bytes per fine bin.
#[derive(Default)]
struct Pending {
    tally: Tally,
    bins: Vec<(u64, u64)>,
}

/// Fine bins of written bytes per class remembered at most (about 100 bytes each); beyond,
/// bursts are not split by class ([`Engine::bins_full`]).
const MAX_BINS: usize = 1 << 20;
/// Fine bins one waiting tally keeps at most; beyond, it is classed as if its group had no
/// maker.
const MAX_PENDING_BINS: usize = 4096;

fn group_index(g: StatGroup) -> usize {
    match g {
        StatGroup::Read => 0,
        StatGroup::Write => 1,
        StatGroup::Discard => 2,
        StatGroup::Flush => 3,
    }
}

impl Engine {
    /// `t0_ns` and `fine_ns`: the time series' origin and fine bin, so that a burst's bins
    /// are these bins.
    pub fn new(p: Profile, t0_ns: u64, fine_ns: u64) -> Engine {
        Engine {
            op_masks: StatGroup::ALL.map(|g| p.op_mask(g)),
            needs_creator: p.needs_creator(),
            p,
            tasks: Vec::new(),
            files: Vec::new(),
            groups: Vec::new(),
            group_of: HashMap::new(),
            per_dev: Vec::new(),
            last_dev: 0,
            pending: HashMap::new(),
            pending_n: 0,
            bins: HashMap::new(),
            bins_full: false,
            t0_ns,
            fine_ns: fine_ns.max(1),
        }
    }

    pub fn profile(&self) -> &Profile {
        &self.p
    }

    /// Whether the bursts' class split is left out (too many fine bins for the memory bound).
    pub fn bins_full(&self) -> bool {
        self.bins_full
    }

    fn task(&mut self, i: usize, tasks: &[Task]) -> (u64, bool) {
        if i >= self.tasks.len() {
            self.tasks.resize(tasks.len().max(i + 1), None);
        }
        if let Some(t) = self.tasks[i] {
            return t;
        }
        let comm = tasks.get(i).map_or("", |t| t.comm.as_str());
        let t = (self.p.comm_mask(comm), any(&self.p.writeback, comm));
        self.tasks[i] = Some(t);
        t
    }

    /// The rules and group of a record's file; `name`: a file's path by id.
    fn file(&mut self, r: &IoRecord, name: &dyn Fn(u32) -> Option<String>) -> FileEntry {
        let id = r.file_id as usize;
        if let Some(Some(f)) = self.files.get(id) {
            return *f;
        }
        let data = data_of(r.file_dev);
        let path = if data == DATA_FILE && id != 0 {
            name(r.file_id)
        } else {
            None
        };
        let mask = self.p.file_mask(data, path.as_deref());
        // Only named files make groups.
        let group = match &path {
            Some(path) => {
                let key = match self.p.grouping {
                    Grouping::Sstable => sstable_group(path).unwrap_or(path),
                    Grouping::File => path,
                };
                if let Some(&g) = self.group_of.get(key) {
                    g
                } else if self.groups.len() < MAX_GROUPS {
                    let g = u32::try_from(self.groups.len()).unwrap_or(NO_GROUP);
                    self.groups.push(Group {
                        path: key.to_string(),
                        creator: None,
                        made_as: None,
                    });
                    self.group_of.insert(key.to_string(), g);
                    g
                } else {
                    NO_GROUP
                }
            }
            _ => NO_GROUP,
        };
        let f = FileEntry { mask, group };
        // A file met unnamed may be named later in the trace: ask again then.
        if id != 0 && (path.is_some() || data != DATA_FILE) {
            if self.files.len() <= id {
                self.files.resize(id + 1, None);
            }
            self.files[id] = Some(f);
        }
        f
    }

    /// The class given the candidate rules and the group's maker (None: not known yet), or
    /// None when it depends on a maker not known yet.
    fn decide(&self, cand: u64, creator: Option<u64>) -> Option<usize> {
        if let Some(cm) = creator {
            return Some(self.p.first(cand & cm));
        }
        let first = cand & cand.wrapping_neg();
        if first & self.needs_creator == 0 {
            Some(self.p.first(cand))
        } else {
            None
        }
    }

    fn dev_index(&mut self, dev: u32) -> usize {
        let classes = self.p.classes.len();
        crate::analysis::per_device::index(
            &mut self.per_dev,
            &mut self.last_dev,
            dev,
            |d| d.0,
            || (dev, vec![Tally::direct(); classes]),
        )
    }

    fn bin(&self, complete_ns: u64) -> u64 {
        complete_ns.saturating_sub(self.t0_ns) / self.fine_ns
    }

    fn add_bin(&mut self, dev: u32, bin: u64, class: usize, bytes: u64) {
        if self.bins_full {
            return;
        }
        if self.bins.len() >= MAX_BINS && !self.bins.contains_key(&(dev, bin)) {
            self.bins_full = true;
            self.bins = HashMap::new();
            return;
        }
        let n = self.p.classes.len();
        self.bins.entry((dev, bin)).or_insert_with(|| vec![0; n])[class] += bytes;
    }

    /// One chunk; `name`: a file's path by its id, as the trace named it so far.
    pub fn chunk(
        &mut self,
        records: &[IoRecord],
        tasks: &[Task],
        name: &dyn Fn(u32) -> Option<String>,
    ) {
        let mut last_file: Option<((u32, u32), FileEntry)> = None;
        for r in records {
            let g = r.stat_group();
            let (tmask, writeback) = self.task(r.task as usize, tasks);
            let key = (r.file_dev, r.file_id);
            let f = match last_file {
                Some((k, f)) if k == key => f,
                _ => {
                    let f = self.file(r, name);
                    last_file = Some((key, f));
                    f
                }
            };
            let cand = tmask & f.mask & self.op_masks[group_index(g)];
            let group = (f.group != NO_GROUP).then_some(f.group as usize);
            // The first write to a group by a thread that is not writeback makes it.
            if let Some(gi) = group
                && g == StatGroup::Write
                && !writeback
                && self.groups[gi].creator.is_none()
            {
                let comm = tasks.get(r.task as usize).map_or("", |t| t.comm.as_str());
                let cm = self.p.creator_mask(comm);
                self.groups[gi].creator = Some((comm.to_string(), cm));
                self.groups[gi].made_as = Some(self.p.first(cand & cm));
                self.release(gi, cm);
            }
            // An IO of no group has no maker, now or later.
            let creator = match group {
                Some(gi) => self.groups[gi].creator.as_ref().map(|c| c.1),
                None => Some(!self.needs_creator),
            };
            let class = match (self.decide(cand, creator), group) {
                (Some(c), _) => c,
                (None, Some(gi)) if self.pending_n < MAX_PENDING => {
                    self.wait(gi, r, g, cand);
                    continue;
                }
                (None, _) => self.p.first(cand & !self.needs_creator),
            };
            let di = self.dev_index(r.dev);
            self.per_dev[di].1[class].record(r, g);
            if g == StatGroup::Write {
                self.add_bin(r.dev, self.bin(r.complete_ns), class, u64::from(r.bytes));
            }
        }
    }

    /// Tally an IO whose class waits for its group's maker.
    fn wait(&mut self, gi: usize, r: &IoRecord, g: StatGroup, cand: u64) {
        let bin = self.bin(r.complete_ns);
        let key = u32::try_from(gi).unwrap_or(NO_GROUP);
        let list = self.pending.entry(key).or_default();
        let i = if let Some(i) = list.iter().position(|e| e.0 == r.dev && e.1 == cand) {
            i
        } else {
            list.push((r.dev, cand, Pending::default()));
            self.pending_n += 1;
            list.len() - 1
        };
        let p = &mut list[i].2;
        p.tally.record(r, g);
        if g == StatGroup::Write {
            match p.bins.last_mut() {
                Some(l) if l.0 == bin => l.1 += u64::from(r.bytes),
                _ => p.bins.push((bin, u64::from(r.bytes))),
            }
            if p.bins.len() > MAX_PENDING_BINS {
                // Waited too long: classed as if the group had no maker.
                let (dev, cand, p) = list.swap_remove(i);
                self.pending_n -= 1;
                let class = self.p.first(cand & !self.needs_creator);
                self.settle_one(dev, class, &p);
            }
        }
    }

    fn settle_one(&mut self, dev: u32, class: usize, p: &Pending) {
        let di = self.dev_index(dev);
        self.per_dev[di].1[class].add(&p.tally);
        for &(bin, bytes) in &p.bins {
            self.add_bin(dev, bin, class, bytes);
        }
    }

    /// A group's maker is known: class what waited for it.
    fn release(&mut self, gi: usize, cm: u64) {
        let Some(list) = u32::try_from(gi).ok().and_then(|g| self.pending.remove(&g)) else {
            return;
        };
        self.pending_n -= list.len();
        for (dev, cand, p) in list {
            let class = self.p.first(cand & cm);
            self.settle_one(dev, class, &p);
        }
    }

    /// After the last chunk: what still waits is classed as if its group had no maker.
    pub fn settle(&mut self) {
        let pending = std::mem::take(&mut self.pending);
        self.pending_n = 0;
        for (_, list) in pending {
            for (dev, cand, p) in list {
                let class = self.p.first(cand & !self.needs_creator);
                self.settle_one(dev, class, &p);
            }
        }
    }

    /// Whether any IO so far is in a class of the profile's rules (not [`OTHER`](super::OTHER)).
    pub fn claimed(&self) -> bool {
        let other = self.p.other();
        self.per_dev
            .iter()
            .any(|(_, t)| t.iter().enumerate().any(|(i, t)| i != other && t.ios > 0))
            || !self.pending.is_empty()
    }

    /// Bytes written per class on a device, completed in fine bins `start..end` (after
    /// [`Engine::settle`]); None when the bins were left out.
    pub fn written(&self, dev: u32, start: u64, end: u64) -> Option<Vec<u64>> {
        if self.bins_full {
            return None;
        }
        let mut out = vec![0; self.p.classes.len()];
        for b in start..end {
            if let Some(v) = self.bins.get(&(dev, b)) {
                for (o, x) in out.iter_mut().zip(v) {
                    *o += x;
                }
            }
        }
        Some(out)
    }

    /// The per-class tables (classes with no IO left out); `device` names a device.
    pub fn report(mut self, device: &dyn Fn(u32) -> String) -> Classes {
        let mut devices: Vec<DeviceClasses> = self
            .per_dev
            .iter()
            .map(|(dev, tallies)| {
                let ios: u64 = tallies.iter().map(|t| t.ios).sum();
                let bytes: u64 = tallies.iter().map(Tally::bytes).sum();
                let pct = |a: u64, b: u64| {
                    if b == 0 {
                        0.0
                    } else {
                        a as f64 * 100.0 / b as f64
                    }
                };
                let classes = tallies
                    .iter()
                    .zip(&self.p.classes)
                    .filter(|(t, _)| t.ios > 0)
                    .map(|(t, name)| {
                        let mut block_sizes: Vec<crate::report::model::JsonSize> = t
                            .size_classes()
                            .iter()
                            .map(|(k, (n, b))| crate::report::model::JsonSize {
                                class: k.label(),
                                pct_ios: pct(*n, t.ios),
                                ios: *n,
                                bytes: *b,
                            })
                            .collect();
                        block_sizes.sort_by(|a, b| b.ios.cmp(&a.ios).then(a.class.cmp(&b.class)));
                        let us = |ns: u64| ns as f64 / 1e3;
                        ClassRow {
                            class: name.clone(),
                            ios: t.ios,
                            bytes: t.bytes(),
                            pct_ios: pct(t.ios, ios),
                            pct_bytes: pct(t.bytes(), bytes),
                            read_ios: t.read_ios,
                            read_bytes: t.read_bytes,
                            write_ios: t.write_ios,
                            write_bytes: t.write_bytes,
                            block_sizes,
                            p50_us: us(t.latency.quantile(0.5)),
                            p99_us: us(t.latency.quantile(0.99)),
                            max_us: us(t.latency.max()),
                        }
                    })
                    .collect();
                DeviceClasses {
                    name: device(*dev),
                    classes,
                }
            })
            .collect();
        devices.sort_by(|a, b| a.name.cmp(&b.name));
        let made = self
            .groups
            .iter()
            .filter_map(|g| {
                let (comm, _) = g.creator.as_ref()?;
                Some(Made {
                    path: g.path.clone(),
                    class: self.p.classes[g.made_as?].clone(),
                    creator: comm.clone(),
                })
            })
            .collect();
        Classes {
            profile: self.p.name.clone(),
            devices,
            made,
            names: self.p.classes.clone(),
            written: std::mem::take(&mut self.bins),
        }
    }
}
