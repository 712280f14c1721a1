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

use glob::Pattern;
use tracer_common::op::StatGroup;
use tracer_common::{FILE_DEV_ANON, FILE_DEV_DEVICE};

mod engine;

pub use engine::{ClassRow, Classes, DeviceClasses, Engine, Made};

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
    include_str!("../../../profiles/cassandra.classes"),
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

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use tracer_common::format::{IoRecord, Task};

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
