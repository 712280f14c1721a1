//! Application IO classes: each IO labelled with what the application was doing (Cassandra:
//! commit log, memtable flush, compaction, query reads), from the trace alone: the file of
//! its first data page (`blkprof-trace --files`) and the thread that submitted it.
//!
//! A profile (docs/classes.md; the built-in one is `analyzer/profiles/cassandra.classes`) lists
//! rules, the first that holds gives the class. A rule may ask for the thread that *made* the
//! file: writes are mostly submitted by the kernel's writeback threads long after the
//! application dirtied the pages, so "who submitted it" cannot tell a flush from a compaction,
//! but the first write to the file (its group: an SSTable's components together) by a thread
//! that is not writeback can. Writeback met before that write waits, tallied per group, until
//! the maker is known (or the trace ends: then rules about the maker do not hold for it).
//!
//! One pass: [`Engine::chunk`] over the records, [`Engine::settle`] after the last; then
//! [`Engine::written`] splits each write burst by class (the bytes written per class per fine
//! bin of the time series) and [`Engine::report`] makes the per-class table.

use std::collections::{BTreeMap, HashMap};

use glob::Pattern;
use serde::{Deserialize, Serialize};
use tracer_common::format::{IoRecord, Task};
use tracer_common::op::StatGroup;
use tracer_common::{FILE_DEV_ANON, FILE_DEV_DEVICE};

use crate::analysis::loghist::LogHist;
use crate::analysis::sizes::SizeClass;

/// Which profile a report uses (`--classes`).
#[derive(Clone, Debug, Default)]
pub enum Choice {
    /// The Cassandra profile for traces that name files, kept only if it claims some IO.
    #[default]
    Auto,
    Off,
    Profile(Box<Profile>),
}

impl Choice {
    /// `auto`, `none`, a built-in profile's name or a profile file's path.
    pub fn parse(s: &str) -> Result<Choice, ProfileError> {
        Ok(match s {
            "auto" => Choice::Auto,
            "none" => Choice::Off,
            _ => Choice::Profile(Box::new(Profile::load(s)?)),
        })
    }

    /// The engine for a trace; `files`: whether it names files; `t0_ns`, `fine_ns`: as for
    /// [`Engine::new`].
    pub fn engine(&self, files: bool, t0_ns: u64, fine_ns: u64) -> Option<Engine> {
        let p = match self {
            Choice::Auto if files => Profile::load("cassandra").ok()?,
            Choice::Auto | Choice::Off => return None,
            Choice::Profile(p) => (**p).clone(),
        };
        Some(Engine::new(p, t0_ns, fine_ns))
    }
}

/// The built-in profiles, by name.
pub const BUILT_IN: &[(&str, &str)] = &[(
    "cassandra",
    include_str!("../../profiles/cassandra.classes"),
)];

/// The class of IO no rule claims.
pub const OTHER: &str = "other";

/// What an IO's data pages are, for `data=`: bits.
const DATA_NONE: u8 = 1;
const DATA_FILE: u8 = 2;
const DATA_DIRECT: u8 = 4;
const DATA_METADATA: u8 = 8;

fn data_of(file_dev: u32) -> u8 {
    match file_dev {
        0 => DATA_NONE,
        FILE_DEV_ANON => DATA_DIRECT,
        FILE_DEV_DEVICE => DATA_METADATA,
        _ => DATA_FILE,
    }
}

/// Rules are bits of a `u64`.
const MAX_RULES: usize = 64;
/// IO met before its file group's maker, tallied apart: at most this many tallies (about 1.3
/// KB each); beyond, an IO is classed as if its group had no maker.
const MAX_PENDING: usize = 65_536;
/// File groups remembered; beyond, a new file is a group of its own without a maker.
const MAX_GROUPS: usize = 1 << 20;
/// No group.
const NO_GROUP: u32 = u32::MAX;

#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    #[error("{source_name}, line {line}: {msg}")]
    Syntax {
        source_name: String,
        line: usize,
        msg: String,
    },
    #[error("reading the class profile {path}: {source}")]
    Read {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error(
        "'{0}' is neither a built-in class profile (cassandra) nor a file; --classes takes cassandra, none, or the path of a profile (docs/classes.md)"
    )]
    Unknown(String),
}

/// How files are grouped for "the thread that made it".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Grouping {
    /// Each file is its own group.
    File,
    /// A Cassandra SSTable's components are one group: `<dir>/<version>-<generation>-<format>`.
    Sstable,
}

#[derive(Clone, Debug)]
struct Rule {
    class: usize,
    /// Bit per [`StatGroup`] (read, write, discard, flush).
    ops: u8,
    /// `DATA_*` bits.
    data: u8,
    comm: Vec<Pattern>,
    file: Vec<Pattern>,
    creator: Vec<Pattern>,
}

/// A parsed profile.
#[derive(Clone, Debug)]
pub struct Profile {
    pub name: String,
    /// Class names in the order of their first rule, then [`OTHER`].
    pub classes: Vec<String>,
    rules: Vec<Rule>,
    grouping: Grouping,
    writeback: Vec<Pattern>,
}

fn op_bit(g: StatGroup) -> u8 {
    match g {
        StatGroup::Read => 1,
        StatGroup::Write => 2,
        StatGroup::Discard => 4,
        StatGroup::Flush => 8,
    }
}

fn any(pats: &[Pattern], s: &str) -> bool {
    pats.iter().any(|p| p.matches(s))
}

impl Profile {
    /// `cassandra` (built in), or the path of a profile file.
    pub fn load(spec: &str) -> Result<Profile, ProfileError> {
        if let Some((_, text)) = BUILT_IN.iter().find(|(n, _)| *n == spec) {
            return Profile::parse(text, &format!("built-in profile {spec}"));
        }
        let path = std::path::Path::new(spec);
        if !path.exists() {
            return Err(ProfileError::Unknown(spec.to_string()));
        }
        let text = std::fs::read_to_string(path).map_err(|source| ProfileError::Read {
            path: path.to_owned(),
            source,
        })?;
        Profile::parse(&text, spec)
    }

    /// Parse a profile (docs/classes.md); `source_name` names it in errors.
    pub fn parse(text: &str, source_name: &str) -> Result<Profile, ProfileError> {
        let mut p = Profile {
            name: std::path::Path::new(source_name)
                .file_stem()
                .map_or_else(|| source_name.to_string(), |s| s.to_string_lossy().into()),
            classes: Vec::new(),
            rules: Vec::new(),
            grouping: Grouping::File,
            writeback: vec![Pattern::new("kworker/*").unwrap_or_default()],
        };
        for (i, raw) in text.lines().enumerate() {
            let err = |msg: String| ProfileError::Syntax {
                source_name: source_name.to_string(),
                line: i + 1,
                msg,
            };
            let line = raw.split_once('#').map_or(raw, |(a, _)| a).trim();
            if line.is_empty() {
                continue;
            }
            let (word, rest) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
            let rest = rest.trim();
            match word {
                "profile" => {
                    if rest.is_empty() {
                        return Err(err("`profile` needs a name".into()));
                    }
                    p.name = rest.to_string();
                }
                "group" => {
                    p.grouping = match rest {
                        "sstable" => Grouping::Sstable,
                        "file" => Grouping::File,
                        _ => {
                            return Err(err(format!(
                                "`group {rest}`: expected `group sstable` or `group file`"
                            )));
                        }
                    }
                }
                "writeback" => p.writeback = patterns(rest).map_err(err)?,
                _ => {
                    let Some((class, conds)) = line.split_once(':') else {
                        return Err(err(format!(
                            "expected `CLASS: CONDITION...` (a rule), `profile NAME`, `group sstable|file` or `writeback GLOB|...`, not {line:?}"
                        )));
                    };
                    let class = class.trim();
                    if class.is_empty() || class.contains('=') {
                        return Err(err(format!("a rule starts with its class name: {line:?}")));
                    }
                    let rule = parse_rule(conds, p.class_index(class)).map_err(err)?;
                    if p.rules.len() == MAX_RULES {
                        return Err(err(format!("more than {MAX_RULES} rules")));
                    }
                    p.rules.push(rule);
                }
            }
        }
        // IO no rule claims.
        p.class_index(OTHER);
        if p.rules.is_empty() {
            return Err(ProfileError::Syntax {
                source_name: source_name.to_string(),
                line: 0,
                msg: "no rules".into(),
            });
        }
        Ok(p)
    }

    fn class_index(&mut self, name: &str) -> usize {
        if let Some(i) = self.classes.iter().position(|c| c == name) {
            i
        } else {
            self.classes.push(name.to_string());
            self.classes.len() - 1
        }
    }

    /// Index of [`OTHER`].
    fn other(&self) -> usize {
        self.classes.iter().position(|c| c == OTHER).unwrap_or(0)
    }

    /// Rules (bits) that hold for a submitter's comm.
    fn comm_mask(&self, comm: &str) -> u64 {
        self.mask(|r| r.comm.is_empty() || any(&r.comm, comm))
    }

    /// Rules that hold for an IO's data pages (`DATA_*`) and their file's path (None: no
    /// file, or one the trace did not name).
    fn file_mask(&self, data: u8, name: Option<&str>) -> u64 {
        self.mask(|r| {
            r.data & data != 0 && (r.file.is_empty() || name.is_some_and(|n| any(&r.file, n)))
        })
    }

    /// Rules that hold for a group made by `comm`.
    fn creator_mask(&self, comm: &str) -> u64 {
        self.mask(|r| r.creator.is_empty() || any(&r.creator, comm))
    }

    /// Rules that ask for the group's maker.
    fn needs_creator(&self) -> u64 {
        self.mask(|r| !r.creator.is_empty())
    }

    fn op_mask(&self, g: StatGroup) -> u64 {
        let b = op_bit(g);
        self.mask(|r| r.ops & b != 0)
    }

    fn mask(&self, f: impl Fn(&Rule) -> bool) -> u64 {
        self.rules
            .iter()
            .enumerate()
            .filter(|(_, r)| f(r))
            .fold(0, |m, (i, _)| m | 1 << i)
    }

    /// The class of the first rule in `m`, or [`OTHER`].
    fn first(&self, m: u64) -> usize {
        if m == 0 {
            self.other()
        } else {
            self.rules[m.trailing_zeros() as usize].class
        }
    }
}

fn patterns(s: &str) -> Result<Vec<Pattern>, String> {
    s.split('|')
        .map(|g| Pattern::new(g.trim()).map_err(|e| format!("pattern {g:?}: {e}")))
        .collect()
}

fn parse_rule(conds: &str, class: usize) -> Result<Rule, String> {
    let mut r = Rule {
        class,
        ops: 0xf,
        data: 0xf,
        comm: Vec::new(),
        file: Vec::new(),
        creator: Vec::new(),
    };
    for c in conds.split_whitespace() {
        if c == "*" {
            continue;
        }
        let Some((key, value)) = c.split_once('=') else {
            return Err(format!(
                "condition {c:?}: expected KEY=VALUE (op=, data=, file=, comm=, creator=) or *"
            ));
        };
        match key {
            "op" => {
                r.ops = 0;
                for o in value.split('|') {
                    r.ops |= match o {
                        "read" => op_bit(StatGroup::Read),
                        "write" => op_bit(StatGroup::Write),
                        "discard" => op_bit(StatGroup::Discard),
                        "flush" => op_bit(StatGroup::Flush),
                        _ => {
                            return Err(format!(
                                "op={o}: expected read, write, discard or flush (joined by |)"
                            ));
                        }
                    };
                }
            }
            "data" => {
                r.data = 0;
                for d in value.split('|') {
                    r.data |= match d {
                        "file" => DATA_FILE,
                        "direct" => DATA_DIRECT,
                        "metadata" => DATA_METADATA,
                        "none" => DATA_NONE,
                        _ => {
                            return Err(format!(
                                "data={d}: expected file, direct, metadata or none (joined by |)"
                            ));
                        }
                    };
                }
            }
            "comm" => r.comm = patterns(value)?,
            "file" => r.file = patterns(value)?,
            "creator" => r.creator = patterns(value)?,
            _ => {
                return Err(format!(
                    "unknown condition {key:?}: expected op=, data=, file=, comm= or creator="
                ));
            }
        }
    }
    Ok(r)
}

/// An SSTable component's name split into its group prefix and component:
/// `nb-12-big-Data.db` is (`nb-12-big`, `Data.db`), `da-3gzv_0xl5-bti-Partitions.db` is
/// (`da-3gzv_0xl5-bti`, `Partitions.db`).
pub fn sstable_split(name: &str) -> Option<(&str, &str)> {
    let mut parts = name.splitn(4, '-');
    let (Some(version), Some(generation), Some(format), Some(component)) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return None;
    };
    let ok = !version.is_empty()
        && !generation.is_empty()
        && generation
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_')
        && (format == "big" || format == "bti")
        && !component.is_empty();
    let n = version.len() + generation.len() + format.len() + 2;
    ok.then(|| (&name[..n], component))
}

/// Whether a group path is an SSTable's (`<dir>/nb-12-big`), not a single file's.
pub fn is_sstable_group(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    sstable_split(&format!("{name}-x")).is_some_and(|(g, _)| g == name)
}

/// An SSTable's group path (`<dir>/nb-12-big`) from one of its components' paths.
pub fn sstable_group(path: &str) -> Option<&str> {
    let (dir, name) = path.rsplit_once('/')?;
    let (g, _) = sstable_split(name)?;
    Some(&path[..dir.len() + 1 + g.len()])
}

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
        if let Some(i) = self.per_dev.iter().position(|d| d.0 == dev) {
            i
        } else {
            self.per_dev
                .push((dev, vec![Tally::direct(); self.p.classes.len()]));
            self.per_dev.len() - 1
        }
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
        let mut last_dev: Option<(u32, usize)> = None;
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
            let di = match last_dev {
                Some((d, i)) if d == r.dev => i,
                _ => {
                    let i = self.dev_index(r.dev);
                    last_dev = Some((r.dev, i));
                    i
                }
            };
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

    /// Whether any IO so far is in a class of the profile's rules (not [`OTHER`]).
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sstable_names_split_into_group_and_component() {
        assert_eq!(
            sstable_split("nb-12-big-Data.db"),
            Some(("nb-12-big", "Data.db"))
        );
        assert_eq!(
            sstable_split("da-3gzv_0xl5_1a2b-bti-Partitions.db"),
            Some(("da-3gzv_0xl5_1a2b-bti", "Partitions.db"))
        );
        assert_eq!(sstable_split("CommitLog-7-1700000000.log"), None);
        assert_eq!(sstable_split("my-file-name.txt"), None);
        assert_eq!(
            sstable_group("/d/ks/t-1/nb-81-big-Index.db"),
            Some("/d/ks/t-1/nb-81-big")
        );
        assert_eq!(sstable_group("/d/ks/t-1/CommitLog-7-1.log"), None);
        assert!(is_sstable_group("/d/ks/t-1/nb-81-big"));
        assert!(!is_sstable_group("/c/CommitLog-7-1.log"));
        assert!(!is_sstable_group("/d/nb-81-big-Data.db"));
    }

    #[test]
    fn the_built_in_profile_parses() {
        let p = Profile::load("cassandra").unwrap();
        assert_eq!(p.name, "cassandra");
        assert_eq!(
            p.classes,
            [
                "commit log",
                "flush",
                "compaction",
                "query reads",
                "fs metadata",
                "discard",
                "other"
            ]
        );
    }

    #[test]
    fn bad_profiles_say_where() {
        for (text, want) in [
            ("flush op=write", "line 1: expected `CLASS: CONDITION...`"),
            (
                "x: op=read\nflush: op=writ",
                "line 2: op=writ: expected read",
            ),
            ("x: size=4k", "line 1: unknown condition \"size\""),
            ("x: data=pages", "line 1: data=pages: expected file"),
            ("x: file=[", "line 1: pattern \"[\""),
            ("group disk\nx: *", "line 1: `group disk`"),
            ("# nothing\n", "no rules"),
            ("=x: op=read", "a rule starts with its class name"),
        ] {
            let e = Profile::parse(text, "p.classes").unwrap_err().to_string();
            assert!(e.contains(want), "{text:?}: {e}");
            assert!(e.starts_with("p.classes"), "{e}");
        }
        assert!(matches!(
            Profile::load("/nonexistent/x.classes"),
            Err(ProfileError::Unknown(_))
        ));
    }

    /// An IO completing at `t` tenths of a second (fine bin `t`), of file `(fs, inode, id)`.
    fn rec(
        task: u32,
        op: tracer_common::op::Op,
        file: (u32, u64, u32),
        bytes: u32,
        t: u64,
    ) -> IoRecord {
        let t = t * 100_000_000;
        IoRecord {
            complete_ns: t + 100_000,
            enter_ns: t,
            issue_ns: t + 1_000,
            dev: tracer_common::dev_join(7, 0),
            op,
            bytes,
            task,
            file_dev: file.0,
            file_ino: file.1,
            file_id: file.2,
            ..IoRecord::default()
        }
    }

    /// Writeback before the maker's first write waits for it; a group nobody made falls
    /// through to the rules that do not ask for a maker.
    #[test]
    fn writeback_takes_the_class_of_the_group_maker() {
        use tracer_common::op::Op;
        let p = Profile::load("cassandra").unwrap();
        let mut e = Engine::new(p, 0, 100_000_000);
        let task = |comm: &str| Task {
            pid: 1,
            comm: comm.into(),
            cgroup: 0,
            owner_cgroup: 0,
        };
        let tasks = [
            task("kworker/u8:1"),
            task("MemtableFlushWr"),
            task("CompactionExecu"),
            task("ReadStage-3"),
            task("PERIODIC-COMMIT"),
        ];
        let names = [
            "",
            "/d/ks/t-1/nb-1-big-Data.db",
            "/d/ks/t-1/nb-1-big-Index.db",
            "/d/ks/t-1/nb-2-big-Data.db",
            "/d/ks/t-1/nb-3-big-Data.db",
            "/c/CommitLog-7-1.log",
            // The inode of nb-1's Data.db, reused by another file after nb-1 was deleted.
            "/d/ks/t-1/nb-4-big-Data.db",
        ];
        let name = |id: u32| names.get(id as usize).map(|s| (*s).to_string());
        let recs = [
            // nb-2 (compaction): writeback first, then the compaction's own write, then a read
            // of it by the compaction (input of a later one) and by a query.
            rec(0, Op::Write, (1, 3, 3), 1 << 20, 1),
            rec(2, Op::Write, (1, 3, 3), 4096, 2),
            rec(2, Op::Read, (1, 3, 3), 4096, 3),
            rec(3, Op::Read, (1, 3, 3), 8192, 4),
            // nb-1 (flush): the flush writer writes Index.db; writeback of Data.db follows.
            rec(1, Op::Write, (1, 2, 2), 4096, 5),
            rec(0, Op::Write, (1, 1, 1), 2 << 20, 6),
            // nb-3: only writeback, never made in the trace.
            rec(0, Op::Write, (1, 4, 4), 65536, 7),
            rec(4, Op::Write, (1, 5, 5), 16384, 8),
            // Direct IO by the commit log thread: not a commit-log file.
            rec(4, Op::Write, (FILE_DEV_ANON, 0, 7), 512, 9),
            // nb-1's inode, now nb-4's: writeback of a group nobody made.
            rec(0, Op::Write, (1, 1, 6), 8192, 10),
        ];
        e.chunk(&recs[..2], &tasks, &name);
        e.chunk(&recs[2..], &tasks, &name);
        e.settle();
        assert!(e.claimed());
        // Written bytes per class and fine bin: the waiting writeback lands in its bin.
        let at = |a: u64, b: u64| {
            let w = e.written(tracer_common::dev_join(7, 0), a, b).unwrap();
            e.profile()
                .classes
                .iter()
                .zip(w)
                .filter(|(_, b)| *b > 0)
                .map(|(c, b)| (c.as_str(), b))
                .collect::<Vec<_>>()
        };
        assert_eq!(at(1, 2), [("compaction", 1 << 20)]);
        assert_eq!(at(5, 7), [("flush", 4096 + (2 << 20))]);
        assert_eq!(
            at(0, 11),
            [
                ("commit log", 16384),
                ("flush", 4096 + (2 << 20)),
                ("compaction", (1 << 20) + 4096),
                ("other", 65536 + 512 + 8192)
            ]
        );
        let c = e.report(&|_| "loop0".to_string());
        let rows: HashMap<&str, &ClassRow> = c.devices[0]
            .classes
            .iter()
            .map(|r| (r.class.as_str(), r))
            .collect();
        assert_eq!(rows["compaction"].write_bytes, (1 << 20) + 4096);
        assert_eq!(rows["compaction"].read_bytes, 4096);
        assert_eq!(rows["flush"].write_bytes, 4096 + (2 << 20));
        assert_eq!(rows["query reads"].read_bytes, 8192);
        assert_eq!(rows["commit log"].write_bytes, 16384);
        assert_eq!(rows["other"].write_bytes, 65536 + 512 + 8192);
        assert_eq!(rows["other"].ios, 3);
        let total: u64 = c.devices[0].classes.iter().map(|r| r.ios).sum();
        assert_eq!(total, recs.len() as u64);
        let made: Vec<(&str, &str)> = c
            .made
            .iter()
            .map(|m| (m.path.as_str(), m.class.as_str()))
            .collect();
        assert_eq!(
            made,
            [
                ("/d/ks/t-1/nb-2-big", "compaction"),
                ("/d/ks/t-1/nb-1-big", "flush"),
                ("/c/CommitLog-7-1.log", "commit log")
            ]
        );
        // The series' view: bytes per class per fine bin.
        let fine = c.fine_written(tracer_common::dev_join(7, 0), 12);
        let flush = fine.iter().find(|(n, _)| *n == "flush").unwrap();
        assert_eq!(flush.1[5..7], [4096, 2 << 20]);
        assert_eq!(fine.len(), 4, "classes that wrote");
        assert!(c.fine_written(tracer_common::dev_join(7, 1), 12).is_empty());
    }
}
