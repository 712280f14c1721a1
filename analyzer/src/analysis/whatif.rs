//! `blkprof whatif`: the IO of one traced disk laid onto a modelled md array, to choose an
//! array's shape (how many members, what chunk) from a trace of the single disk it would
//! replace. RAID0 over equal members is modelled as Linux md's raid0 maps it (drivers/md/raid0.c:
//! one zone; `map_sector` for reads and writes, which md splits at every chunk boundary, and
//! `raid0_handle_discard` for discards, which become one request per member). The result has
//! the shape of the report's `arrays` section, so a modelled array and a traced one read alike.
//!
//! What the trace cannot say and the model therefore leaves out is listed in [`NOT_MODELLED`].

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use serde::Serialize;
use tracer_common::format::{DeviceInfo, FormatError, IoRecord, Scan, TraceReader};
use tracer_common::op::{Op, StatGroup, flags};

use crate::analysis::sections::arrays::{ArrayModel, MemberModel};
use crate::analysis::sizes::SizeClass;
use crate::report::model::JsonSize;

/// What the model does not capture, said with every result.
pub const NOT_MODELLED: [&str; 5] = [
    "merging in the member queues: an IO over more than one stripe puts contiguous pieces on a member, which its queue may merge (ios_if_merged counts them as one)",
    "request size limits: md's and the members' own (max_sectors_kb, max_discard_sectors) may split pieces further, and the traced disk's limits already split what reached it",
    "md's data offset (the superblock area at each member's start) only shifts member addresses: the mapping is the same",
    "timing: queue depths replay the trace's own times, as if every member took as long as the single disk did",
    "flushes go to every member, as md sends them; several members' flushes may be coalesced by their flush machinery",
];

#[derive(Debug, thiserror::Error)]
pub enum WhatIfError {
    #[error(transparent)]
    Format(#[from] FormatError),
    #[error("--raid0 {0}: give 2 to {MAX_MEMBERS} members (an md RAID0 has at least 2)")]
    Members(u32),
    #[error(
        "--chunk {}: md's chunk is a multiple of 4 KiB (its page size), e.g. 64K, 128K, 512K (mdadm's default)",
        crate::analysis::sizes::human(*.0)
    )]
    Chunk(u64),
    #[error("--offset {0}: md addresses 512-byte sectors; give a multiple of 512")]
    Offset(u64),
    #[error("the trace has several devices ({0}): choose the one to model with --device")]
    SeveralDevices(String),
    #[error("the trace has no device {name} (it has: {have})")]
    NoDevice { name: String, have: String },
}

/// The most members modelled (each costs memory and every flush a copy).
pub const MAX_MEMBERS: u32 = 1024;

/// An md RAID0 of equal members.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Raid0 {
    members: u32,
    chunk_bytes: u64,
}

/// A request as one member receives it: its address there (bytes from the member's data
/// start) and length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Piece {
    pub member: u32,
    pub offset: u64,
    pub bytes: u64,
}

impl Raid0 {
    /// md's rules: at least 2 members; the chunk a multiple of the 4 KiB page (md raid0 takes
    /// chunks that are not powers of two; mdadm asks for multiples of 4 KiB).
    pub fn new(members: u32, chunk_bytes: u64) -> Result<Raid0, WhatIfError> {
        if !(2..=MAX_MEMBERS).contains(&members) {
            return Err(WhatIfError::Members(members));
        }
        if chunk_bytes < 4096
            || !chunk_bytes.is_multiple_of(4096)
            || chunk_bytes.checked_mul(u64::from(members)).is_none()
        {
            return Err(WhatIfError::Chunk(chunk_bytes));
        }
        Ok(Raid0 {
            members,
            chunk_bytes,
        })
    }

    pub fn members(&self) -> u32 {
        self.members
    }

    pub fn chunk_bytes(&self) -> u64 {
        self.chunk_bytes
    }

    /// Where the array's byte `pos` lies: (member, offset on the member). As md's
    /// `map_sector`: the chunk's number modulo the members picks the member; the stripe (the
    /// chunk's number over the members) times the chunk, plus the offset in the chunk, is
    /// the address there.
    pub fn map(&self, pos: u64) -> (u32, u64) {
        let (chunk, in_chunk) = (pos / self.chunk_bytes, pos % self.chunk_bytes);
        let n = u64::from(self.members);
        #[expect(
            clippy::cast_possible_truncation,
            reason = "a remainder of the division by `members`, a u32"
        )]
        let member = (chunk % n) as u32;
        (member, (chunk / n) * self.chunk_bytes + in_chunk)
    }

    /// A read or write of `bytes` at the array's byte `pos`, as md submits it: split at every
    /// chunk boundary, each piece to its member, in order.
    pub fn split(&self, pos: u64, bytes: u64, mut each: impl FnMut(Piece)) {
        let end = pos.saturating_add(bytes);
        let mut at = pos;
        while at < end {
            let chunk_end = (at / self.chunk_bytes)
                .saturating_add(1)
                .saturating_mul(self.chunk_bytes);
            let to = end.min(chunk_end);
            let (member, offset) = self.map(at);
            each(Piece {
                member,
                offset,
                bytes: to - at,
            });
            at = to;
        }
    }

    /// A discard as md's `raid0_handle_discard` sends it: one request per member, covering
    /// the member's part of the range (contiguous there), members in slot order.
    pub fn discard(&self, pos: u64, bytes: u64, mut each: impl FnMut(Piece)) {
        let (start, end) = (pos, pos.saturating_add(bytes));
        let (c, n) = (self.chunk_bytes, u64::from(self.members));
        let stripe = c * n;
        // The stripe and the member of the first and of the last (exclusive) byte, and their
        // offsets on those members.
        let (first, last) = (start / stripe, end / stripe);
        let start_disk = (start - first * stripe) / c;
        let start_offset = (start - first * stripe) % c + first * c;
        let end_disk = (end - last * stripe) / c;
        let end_offset = (end - last * stripe) % c + last * c;
        for member in 0..self.members {
            let disk = u64::from(member);
            let from = match disk.cmp(&start_disk) {
                std::cmp::Ordering::Less => (first + 1) * c,
                std::cmp::Ordering::Greater => first * c,
                std::cmp::Ordering::Equal => start_offset,
            };
            let to = match disk.cmp(&end_disk) {
                std::cmp::Ordering::Less => (last + 1) * c,
                std::cmp::Ordering::Greater => last * c,
                std::cmp::Ordering::Equal => end_offset,
            };
            if to > from {
                each(Piece {
                    member,
                    offset: from,
                    bytes: to - from,
                });
            }
        }
    }
}

/// `blkprof whatif`'s options.
#[derive(Clone, Debug)]
pub struct Options {
    pub raid0: Raid0,
    /// The device to model (name or MAJ:MIN); needed when the trace has several.
    pub device: Option<String>,
    /// The traced disk's byte that would be the array's first (where the partition holding
    /// the data starts, if it is on one): subtracted from every address.
    pub offset_bytes: u64,
}

/// How a record travels through md.
enum Route {
    /// Split at chunk boundaries.
    Data,
    /// One request per member it covers.
    Discard,
    /// To every member.
    Flush,
    /// md does not carry it (driver-private passthrough, zone commands).
    Not,
}

fn route(r: &IoRecord) -> Route {
    // An empty read or write is a flush whose data-less bio the flush machinery kept (an
    // absorbed preflush): md sends those to every member too.
    if r.stat_group() == StatGroup::Flush || r.op == Op::Flush || r.bytes == 0 {
        return Route::Flush;
    }
    match r.op {
        Op::Read | Op::Write | Op::WriteZeroes | Op::SecureErase => Route::Data,
        Op::Discard => Route::Discard,
        _ => Route::Not,
    }
}

/// The trace's IOs of the modelled device, by how they were mapped.
#[derive(Serialize, Default, Debug, Clone, PartialEq, Eq)]
pub struct TraceIos {
    /// Every record of the device, but the damaged.
    pub ios: u64,
    pub bytes: u64,
    pub reads: u64,
    pub writes: u64,
    pub discards: u64,
    /// Flushes (the device's own, absorbed ones, and other empty requests): each goes to
    /// every member.
    pub flushes: u64,
    /// Never issued to the disk (absorbed empty flushes, mostly): mapped as the others, with
    /// no queue depth of their own (as the arrays section counts them).
    pub never_issued: u64,
    /// Not counted by the kernel in /proc/diskstats: mapped as the others (md sends them all
    /// the same).
    pub not_accounted: u64,
    /// Left out: ops md does not carry (driver passthrough, zone commands).
    pub left_out_ops: u64,
    /// Left out: starting before --offset.
    pub left_out_before_offset: u64,
    /// Left out: times that cannot belong to the run, or an address beyond any disk
    /// (damaged), as the report leaves them.
    pub left_out_damaged: u64,
}

/// IOs split across members.
#[derive(Serialize, Default, Debug, Clone, PartialEq)]
pub struct Splits {
    /// Reads, writes and discards mapped (flushes are not split but copied).
    pub data_ios: u64,
    /// Of those, how many reached more than one member.
    pub split_ios: u64,
    pub pct_split: f64,
    /// The requests the split ones became.
    pub pieces_of_split: u64,
    /// Requests the members receive in all (flush copies included).
    pub member_ios: u64,
}

/// What a member receives beyond the arrays section's figures.
#[derive(Serialize, Default)]
pub struct MemberMix {
    pub disk: String,
    /// Size classes of its requests, most frequent first.
    pub block_sizes: Vec<JsonSize>,
    /// Its requests if its queue merged the pieces of each IO into one (they are contiguous
    /// on the member): one per IO that reaches it.
    pub ios_if_merged: u64,
}

/// `blkprof whatif`'s result (`--json`).
#[derive(Serialize)]
pub struct WhatIf {
    pub trace: String,
    pub device: String,
    pub level: &'static str,
    pub members: u32,
    pub chunk_bytes: u64,
    pub offset_bytes: u64,
    pub trace_ios: TraceIos,
    pub splits: Splits,
    /// The modelled array, as the report's `arrays` section shows a traced one (no latency:
    /// the model predicts none).
    pub(crate) array: ArrayModel,
    pub member_mix: Vec<MemberMix>,
    pub not_modelled: Vec<&'static str>,
}

impl WhatIf {
    /// Per member: (requests, bytes), in slot order.
    pub fn member_ios(&self) -> Vec<(u64, u64)> {
        self.array
            .members
            .iter()
            .map(|m| (m.ios, m.bytes))
            .collect()
    }

    /// The busiest member's requests over the mean.
    pub fn imbalance_ios(&self) -> f64 {
        self.array.imbalance_ios
    }

    /// Per member: (mean queue depth, most).
    pub fn member_queues(&self) -> Vec<(f64, u32)> {
        self.array
            .members
            .iter()
            .map(|m| (m.queue_depth_mean, m.queue_depth_max))
            .collect()
    }
}

/// A member's running counts.
#[derive(Default)]
struct Member {
    ios: u64,
    bytes: u64,
    read_ios: u64,
    write_ios: u64,
    ios_if_merged: u64,
    sizes: BTreeMap<u64, u64>,
    /// When each request entered the OS and completed, and when each issued one was issued:
    /// the queue depths are counted from these at the end (24 bytes a request).
    starts: Vec<u64>,
    ends: Vec<u64>,
    issues: Vec<u64>,
}

impl Member {
    fn add(&mut self, r: &IoRecord, bytes: u64) {
        self.ios += 1;
        self.bytes += bytes;
        match r.stat_group() {
            StatGroup::Read => self.read_ios += 1,
            StatGroup::Write => self.write_ios += 1,
            _ => {}
        }
        if bytes > 0 {
            // Flushes carry no data: the size mix is of the data requests.
            *self.sizes.entry(bytes).or_default() += 1;
        }
        // A request the tracer saw start before it attached has no entry time: in the OS
        // from its issue.
        let issued = r.flags & flags::NEVER_ISSUED == 0 && r.issue_ns != 0;
        let start = match (r.enter_ns, issued) {
            (0, true) => r.issue_ns,
            (0, false) => r.complete_ns,
            (e, true) => e.min(r.issue_ns),
            (e, false) => e,
        };
        self.starts.push(start.min(r.complete_ns));
        self.ends.push(r.complete_ns);
        if issued {
            self.issues.push(r.issue_ns);
        }
    }

    /// Requests in the member's OS queue at each issue (that one included), as the tracer
    /// counts `os_inflight`: (sum, most).
    fn queue(&mut self) -> (u64, u32) {
        self.starts.sort_unstable();
        self.ends.sort_unstable();
        self.issues.sort_unstable();
        let (mut s, mut e) = (0usize, 0usize);
        let (mut sum, mut most) = (0u64, 0u32);
        for &t in &self.issues {
            while s < self.starts.len() && self.starts[s] <= t {
                s += 1;
            }
            while e < self.ends.len() && self.ends[e] <= t {
                e += 1;
            }
            // Started by t and not completed by t; at least the one issued now (it may have
            // completed in the same nanosecond).
            let depth = (s.saturating_sub(e) as u64).max(1);
            sum += depth;
            most = most.max(u32::try_from(depth).unwrap_or(u32::MAX));
        }
        (sum, most)
    }
}

/// Map every IO of the trace's device onto the modelled array.
pub fn whatif(path: &Path, opts: &Options) -> Result<WhatIf, WhatIfError> {
    let mut r = TraceReader::open(path)?;
    let header = r.header().clone();
    let scan = r.scan()?;
    if !opts.offset_bytes.is_multiple_of(512) {
        return Err(WhatIfError::Offset(opts.offset_bytes));
    }
    let dev = device(&scan, opts)?;
    let file_bytes = std::fs::metadata(path).map_or(u64::MAX, |m| m.len());
    let window = crate::analysis::summary::Window::of(
        &header,
        &scan,
        &crate::analysis::series::Options::default(),
        file_bytes,
    );
    let raid = opts.raid0;
    let mut members: Vec<Member> = (0..raid.members).map(|_| Member::default()).collect();
    let mut ios = TraceIos::default();
    let mut splits = Splits::default();
    let mut touched: Vec<bool> = vec![false; raid.members as usize];
    let mut buf = Vec::new();
    while r.next_chunk(&mut buf)? {
        for rec in &buf {
            if dev.as_ref().is_some_and(|d| d.dev() != rec.dev) {
                continue;
            }
            let route = route(rec);
            // The array's address of its first byte; none for flushes (they have none).
            let abs = rec.sector.checked_mul(512);
            if !window.holds(rec) || matches!(route, Route::Data | Route::Discard) && abs.is_none()
            {
                ios.left_out_damaged += 1;
                continue;
            }
            ios.ios += 1;
            ios.bytes += u64::from(rec.bytes);
            if rec.flags & flags::NEVER_ISSUED != 0 {
                ios.never_issued += 1;
            }
            if rec.flags & flags::NOT_ACCOUNTED != 0 {
                ios.not_accounted += 1;
            }
            let pos = match route {
                Route::Flush => {
                    ios.flushes += 1;
                    for m in &mut members {
                        m.add(rec, 0);
                        m.ios_if_merged += 1;
                    }
                    continue;
                }
                Route::Not => {
                    ios.left_out_ops += 1;
                    continue;
                }
                Route::Data | Route::Discard => {
                    if let Some(p) = abs.and_then(|b| b.checked_sub(opts.offset_bytes)) {
                        p
                    } else {
                        ios.left_out_before_offset += 1;
                        continue;
                    }
                }
            };
            let bytes = u64::from(rec.bytes);
            match rec.stat_group() {
                StatGroup::Read => ios.reads += 1,
                StatGroup::Write => ios.writes += 1,
                StatGroup::Discard => ios.discards += 1,
                StatGroup::Flush => {}
            }
            touched.fill(false);
            let mut pieces = 0u64;
            let mut each = |p: Piece| {
                members[p.member as usize].add(rec, p.bytes);
                touched[p.member as usize] = true;
                pieces += 1;
            };
            if let Route::Discard = route {
                raid.discard(pos, bytes, &mut each);
            } else {
                raid.split(pos, bytes, &mut each);
            }
            for (m, t) in members.iter_mut().zip(&touched) {
                m.ios_if_merged += u64::from(*t);
            }
            splits.data_ios += 1;
            if pieces > 1 {
                splits.split_ios += 1;
                splits.pieces_of_split += pieces;
            }
        }
    }
    splits.member_ios = members.iter().map(|m| m.ios).sum();
    splits.pct_split = if splits.data_ios == 0 {
        0.0
    } else {
        splits.split_ios as f64 * 100.0 / splits.data_ios as f64
    };
    let (rows, mixes) = member_rows(&mut members);
    let device = dev.map_or_else(|| "(every device)".to_string(), |d| d.name);
    Ok(WhatIf {
        trace: path.display().to_string(),
        array: ArrayModel::new("what-if".into(), "raid0".into(), raid.chunk_bytes, rows),
        device,
        level: "raid0",
        members: raid.members,
        chunk_bytes: raid.chunk_bytes,
        offset_bytes: opts.offset_bytes,
        trace_ios: ios,
        splits,
        member_mix: mixes,
        not_modelled: NOT_MODELLED.to_vec(),
    })
}

/// Each member's row of the array table and its size mix.
fn member_rows(members: &mut [Member]) -> (Vec<MemberModel>, Vec<MemberMix>) {
    let mut rows = Vec::new();
    let mut mixes = Vec::new();
    for (i, m) in (0u32..).zip(members.iter_mut()) {
        let disk = format!("member{i}");
        let (queue_sum, queue_max) = m.queue();
        let mut classes: BTreeMap<SizeClass, (u64, u64)> = BTreeMap::new();
        for (&b, &n) in &m.sizes {
            let e = classes.entry(SizeClass::of(b)).or_default();
            e.0 += n;
            e.1 += n * b;
        }
        let mut block_sizes: Vec<JsonSize> = classes
            .into_iter()
            .map(|(c, (n, b))| JsonSize {
                class: c.label(),
                pct_ios: n as f64 * 100.0 / m.ios.max(1) as f64,
                ios: n,
                bytes: b,
            })
            .collect();
        block_sizes.sort_by_key(|z| std::cmp::Reverse(z.ios));
        rows.push(MemberModel {
            disk: disk.clone(),
            slot: Some(i),
            ios: m.ios,
            bytes: m.bytes,
            read_ios: m.read_ios,
            write_ios: m.write_ios,
            queue_depth_mean: if m.ios == 0 {
                0.0
            } else {
                queue_sum as f64 / m.ios as f64
            },
            queue_depth_max: queue_max,
            p99_total_us: None,
            ..MemberModel::default()
        });
        mixes.push(MemberMix {
            disk,
            block_sizes,
            ios_if_merged: m.ios_if_merged,
        });
    }
    (rows, mixes)
}

/// The device `--device` names, or the trace's only one; none when the trace has none.
fn device(scan: &Scan, opts: &Options) -> Result<Option<DeviceInfo>, WhatIfError> {
    let names = || {
        scan.devices
            .iter()
            .map(|d| d.name.clone())
            .collect::<Vec<_>>()
            .join(", ")
    };
    Ok(match &opts.device {
        Some(name) => Some(
            scan.devices
                .iter()
                .find(|d| &d.name == name || format!("{}:{}", d.major, d.minor) == *name)
                .ok_or_else(|| WhatIfError::NoDevice {
                    name: name.clone(),
                    have: names(),
                })?
                .clone(),
        ),
        None if scan.devices.len() > 1 => return Err(WhatIfError::SeveralDevices(names())),
        None => scan.devices.first().cloned(),
    })
}

/// The terminal view: the array as the report's `arrays` section shows a traced one, then
/// what only the model knows.
pub fn write_text(out: &mut dyn Write, w: &WhatIf) -> std::io::Result<()> {
    use crate::analysis::sizes::human;
    use tracer_common::coverage::thousands;
    writeln!(
        out,
        "{} ({}) as an md RAID0 of {} members, chunk {}{} (modelled on md's mapping, not measured)",
        w.trace,
        w.device,
        w.members,
        human(w.chunk_bytes),
        if w.offset_bytes > 0 {
            format!(", from byte {} of the disk", thousands(w.offset_bytes))
        } else {
            String::new()
        }
    )?;
    let t = &w.trace_ios;
    if t.ios == 0 {
        writeln!(
            out,
            "\nno IOs of {} in the trace: nothing to map{}",
            w.device,
            if t.left_out_damaged > 0 {
                format!(
                    " ({} records with times outside the run were left out as damaged)",
                    thousands(t.left_out_damaged)
                )
            } else {
                String::new()
            }
        )?;
        return Ok(());
    }
    writeln!(
        out,
        "  trace: {} IOs, {}: {} reads, {} writes, {} discards, {} flushes",
        thousands(t.ios),
        crate::report::format::bytes(t.bytes),
        thousands(t.reads),
        thousands(t.writes),
        thousands(t.discards),
        thousands(t.flushes)
    )?;
    let left = [
        (t.left_out_ops, "of ops md does not carry"),
        (t.left_out_before_offset, "before --offset"),
        (t.left_out_damaged, "damaged (times outside the run)"),
    ];
    let left: Vec<String> = left
        .iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, what)| format!("{} {what}", thousands(*n)))
        .collect();
    if !left.is_empty() {
        writeln!(out, "  left out: {}", left.join(", "))?;
    }
    let s = &w.splits;
    writeln!(
        out,
        "  split across members: {} of {} IOs ({:.1}%), into {} pieces; flushes go to all {} members",
        thousands(s.split_ios),
        thousands(s.data_ios),
        s.pct_split,
        thousands(s.pieces_of_split),
        w.members
    )?;
    crate::analysis::sections::arrays::write_text(out, &w.array)?;
    writeln!(
        out,
        "\n  {:<12} {:>12} {:>12} {:>14}  block sizes",
        "member", "reads", "writes", "if merged"
    )?;
    for (m, x) in w.array.members.iter().zip(&w.member_mix) {
        let mix: Vec<String> = x
            .block_sizes
            .iter()
            .take(3)
            .map(|z| format!("{:.0}% {}", z.pct_ios, z.class))
            .collect();
        writeln!(
            out,
            "  {:<12} {:>12} {:>12} {:>14}  {}",
            m.disk,
            thousands(m.read_ios),
            thousands(m.write_ios),
            thousands(x.ios_if_merged),
            if mix.is_empty() {
                "-".to_string()
            } else {
                mix.join(", ")
            }
        )?;
    }
    writeln!(out, "\nnot modelled:")?;
    for n in &w.not_modelled {
        writeln!(out, "  - {n}")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const K: u64 = 1024;

    fn pieces(raid: Raid0, pos: u64, bytes: u64) -> Vec<(u32, u64, u64)> {
        let mut v = Vec::new();
        raid.split(pos, bytes, |p| v.push((p.member, p.offset, p.bytes)));
        v
    }

    fn discards(raid: Raid0, pos: u64, bytes: u64) -> Vec<(u32, u64, u64)> {
        let mut v = Vec::new();
        raid.discard(pos, bytes, |p| v.push((p.member, p.offset, p.bytes)));
        v
    }

    #[test]
    fn reads_and_writes_map_as_md_raid0_maps_them() {
        let r = Raid0::new(4, 64 * K).unwrap();
        // Inside one chunk: chunk 1 is member 1's first.
        assert_eq!(pieces(r, 68 * K, 4 * K), [(1, 4 * K, 4 * K)]);
        // Straddling chunks 0 and 1: 4 KiB on each.
        assert_eq!(
            pieces(r, 60 * K, 8 * K),
            [(0, 60 * K, 4 * K), (1, 0, 4 * K)]
        );
        // Half of chunk 3, chunks 4..7 (stripe 1, every member), half of chunk 8 (member 0's
        // third): more than 4 chunks, wrapping round to member 0 twice.
        assert_eq!(
            pieces(r, 3 * 64 * K + 32 * K, 5 * 64 * K),
            [
                (3, 32 * K, 32 * K),
                (0, 64 * K, 64 * K),
                (1, 64 * K, 64 * K),
                (2, 64 * K, 64 * K),
                (3, 64 * K, 64 * K),
                (0, 128 * K, 32 * K),
            ]
        );
        // The last sector of stripe 0 (member 3's) and the first of stripe 1 (member 0's).
        assert_eq!(
            pieces(r, 256 * K - 512, 1024),
            [(3, 64 * K - 512, 512), (0, 64 * K, 512)]
        );
        assert_eq!(r.map(0), (0, 0));
        assert_eq!(r.map(256 * K - 1), (3, 64 * K - 1));
        assert_eq!(r.map(256 * K), (0, 64 * K));
        // A chunk that is not a power of two (md raid0 takes any multiple of 4 KiB).
        let r = Raid0::new(3, 12 * K).unwrap();
        assert_eq!(pieces(r, 20 * K, 8 * K), [(1, 8 * K, 4 * K), (2, 0, 4 * K)]);
        // Addresses near the end of u64 neither overflow nor panic.
        let r = Raid0::new(4, 4 * K).unwrap();
        assert_eq!(pieces(r, u64::MAX - 1023, 4096).len(), 1);
        assert_eq!(pieces(r, 0, 0), []);
    }

    #[test]
    fn a_discard_is_one_request_per_member() {
        let r = Raid0::new(4, 64 * K).unwrap();
        // 2 MiB from 0: 512 KiB on each member, from its start.
        assert_eq!(
            discards(r, 0, 2048 * K),
            [
                (0, 0, 512 * K),
                (1, 0, 512 * K),
                (2, 0, 512 * K),
                (3, 0, 512 * K)
            ]
        );
        // From 60 KiB for 200 KiB: member 0 has the end of chunk 0 and the start of chunk 4
        // (contiguous there), members 1..3 their first chunks.
        assert_eq!(
            discards(r, 60 * K, 200 * K),
            [
                (0, 60 * K, 8 * K),
                (1, 0, 64 * K),
                (2, 0, 64 * K),
                (3, 0, 64 * K)
            ]
        );
        // Within a chunk: one request.
        assert_eq!(discards(r, 68 * K, 4 * K), [(1, 4 * K, 4 * K)]);
        // Whatever the range, a member's discard covers exactly its split pieces, which are
        // contiguous on it.
        let mut rng = crate::numeric::Rng(0x9e37_79b9_7f4a_7c15);
        for _ in 0..2000 {
            let x = rng.next_u64();
            let members = 2 + (x % 7) as u32;
            let chunk = 4 * K * (1 + (x >> 8) % 40);
            let r = Raid0::new(members, chunk).unwrap();
            let pos = 512 * ((x >> 20) % 100_000);
            let bytes = 512 * (1 + (x >> 40) % 20_000);
            let mut want: Vec<Option<(u64, u64)>> = vec![None; members as usize];
            for (m, off, b) in pieces(r, pos, bytes) {
                let w = &mut want[m as usize];
                *w = Some(match *w {
                    None => (off, b),
                    Some((o, n)) => {
                        assert_eq!(o + n, off, "pieces on a member are contiguous");
                        (o, n + b)
                    }
                });
            }
            let want: Vec<(u32, u64, u64)> = (0u32..)
                .zip(&want)
                .filter_map(|(m, w)| w.map(|(o, n)| (m, o, n)))
                .collect();
            assert_eq!(
                discards(r, pos, bytes),
                want,
                "{members} x {chunk} at {pos} for {bytes}"
            );
        }
    }

    #[test]
    fn md_rules_for_the_shape() {
        assert!(matches!(
            Raid0::new(1, 64 * K),
            Err(WhatIfError::Members(1))
        ));
        assert!(matches!(
            Raid0::new(0, 64 * K),
            Err(WhatIfError::Members(0))
        ));
        assert!(Raid0::new(MAX_MEMBERS + 1, 64 * K).is_err());
        for bad in [0, 512, 2 * K, 6 * K, 64 * K + 512, !4095] {
            assert!(
                matches!(Raid0::new(4, bad), Err(WhatIfError::Chunk(_))),
                "{bad}"
            );
        }
        assert!(Raid0::new(2, 4 * K).is_ok());
        assert!(Raid0::new(4, 12 * K).is_ok(), "raid0 takes 12K");
        let e = Raid0::new(4, 6 * K).unwrap_err().to_string();
        assert!(
            e.contains("--chunk 6KB") && e.contains("multiple of 4 KiB"),
            "{e}"
        );
    }
}
