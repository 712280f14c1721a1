//! Block devices: names, MAJ:MIN, sizes, /proc/diskstats, and which disks have request
//! events at all.
//!
//! The probe sees requests, and only blk-mq drivers issue them. A bio-based device (md RAID,
//! most device-mapper targets, zram, brd) takes bios directly and passes them on to the disks
//! under it, if any: no request tracepoint ever fires for it, while /proc/diskstats still
//! counts its IOs. Such a device is traced through the request-based disks under it, or
//! refused when there are none; its diskstats are never compared with the trace.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use tracer_common::format::{
    ArrayInfo, ArrayMember, DeviceInfo, DiskStats, HwQueue, QueueSettings,
};

/// The sysfs tree every lookup reads (tests build a fake one).
const SYSFS: &str = "/sys";

/// bio-based devices stacked deeper than this are not followed (a loop in sysfs cannot
/// happen, but a bound costs nothing).
const MAX_STACK_DEPTH: usize = 16;

#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    #[error("block device {0:?} not found (see `lsblk` or /proc/partitions for names)")]
    NotFound(String),
    #[error(
        "{name} is a partition of {disk}; blkprof traces whole disks, where requests are issued: use --device {disk}"
    )]
    Partition { name: String, disk: String },
    #[error(
        "{name} is bio-based{}: the block layer issues no requests for it, so blkprof cannot trace it; trace the disk under it, if any",
        in_parens(.kind)
    )]
    BioBased { name: String, kind: String },
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error(
        "{0:?} is not a device name (like loop0 or /dev/loop0), a device node (like /dev/mapper/vg-data) or MAJ:MIN (like 7:0)"
    )]
    BadSpec(String),
}

fn in_parens(s: &str) -> String {
    if s.is_empty() {
        String::new()
    } else {
        format!(" ({s})")
    }
}

fn read_trim(path: &Path) -> Result<String, DeviceError> {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .map_err(|source| DeviceError::Read {
            path: path.display().to_string(),
            source,
        })
}

/// Resolve `loop0`, `/dev/loop0` or `7:0` to a whole disk, under the sysfs at `sys`.
fn resolve_in(sys: &Path, spec: &str) -> Result<DeviceInfo, DeviceError> {
    let name = if let Some((maj, min)) = spec.split_once(':') {
        let (Ok(maj), Ok(min)) = (maj.parse::<u32>(), min.parse::<u32>()) else {
            return Err(DeviceError::BadSpec(spec.into()));
        };
        name_of_in(sys, maj, min).ok_or_else(|| DeviceError::NotFound(spec.into()))?
    } else if spec.starts_with('/') && spec.trim_start_matches("/dev/").contains('/') {
        // A node under another name: /dev/mapper/vg-data, /dev/md/data, /dev/disk/by-id/...
        let (maj, min) =
            block_node(Path::new(spec)).ok_or_else(|| DeviceError::NotFound(spec.into()))?;
        name_of_in(sys, maj, min).ok_or_else(|| DeviceError::NotFound(spec.into()))?
    } else {
        let n = spec.strip_prefix("/dev/").unwrap_or(spec);
        if n.is_empty() || n.contains('/') {
            return Err(DeviceError::BadSpec(spec.into()));
        }
        n.to_string()
    };
    if !class_block(sys, &name).exists() {
        return Err(DeviceError::NotFound(spec.into()));
    }
    if let Some(disk) = disk_of_partition(sys, &name) {
        return Err(DeviceError::Partition { name, disk });
    }
    info_in(sys, &name)
}

/// MAJ:MIN of the block device node at `path` (symlinks followed).
fn block_node(path: &Path) -> Option<(u32, u32)> {
    use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _};
    let m = std::fs::metadata(path).ok()?;
    m.file_type()
        .is_block_device()
        .then(|| (libc::major(m.rdev()), libc::minor(m.rdev())))
}

fn class_block(sys: &Path, name: &str) -> PathBuf {
    sys.join("class/block").join(name)
}

/// The whole disk a partition belongs to; None if `name` is not a partition.
fn disk_of_partition(sys: &Path, name: &str) -> Option<String> {
    let class = class_block(sys, name);
    if !class.join("partition").exists() {
        return None;
    }
    // A partition's sysfs directory sits inside its disk's.
    Some(
        std::fs::canonicalize(&class)
            .ok()
            .and_then(|p| {
                p.parent()
                    .and_then(|d| d.file_name())
                    .map(|d| d.to_string_lossy().into_owned())
            })
            .unwrap_or_else(|| "the whole disk".into()),
    )
}

pub fn info(name: &str) -> Result<DeviceInfo, DeviceError> {
    info_in(Path::new(SYSFS), name)
}

fn info_in(sys: &Path, name: &str) -> Result<DeviceInfo, DeviceError> {
    let class = class_block(sys, name);
    let dev = read_trim(&class.join("dev"))?;
    let (maj, min) = dev
        .split_once(':')
        .ok_or_else(|| DeviceError::BadSpec(dev.clone()))?;
    let lbs = read_trim(&class.join("queue/logical_block_size"))
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(512);
    Ok(DeviceInfo {
        name: name.to_string(),
        major: maj.parse().map_err(|_| DeviceError::BadSpec(dev.clone()))?,
        minor: min.parse().map_err(|_| DeviceError::BadSpec(dev.clone()))?,
        logical_block_size: lbs,
        queue: Some(queue_settings(&class.join("queue"))),
    })
}

/// The queue's settings as sysfs gives them (a missing or odd file leaves its field absent).
fn queue_settings(q: &Path) -> QueueSettings {
    let num = |f: &str| {
        read_trim(&q.join(f))
            .ok()
            .and_then(|s| s.parse::<u32>().ok())
    };
    // "mq-deadline kyber [bfq] none": the active one is in brackets; "none" alone when
    // the queue has no choice.
    let scheduler = read_trim(&q.join("scheduler"))
        .ok()
        .map(|s| {
            s.split_whitespace()
                .find_map(|w| w.strip_prefix('[').and_then(|w| w.strip_suffix(']')))
                .map_or_else(|| s.trim().to_string(), str::to_string)
        })
        .unwrap_or_default();
    QueueSettings {
        read_ahead_kb: num("read_ahead_kb"),
        scheduler,
        nr_requests: num("nr_requests"),
        max_sectors_kb: num("max_sectors_kb"),
        rotational: num("rotational").map(|r| r != 0),
        hw_queues: q
            .parent()
            .map(|d| hw_queues(&d.join("mq")))
            .unwrap_or_default(),
    }
}

/// A blk-mq disk's hardware queues from its `mq` directory (`mq/N/cpu_list`: "0, 1", or
/// ranges "0-3, 8"), in index order; empty if there is none or one does not read.
fn hw_queues(mq: &Path) -> Vec<HwQueue> {
    let Ok(dir) = std::fs::read_dir(mq) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in dir.flatten() {
        let Some(index) = e.file_name().to_str().and_then(|n| n.parse::<u16>().ok()) else {
            continue;
        };
        let Some(cpus) = read_trim(&e.path().join("cpu_list"))
            .ok()
            .and_then(|s| cpu_list(&s))
        else {
            return Vec::new();
        };
        out.push(HwQueue { index, cpus });
    }
    out.sort_by_key(|q| q.index);
    out
}

/// "0, 2-4" as [0, 2, 3, 4]; `None` if it does not parse (or names implausibly many CPUs).
fn cpu_list(s: &str) -> Option<Vec<u32>> {
    let mut cpus = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (a, b) = if let Some((a, b)) = part.split_once('-') {
            (a.trim().parse::<u32>().ok()?, b.trim().parse::<u32>().ok()?)
        } else {
            let c = part.parse::<u32>().ok()?;
            (c, c)
        };
        if a > b || b - a >= 1 << 16 || cpus.len() >= 1 << 16 {
            return None;
        }
        cpus.extend(a..=b);
    }
    Some(cpus)
}

/// The kernel's requests in flight on a disk now (reads + writes, `/sys/block/NAME/inflight`).
pub fn inflight(name: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/sys/block/{name}/inflight")).ok()?;
    let mut n = 0u64;
    for v in s.split_whitespace() {
        n += v.parse::<u64>().ok()?;
    }
    Some(n)
}

pub fn name_of(major: u32, minor: u32) -> Option<String> {
    name_of_in(Path::new(SYSFS), major, minor)
}

fn name_of_in(sys: &Path, major: u32, minor: u32) -> Option<String> {
    let link = std::fs::read_link(sys.join(format!("dev/block/{major}:{minor}"))).ok()?;
    Some(link.file_name()?.to_string_lossy().into_owned())
}

/// Whether `name` is a whole disk for which the block layer issues requests, i.e. one the probe
/// can see. Since Linux 5.0 every request-based driver is blk-mq, and every blk-mq disk has
/// /sys/block/NAME/mq; bio-based disks (md, most dm targets, zram, brd) and partitions do not.
pub fn has_request_events(name: &str) -> bool {
    has_request_events_in(Path::new(SYSFS), name)
}

fn has_request_events_in(sys: &Path, name: &str) -> bool {
    sys.join("block").join(name).join("mq").is_dir()
}

/// What kind of bio-based device `name` is, for messages: "md RAID", "device-mapper vg-data",
/// "zram", or "" when sysfs does not say.
fn bio_kind(sys: &Path, name: &str) -> String {
    let dir = sys.join("block").join(name);
    if dir.join("md").is_dir() {
        "md RAID".into()
    } else if dir.join("dm").is_dir() {
        match read_trim(&dir.join("dm/name")) {
            Ok(n) if !n.is_empty() => format!("device-mapper {n}"),
            _ => "device-mapper".into(),
        }
    } else if dir.join("comp_algorithm").exists() {
        "zram".into()
    } else {
        String::new()
    }
}

/// A request-based disk under a bio-based device.
#[derive(Debug, Clone, PartialEq, Eq)]
struct DiskUnder {
    disk: String,
    /// The partition of `disk` that is the member, if the member is a partition.
    partition: Option<String>,
    /// The bio-based devices between the one asked for and `disk` (md0 for dm-1 on md0 on sda).
    through: Vec<String>,
}

/// The request-based disks under bio-based `name` (its `slaves`, followed down through stacked
/// bio-based devices), and the bio-based devices down there with nothing under them.
fn disks_under(
    sys: &Path,
    name: &str,
    through: &[String],
    found: &mut Vec<DiskUnder>,
    dead_ends: &mut Vec<String>,
) {
    let Ok(dir) = std::fs::read_dir(sys.join("block").join(name).join("slaves")) else {
        return;
    };
    let mut members: Vec<String> = dir
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    members.sort();
    for member in members {
        let partition = disk_of_partition(sys, &member).map(|disk| (disk, member.clone()));
        let (disk, partition) = match partition {
            Some((disk, part)) => (disk, Some(part)),
            None => (member, None),
        };
        if has_request_events_in(sys, &disk) {
            found.push(DiskUnder {
                disk,
                partition,
                through: through.to_vec(),
            });
        } else if through.len() < MAX_STACK_DEPTH && !through.contains(&disk) {
            let before = found.len();
            let mut deeper = through.to_vec();
            deeper.push(disk.clone());
            disks_under(sys, &disk, &deeper, found, dead_ends);
            if found.len() == before && !dead_ends.contains(&disk) {
                dead_ends.push(disk);
            }
        }
    }
}

/// The md arrays with a member on one of the traced `disks` (all arrays over request-based
/// disks when `disks` is empty: tracing every device), with their level, chunk size and
/// members in slot order.
pub fn arrays_of(disks: &[DeviceInfo]) -> Vec<ArrayInfo> {
    arrays_in(Path::new(SYSFS), disks)
}

fn arrays_in(sys: &Path, disks: &[DeviceInfo]) -> Vec<ArrayInfo> {
    let Ok(rd) = std::fs::read_dir(sys.join("block")) else {
        return Vec::new();
    };
    let mut names: Vec<String> = rd
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| sys.join("block").join(n).join("md").is_dir())
        .collect();
    names.sort();
    let mut out = Vec::new();
    for name in names {
        let (mut found, mut dead) = (Vec::new(), Vec::new());
        disks_under(sys, &name, &[], &mut found, &mut dead);
        found.retain(|u| u.through.is_empty());
        if found.is_empty()
            || (!disks.is_empty() && !found.iter().any(|u| disks.iter().any(|d| d.name == u.disk)))
        {
            continue;
        }
        let md = sys.join("block").join(&name).join("md");
        let read = |f: &str| {
            std::fs::read_to_string(md.join(f))
                .map(|s| s.trim().to_string())
                .unwrap_or_default()
        };
        let mut members: Vec<ArrayMember> = found
            .into_iter()
            .map(|u| {
                let member = u.partition.clone().unwrap_or_else(|| u.disk.clone());
                ArrayMember {
                    slot: read(&format!("dev-{member}/slot")).parse().ok(),
                    disk: u.disk,
                    partition: u.partition,
                }
            })
            .collect();
        members.sort_by(|a, b| (a.slot, &a.disk).cmp(&(b.slot, &b.disk)));
        out.push(ArrayInfo {
            level: read("level"),
            chunk_bytes: read("chunk_size").parse().unwrap_or(0),
            name,
            members,
        });
    }
    out
}

/// What `--device` arguments come to: the request-based whole disks to trace, and notes for
/// the user about bio-based devices traced through the disks under them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Targets {
    pub devices: Vec<DeviceInfo>,
    pub notes: Vec<String>,
}

/// Resolve `--device` arguments (see [`Targets`]). A bio-based device is replaced by the
/// request-based disks under it; one with none under it (zram) is refused.
pub fn targets(specs: &[String]) -> Result<Targets, DeviceError> {
    targets_in(Path::new(SYSFS), specs)
}

fn targets_in(sys: &Path, specs: &[String]) -> Result<Targets, DeviceError> {
    fn add(t: &mut Targets, d: DeviceInfo) {
        if !t.devices.iter().any(|x| x.dev() == d.dev()) {
            t.devices.push(d);
        }
    }
    let mut t = Targets::default();
    for spec in specs {
        let d = resolve_in(sys, spec)?;
        if has_request_events_in(sys, &d.name) {
            add(&mut t, d);
            continue;
        }
        let kind = bio_kind(sys, &d.name);
        let (mut found, mut dead_ends) = (Vec::new(), Vec::new());
        disks_under(sys, &d.name, &[], &mut found, &mut dead_ends);
        if found.is_empty() {
            return Err(DeviceError::BioBased { name: d.name, kind });
        }
        t.notes.push(bio_note(&d.name, &kind, &found, &dead_ends));
        for under in &found {
            add(&mut t, info_in(sys, &under.disk)?);
        }
    }
    Ok(t)
}

/// "md0 is bio-based (md RAID): it has no request events; tracing its members loop1, loop2
/// instead", with partitions, stacked devices and untraceable members said.
fn bio_note(name: &str, kind: &str, found: &[DiskUnder], dead_ends: &[String]) -> String {
    let mut listed: Vec<String> = Vec::new();
    for u in found {
        let mut how = Vec::new();
        if let Some(p) = &u.partition {
            how.push(format!("for its partition {p}"));
        }
        if !u.through.is_empty() {
            // Nearest first: "loop1 (under md0 under dm-1)" for dm-3 on dm-1 on md0 on loop1.
            let up: Vec<&str> = u.through.iter().rev().map(String::as_str).collect();
            how.push(format!("under {}", up.join(" under ")));
        }
        let item = if how.is_empty() {
            u.disk.clone()
        } else {
            format!("{} ({})", u.disk, how.join(", "))
        };
        if !listed.contains(&item) {
            listed.push(item);
        }
    }
    let mut note = format!(
        "{name} is bio-based{}: it has no request events; tracing its members {} instead",
        in_parens(kind),
        listed.join(", ")
    );
    if found.iter().any(|u| u.partition.is_some()) {
        note.push_str(" (whole disks: IOs to their other partitions are traced too)");
    }
    if !dead_ends.is_empty() {
        note = format!(
            "{note}; {} under it {} bio-based with no disk under {}, not traced",
            dead_ends.join(", "),
            if dead_ends.len() == 1 { "is" } else { "are" },
            if dead_ends.len() == 1 { "it" } else { "them" },
        );
    }
    note
}

pub fn read_diskstats() -> Result<HashMap<(u32, u32), DiskStats>, DeviceError> {
    let at = crate::clock::monotonic_ns();
    let text = std::fs::read_to_string("/proc/diskstats").map_err(|source| DeviceError::Read {
        path: "/proc/diskstats".into(),
        source,
    })?;
    Ok(tracer_common::format::parse_diskstats(&text, at))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Resolve `loop0`, `/dev/loop0` or `7:0` to a whole disk of this machine.
    fn resolve(spec: &str) -> Result<DeviceInfo, DeviceError> {
        resolve_in(Path::new(SYSFS), spec)
    }

    #[test]
    fn bad_specs_are_named() {
        assert!(matches!(
            resolve("no-such-disk-xyz"),
            Err(DeviceError::NotFound(_))
        ));
        assert!(matches!(resolve("a:b"), Err(DeviceError::BadSpec(_))));
        assert!(matches!(resolve("../etc"), Err(DeviceError::BadSpec(_))));
    }

    #[test]
    fn a_node_under_another_name_is_its_device() {
        // Like /dev/mapper/vg-data, a link to /dev/dm-0; any block device this machine has.
        let Some(dev) = ["loop0", "vda", "sda", "nvme0n1"]
            .into_iter()
            .find(|d| Path::new("/dev").join(d).exists())
        else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join("vg-data");
        std::os::unix::fs::symlink(Path::new("/dev").join(dev), &link).unwrap();
        assert_eq!(resolve(link.to_str().unwrap()).unwrap().name, dev);
        let missing = dir.path().join("missing");
        assert!(matches!(
            resolve(missing.to_str().unwrap()),
            Err(DeviceError::NotFound(_))
        ));
        // Not a block device.
        assert!(matches!(
            resolve(dir.path().to_str().unwrap()),
            Err(DeviceError::NotFound(_))
        ));
    }

    /// A sysfs tree the way the kernel lays it out: device directories under devices/,
    /// class/block and dev/block links to every disk and partition, block/ links to disks.
    struct FakeSys(tempfile::TempDir);

    impl FakeSys {
        fn new() -> FakeSys {
            FakeSys(tempfile::tempdir().unwrap())
        }

        fn root(&self) -> &Path {
            self.0.path()
        }

        fn add(&self, dir: &str, dev: &str, request_based: bool) -> PathBuf {
            let d = self.root().join("devices").join(dir);
            std::fs::create_dir_all(d.join("slaves")).unwrap();
            std::fs::write(d.join("dev"), format!("{dev}\n")).unwrap();
            if request_based {
                std::fs::create_dir_all(d.join("mq/0")).unwrap();
            }
            let name = d.file_name().unwrap().to_owned();
            for sub in ["class/block", "dev/block"] {
                std::fs::create_dir_all(self.root().join(sub)).unwrap();
            }
            std::os::unix::fs::symlink(&d, self.root().join("class/block").join(&name)).unwrap();
            std::os::unix::fs::symlink(&d, self.root().join("dev/block").join(dev)).unwrap();
            d
        }

        fn disk(&self, dir: &str, dev: &str, request_based: bool) -> PathBuf {
            let d = self.add(dir, dev, request_based);
            std::fs::create_dir_all(self.root().join("block")).unwrap();
            let name = d.file_name().unwrap().to_owned();
            std::os::unix::fs::symlink(&d, self.root().join("block").join(name)).unwrap();
            d
        }

        fn partition(&self, dir: &str, dev: &str) {
            let d = self.add(dir, dev, false);
            std::fs::write(d.join("partition"), "1\n").unwrap();
        }

        fn member(&self, holder: &Path, member_dir: &str) {
            let m = self.root().join("devices").join(member_dir);
            std::os::unix::fs::symlink(&m, holder.join("slaves").join(m.file_name().unwrap()))
                .unwrap();
        }

        fn targets(&self, specs: &[&str]) -> Result<Targets, DeviceError> {
            let specs: Vec<String> = specs.iter().map(ToString::to_string).collect();
            targets_in(self.root(), &specs)
        }
    }

    #[test]
    fn arrays_over_traced_disks_are_recorded_with_their_layout() {
        let s = machine();
        let md0 = s.root().join("devices/virtual/block/md0/md");
        std::fs::write(md0.join("level"), "raid0\n").unwrap();
        std::fs::write(md0.join("chunk_size"), "524288\n").unwrap();
        for (m, slot) in [("loop1", "1"), ("loop2", "0")] {
            std::fs::create_dir_all(md0.join(format!("dev-{m}"))).unwrap();
            std::fs::write(md0.join(format!("dev-{m}/slot")), format!("{slot}\n")).unwrap();
        }
        let traced = s.targets(&["md0"]).unwrap().devices;
        let a = arrays_in(s.root(), &traced);
        assert_eq!(a.len(), 1);
        assert_eq!(
            (a[0].name.as_str(), a[0].level.as_str(), a[0].chunk_bytes),
            ("md0", "raid0", 524_288)
        );
        let m: Vec<(&str, Option<u32>)> = a[0]
            .members
            .iter()
            .map(|m| (m.disk.as_str(), m.slot))
            .collect();
        assert_eq!(m, [("loop2", Some(0)), ("loop1", Some(1))], "in slot order");
        // A member traced on its own brings its array; a disk outside it does not.
        assert_eq!(
            arrays_in(s.root(), &s.targets(&["loop1"]).unwrap().devices).len(),
            1
        );
        assert!(arrays_in(s.root(), &s.targets(&["loop3"]).unwrap().devices).is_empty());
    }

    fn names(t: &Targets) -> Vec<&str> {
        t.devices.iter().map(|d| d.name.as_str()).collect()
    }

    fn machine() -> FakeSys {
        let s = FakeSys::new();
        for (n, dev) in [("loop1", "7:1"), ("loop2", "7:2"), ("loop3", "7:3")] {
            s.disk(&format!("virtual/block/{n}"), dev, true);
        }
        s.disk("pci/sda", "8:0", true);
        s.partition("pci/sda/sda1", "8:1");
        let md0 = s.disk("virtual/block/md0", "9:0", false);
        std::fs::create_dir_all(md0.join("md")).unwrap();
        s.member(&md0, "virtual/block/loop1");
        s.member(&md0, "virtual/block/loop2");
        let zram = s.disk("virtual/block/zram0", "253:0", false);
        std::fs::write(zram.join("comp_algorithm"), "[lzo-rle]\n").unwrap();
        // dm-1 on md0 and on a partition; dm-2 on zram0 and loop3.
        let dm1 = s.disk("virtual/block/dm-1", "254:1", false);
        std::fs::create_dir_all(dm1.join("dm")).unwrap();
        std::fs::write(dm1.join("dm/name"), "vg-data\n").unwrap();
        s.member(&dm1, "virtual/block/md0");
        s.member(&dm1, "pci/sda/sda1");
        let dm2 = s.disk("virtual/block/dm-2", "254:2", false);
        std::fs::create_dir_all(dm2.join("dm")).unwrap();
        s.member(&dm2, "virtual/block/zram0");
        s.member(&dm2, "virtual/block/loop3");
        s
    }

    #[test]
    fn a_disks_queue_settings_are_recorded() {
        let s = machine();
        let q = s.root().join("devices/virtual/block/loop1/queue");
        std::fs::create_dir_all(&q).unwrap();
        for (f, v) in [
            ("read_ahead_kb", "4096\n"),
            ("scheduler", "mq-deadline kyber [bfq] none\n"),
            ("nr_requests", "64\n"),
            ("rotational", "0\n"),
            ("max_sectors_kb", "odd\n"),
        ] {
            std::fs::write(q.join(f), v).unwrap();
        }
        let t = s.targets(&["loop1"]).unwrap();
        let got = t.devices[0].queue.clone().unwrap();
        assert_eq!(got.read_ahead_kb, Some(4096));
        assert_eq!(got.scheduler, "bfq");
        assert_eq!(got.nr_requests, Some(64));
        assert_eq!(got.rotational, Some(false));
        assert_eq!(got.max_sectors_kb, None, "an unreadable value is left out");
        assert!(got.hw_queues.is_empty(), "no mq directory: no queues");
        std::fs::write(q.join("scheduler"), "none\n").unwrap();
        let mq = s.root().join("devices/virtual/block/loop1/mq");
        for (i, cpus) in [(1, "2-3, 5\n"), (0, "0, 1\n"), (10, "4\n")] {
            std::fs::create_dir_all(mq.join(i.to_string())).unwrap();
            std::fs::write(mq.join(format!("{i}/cpu_list")), cpus).unwrap();
        }
        let t = s.targets(&["loop1"]).unwrap();
        let got = t.devices[0].queue.clone().unwrap();
        assert_eq!(got.scheduler, "none");
        let queues: Vec<(u16, Vec<u32>)> = got
            .hw_queues
            .into_iter()
            .map(|q| (q.index, q.cpus))
            .collect();
        assert_eq!(
            queues,
            [(0, vec![0, 1]), (1, vec![2, 3, 5]), (10, vec![4])],
            "in index order, ranges expanded"
        );
        std::fs::write(mq.join("1/cpu_list"), "2-x\n").unwrap();
        let t = s.targets(&["loop1"]).unwrap();
        assert!(
            t.devices[0].queue.as_ref().unwrap().hw_queues.is_empty(),
            "a list that does not parse leaves the queues unknown, not partial"
        );
    }

    #[test]
    fn request_based_disks_are_traced_as_given() {
        let s = machine();
        let t = s.targets(&["loop1", "/dev/sda", "8:0"]).unwrap();
        assert_eq!(names(&t), ["loop1", "sda"]);
        assert!(t.notes.is_empty());
        assert!(has_request_events_in(s.root(), "loop1"));
        assert!(!has_request_events_in(s.root(), "md0"));
        assert!(
            !has_request_events_in(s.root(), "sda1"),
            "a partition is no disk"
        );
        assert!(matches!(
            s.targets(&["sda1"]),
            Err(DeviceError::Partition { disk, .. }) if disk == "sda"
        ));
    }

    #[test]
    fn a_bio_based_device_is_traced_through_its_members() {
        let s = machine();
        let t = s.targets(&["md0"]).unwrap();
        assert_eq!(names(&t), ["loop1", "loop2"]);
        assert_eq!(
            t.notes,
            [
                "md0 is bio-based (md RAID): it has no request events; tracing its members loop1, loop2 instead"
            ]
        );
        // A member also named on its own is traced once.
        let t = s.targets(&["loop2", "9:0"]).unwrap();
        assert_eq!(names(&t), ["loop2", "loop1"]);
    }

    #[test]
    fn stacked_devices_are_followed_down_to_request_based_disks() {
        let s = machine();
        let t = s.targets(&["dm-1"]).unwrap();
        assert_eq!(names(&t), ["loop1", "loop2", "sda"]);
        assert_eq!(
            t.notes,
            [
                "dm-1 is bio-based (device-mapper vg-data): it has no request events; tracing its members \
              loop1 (under md0), loop2 (under md0), sda (for its partition sda1) instead \
              (whole disks: IOs to their other partitions are traced too)"
            ]
        );
        let dm3 = s.disk("virtual/block/dm-3", "254:3", false);
        std::fs::create_dir_all(dm3.join("dm")).unwrap();
        s.member(&dm3, "virtual/block/dm-1");
        let t = s.targets(&["dm-3"]).unwrap();
        assert_eq!(names(&t), ["loop1", "loop2", "sda"]);
        assert!(
            t.notes[0].contains(
                "tracing its members loop1 (under md0 under dm-1), loop2 (under md0 under dm-1), \
                 sda (for its partition sda1, under dm-1) instead"
            ),
            "{}",
            t.notes[0]
        );
        let t = s.targets(&["dm-2"]).unwrap();
        assert_eq!(names(&t), ["loop3"]);
        assert!(
            t.notes[0].ends_with(
                "tracing its members loop3 instead; zram0 under it is bio-based with no disk under it, not traced"
            ),
            "{}",
            t.notes[0]
        );
    }

    #[test]
    fn a_bio_based_device_with_nothing_under_it_is_refused() {
        let s = machine();
        let e = s.targets(&["loop1", "zram0"]).unwrap_err();
        assert!(matches!(e, DeviceError::BioBased { .. }));
        assert_eq!(
            e.to_string(),
            "zram0 is bio-based (zram): the block layer issues no requests for it, so blkprof cannot trace it; trace the disk under it, if any"
        );
    }
}
