//! The JSON frames (header, device, stats, trailer) and what they hold: the run's
//! description, the kernel's own counters and the probe's exact aggregates, for the analyzer's
//! coverage checks.

use serde::{Deserialize, Serialize};

use crate::diskstats::DiskStats;
use crate::op::{Op, StatGroup, flags};

/// A cgroup of the trace's records: its v2 id (the directory's inode number) and path below
/// the cgroup2 mount ("/" for the root, "/system.slice/cassandra.service").
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CgroupInfo {
    pub id: u64,
    pub path: String,
}

/// A file of the trace's records: the file system's device (`s_dev`, major << 20 | minor),
/// the inode number and the path the tracer read from the file's dentry when the probe first
/// met it (under the file system's mount point; "…/" in front when the path was deeper than
/// the probe reads).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileInfo {
    pub dev: u32,
    pub ino: u64,
    pub path: String,
}

/// One traced block device.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceInfo {
    pub name: String,
    pub major: u32,
    pub minor: u32,
    pub logical_block_size: u32,
    /// The disk's queue settings at the start (sysfs `queue/`); absent in files of tracers
    /// before it and for devices met mid-run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<QueueSettings>,
}

/// What the disk's request queue was set to (each absent where sysfs does not say): the
/// settings A/B experiments vary, so that a trace says which arm it is.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct QueueSettings {
    /// `read_ahead_kb`: the most the page cache reads ahead of a sequential reader.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub read_ahead_kb: Option<u32>,
    /// The active I/O scheduler (`none`, `mq-deadline`, `bfq`, `kyber`).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub scheduler: String,
    /// `nr_requests`: requests the queue may hold per hardware queue.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nr_requests: Option<u32>,
    /// `max_sectors_kb`: the largest request the block layer builds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_sectors_kb: Option<u32>,
    /// `rotational`: a spinning disk.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rotational: Option<bool>,
    /// The blk-mq hardware queues (`mq/N`), in index order, with the CPUs that submit
    /// through each; records name theirs ([`super::IoRecord::hw_queue`]). Empty if unknown.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub hw_queues: Vec<HwQueue>,
}

/// One blk-mq hardware queue of a disk (on NVMe, a submission/completion queue pair).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct HwQueue {
    /// The queue's index (`hctx->queue_num`, the `mq/N` directory).
    pub index: u16,
    /// CPUs mapped to it (`mq/N/cpu_list`): a request submitted on one of them goes through
    /// this queue.
    pub cpus: Vec<u32>,
}

impl DeviceInfo {
    pub fn dev(&self) -> u32 {
        crate::dev_join(self.major, self.minor)
    }
}

/// The user's filters, as given.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Filters {
    pub devices: Vec<String>,
    pub pids: Vec<u32>,
    pub comms: Vec<String>,
    pub ops: Vec<String>,
    /// `--cgroup` paths (below the cgroup2 mount); absent before format version 3.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cgroups: Vec<String>,
}

/// Exact in-kernel aggregate of one (device, op), as snapshotted by the tracer.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AggregateSnapshot {
    pub major: u32,
    pub minor: u32,
    pub op: Option<Op>,
    /// The block layer's own flush request.
    pub flush_rq: bool,
    /// Requests the kernel did not account in /proc/diskstats (queue/iostats off, or
    /// passthrough); absent in files of tracers before it.
    #[serde(default)]
    pub not_accounted: bool,
    pub ios: u64,
    pub bytes: u64,
    pub total_ns_sum: u64,
    /// IOs with a known submission time: the count of the total latency histogram (absent in
    /// files before the log-linear histograms).
    #[serde(default)]
    pub timed: u64,
    /// Sums of the device and queue latencies (ns) over the IOs in their histograms.
    #[serde(default)]
    pub device_ns_sum: u64,
    #[serde(default)]
    pub queue_ns_sum: u64,
    /// The probe's histograms, log-linear ([`crate::loglin_le_bucket`]: 4 buckets per power
    /// of two), without trailing empty buckets: request sizes in bytes, and
    /// latencies in ns. Files of tracers before them have log2 histograms under other names,
    /// which are not read.
    #[serde(default)]
    pub size: Vec<u64>,
    #[serde(default)]
    pub queue_latency: Vec<u64>,
    #[serde(default)]
    pub device_latency: Vec<u64>,
    #[serde(default)]
    pub total_latency: Vec<u64>,
}

impl AggregateSnapshot {
    /// Two sets of aggregates added key by key (device, op, flush request, accounted), sorted.
    pub fn sum(a: &[AggregateSnapshot], b: &[AggregateSnapshot]) -> Vec<AggregateSnapshot> {
        let add = |x: &mut Vec<u64>, y: &[u64]| {
            if x.len() < y.len() {
                x.resize(y.len(), 0);
            }
            for (x, y) in x.iter_mut().zip(y) {
                *x = x.saturating_add(*y);
            }
        };
        let mut out: Vec<AggregateSnapshot> = a.to_vec();
        for s in b {
            match out.iter_mut().find(|o| {
                (o.major, o.minor, o.op, o.flush_rq, o.not_accounted)
                    == (s.major, s.minor, s.op, s.flush_rq, s.not_accounted)
            }) {
                Some(o) => {
                    o.ios = o.ios.saturating_add(s.ios);
                    o.bytes = o.bytes.saturating_add(s.bytes);
                    o.total_ns_sum = o.total_ns_sum.saturating_add(s.total_ns_sum);
                    o.timed = o.timed.saturating_add(s.timed);
                    o.device_ns_sum = o.device_ns_sum.saturating_add(s.device_ns_sum);
                    o.queue_ns_sum = o.queue_ns_sum.saturating_add(s.queue_ns_sum);
                    add(&mut o.size, &s.size);
                    add(&mut o.queue_latency, &s.queue_latency);
                    add(&mut o.device_latency, &s.device_latency);
                    add(&mut o.total_latency, &s.total_latency);
                }
                None => out.push(s.clone()),
            }
        }
        out.sort_by_key(|a| (a.major, a.minor, a.op, a.flush_rq, a.not_accounted));
        out
    }

    pub fn group(&self) -> StatGroup {
        StatGroup::of(
            self.op.unwrap_or(Op::Other),
            if self.flush_rq { flags::FLUSH_RQ } else { 0 },
        )
    }
}

/// Per-program kernel statistics (`bpf_prog_info`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProgramStats {
    pub name: String,
    pub run_cnt: u64,
    pub run_time_ns: u64,
    /// Runs the kernel skipped (BPF recursion protection): IOs possibly missed.
    pub recursion_misses: u64,
}

/// The probe's loss and health counters (cumulative since attach).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeCounters {
    /// Records lost because the ring buffer was full (aggregates still counted them).
    pub ring_drops: u64,
    /// Requests not tracked because the in-kernel request map was full.
    pub request_map_full: u64,
    /// Completions of requests submitted before the tracer attached.
    pub started_before_attach: u64,
    pub aggregate_map_full: u64,
    pub records_written: u64,
    /// Requests whose completion the probe's programs never saw (detected when the kernel
    /// reused the request): IOs the kernel counted that the trace cannot have.
    #[serde(default)]
    pub missed_completions: u64,
    /// Of `missed_completions`, how far the probe had seen the request go before it was reused:
    /// (seen completing but not closed: a partial completion or a flush sequence's data part,
    /// issued to the device, never issued). A diagnostic for the cause.
    #[serde(default)]
    pub missed_stage: [u64; 3],
    /// On kernels without `block_io_start`: submitters recorded at `block_getrq` that no
    /// request took up (their IOs, if any, have no submitter). 0 elsewhere.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub submitters_lost: u64,
    /// With `--files`: files left unnamed (the names ring was full, the inode had no dentry
    /// left to read, or the daemon's table of a million files was full); their IOs name the
    /// inode only.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub file_name_drops: u64,
    /// Half records: issue, requeue and partial-completion halves lost to a full ring (their
    /// records lack an issue instant, a requeue or some bytes). Lost start halves count in
    /// `submitters_lost`, lost last halves (whole records) in `ring_drops`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub half_drops: u64,
    /// Half records: merge halves lost to a full ring (not IOs: the merged request's bytes
    /// are in another's record).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub merge_half_drops: u64,
    /// Half records: lost halves that could not be named to the join either (the ring of
    /// lost marks was full too); a request whose last half is among them may be counted in
    /// `missed_completions` as well.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub lost_unnamed: u64,
    pub programs: Vec<ProgramStats>,
}

#[expect(
    clippy::trivially_copy_pass_by_ref,
    reason = "serde's `skip_serializing_if` passes the field by reference"
)]
fn is_zero(v: &u64) -> bool {
    *v == 0
}

impl ProbeCounters {
    pub fn recursion_misses(&self) -> u64 {
        self.programs
            .iter()
            .map(|p| p.recursion_misses)
            .fold(0, u64::saturating_add)
    }

    /// Every IO the probe knows it may have missed in its exact aggregates: program runs the
    /// kernel skipped, completions never seen, requests it could not track, and completions
    /// whose aggregate it could not create (their records exist).
    pub fn reported_misses(&self) -> u64 {
        self.recursion_misses()
            .saturating_add(self.missed_completions)
            .saturating_add(self.request_map_full)
            .saturating_add(self.aggregate_map_full)
    }
}

/// The first frame: describes the run.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceHeader {
    pub format_version: u16,
    pub tracer_version: String,
    pub host: String,
    pub kernel: String,
    /// Wall-clock time (Unix epoch, ns) at `monotonic_base_ns`.
    pub wall_clock_start_ns: i64,
    /// `CLOCK_MONOTONIC` at the start; all record times are on this clock.
    pub monotonic_base_ns: u64,
    pub devices: Vec<DeviceInfo>,
    pub filters: Filters,
    pub interval_ms: u64,
    pub ring_bytes: u64,
    /// Position of this file in a rotated series (0 for the first or only file).
    pub sequence: u32,
    pub diskstats_start: Vec<DiskStats>,
    pub aggregates_start: Vec<AggregateSnapshot>,
    pub counters_start: ProbeCounters,
    /// The host's offset from UTC at `wall_clock_start_ns`, in seconds east of UTC: the
    /// analyzer reads the host's local-time logs with it. 0 (UTC) in older traces.
    #[serde(default)]
    pub utc_offset_s: i32,
    /// The host's IANA time zone name ("Europe/Berlin") when known, else "".
    #[serde(default)]
    pub time_zone: String,
    /// The md arrays the traced disks are members of, as laid out at the start (absent in
    /// files of tracers before it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub arrays: Vec<ArrayInfo>,
    /// The tracepoint that saw submissions: `"block_io_start"` (Linux 6.5+; also `""` in files
    /// of tracers before this field) or `"block_getrq"` (Linux 6.1-6.4: submitters adopted through
    /// the request's bios, see docs/design/kernel-6.1-fallback.md).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub submit_hook: String,
    /// The user's `--label KEY=VALUE`s: what the run was (an experiment's arm, a node's role),
    /// for reports and `blkprof compare` to name it by.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub labels: std::collections::BTreeMap<String, String>,
    /// Whether the records carry the cgroup each IO is charged to ([`super::IoRecord::owner_cgroup`]);
    /// absent in files of tracers before it (format version 5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner_cgroups: Option<OwnerCgroups>,
    /// Records name the file of their data pages ([`super::IoRecord::file_dev`]): the run
    /// asked for it (`--files`); false in files of tracers before it (format version 5).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub files: bool,
}

/// What the tracer could learn of the cgroups IOs are charged to, on the traced host.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct OwnerCgroups {
    /// Records carry the bio's blkcg (the io controller is on the unified hierarchy).
    pub tracked: bool,
    /// Written-back pages are charged to the cgroup that dirtied them (the kernel's cgroup
    /// writeback: io and memory controllers both on the unified hierarchy).
    pub writeback: bool,
    /// Why either is not, for the report to say.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub reason: String,
}

/// An md array over traced disks: what the report groups its members by.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ArrayInfo {
    /// The array's name (md0).
    pub name: String,
    /// As md says it (raid0, raid1, raid10, ...).
    pub level: String,
    /// md's chunk size in bytes (0 for levels without chunks).
    pub chunk_bytes: u64,
    /// Members in md's slot order where known (else by name).
    pub members: Vec<ArrayMember>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ArrayMember {
    /// The whole disk the probe traces (nvme0n1).
    pub disk: String,
    /// The partition that is the member, if it is one (nvme0n1p2).
    pub partition: Option<String>,
    /// md's slot number of the member (its position in the stripe), if known.
    pub slot: Option<u32>,
}

impl TraceHeader {
    /// Unix ns of a `CLOCK_MONOTONIC` instant of the run (the header pairs the two clocks at
    /// its start), clamped to i64's range.
    #[inline]
    #[expect(
        clippy::cast_possible_truncation,
        reason = "clamped to i64's range first"
    )]
    pub fn wall_ns(&self, mono_ns: u64) -> i64 {
        let w = i128::from(self.wall_clock_start_ns) + i128::from(mono_ns)
            - i128::from(self.monotonic_base_ns);
        w.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
    }

    /// The `CLOCK_MONOTONIC` instant of a Unix ns time, clamped to 0 before the clock's origin.
    #[expect(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "clamped to u64's range first"
    )]
    pub fn mono_ns(&self, wall_ns: i64) -> u64 {
        let m = i128::from(wall_ns) - i128::from(self.wall_clock_start_ns)
            + i128::from(self.monotonic_base_ns);
        m.clamp(0, i128::from(u64::MAX)) as u64
    }
}

/// Periodic counters, so a file cut short still knows its losses up to its last frame.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatsFrame {
    pub at_ns: u64,
    pub counters: ProbeCounters,
    pub records_in_file: u64,
    pub filtered_out: u64,
}

/// The last frame: how the run ended.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceTrailer {
    pub wall_clock_end_ns: i64,
    pub monotonic_end_ns: u64,
    /// "duration", "signal", "rotation", "disk-full", "error".
    pub reason: String,
    pub diskstats_end: Vec<DiskStats>,
    pub aggregates_end: Vec<AggregateSnapshot>,
    pub counters_end: ProbeCounters,
    /// Records stored in this file.
    pub records_in_file: u64,
    /// Records received but not stored because of --pid/--comm/--op filters.
    pub filtered_out: u64,
    /// How the run was cut at its start and end (the first and the last file of a run; absent
    /// in files of older tracers, and at rotation boundaries).
    #[serde(default)]
    pub start_cut: Option<Cut>,
    #[serde(default)]
    pub end_cut: Option<Cut>,
}

/// One end of a run, cut at a `CLOCK_MONOTONIC` instant `at_ns` that the tracer wrote to its
/// probe ahead of time: the run holds exactly the IOs completing after the start's instant and
/// by the end's, in its records and in its exact aggregates. /proc/diskstats is read just
/// after each instant, so the kernel's counters also include the IOs that completed between
/// the instant and the read; those are tallied here from the records, per device and group.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Cut {
    pub at_ns: u64,
    /// When /proc/diskstats was read (its read began and ended; the kernel sums its per-CPU
    /// counters somewhere in between).
    pub read_from_ns: u64,
    pub read_to_ns: u64,
    pub devices: Vec<CutDevice>,
    /// End only: IOs in flight at the instant that completed after it (within a grace period):
    /// not part of the run.
    pub in_flight: u64,
    /// End only: IOs in flight at the instant that had not completed a grace period later:
    /// missed completions (or IOs slower than the grace period), counted by stage in
    /// `counters_end.missed_completions` and `missed_stage`.
    pub never_completed: u64,
    /// Rotations with half records only (0 in traces written before the field). A missed completion
    /// is found when its request's address starts another request, and the kernel counted the IO in
    /// between: for a request in flight at the instant, on either side of it. The tracer waits
    /// after the instant (at most 250 ms) until the requests that entered the OS in the second
    /// before it have completed or been found missed. `missed_after`: the misses found from just
    /// before the instant to the end of that wait, counted in the ending file's misses; the kernel
    /// may have counted them in the next file, whose coverage allows for them.
    pub missed_after: u64,
    /// Requests in flight at the instant still open when the wait ended (missed and not yet
    /// found, or slower than the wait): if found missed, counted in a later file's misses; the
    /// kernel may have counted them in the ending file, whose coverage allows for them.
    pub still_open: u64,
}

/// IOs of one device that completed between a cut's instant and the diskstats read, and during
/// the read, as (ios, bytes) per diskstats group (read, write, discard, flush).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CutDevice {
    pub major: u32,
    pub minor: u32,
    pub before_read: [(u64, u64); 4],
    pub during_read: [(u64, u64); 4],
}

/// How long before /proc/diskstats is read an IO's completion program may have run while the
/// kernel has not yet counted the IO: the kernel counts it (`blk_account_io_done`) after the
/// `block_rq_complete` tracepoint and the bios' end callbacks (a direct IO's completion to its
/// task, a written-back page's end), and a virtual CPU put off by its host in between delays
/// the count further. An IO whose program ran this close before the read is tallied with those
/// that completed during it (the kernel may or may not have counted it). With the read's
/// start as the boundary, an IO whose program ran just before the read (9 us, measured:
/// BENCHMARKS.md) but which the kernel counted in the read's delta would be tallied again: one
/// IO too many in the file's check.
const KERNEL_COUNT_LAG_NS: u64 = 100_000;

impl Cut {
    /// Tally an IO that completed after the instant, if it did so before the read ended:
    /// before the read, or during it (or within [`KERNEL_COUNT_LAG_NS`] before it).
    pub fn tally(&mut self, dev: u32, group: usize, bytes: u64, complete_ns: u64) {
        if complete_ns <= self.at_ns || complete_ns > self.read_to_ns {
            return;
        }
        let (major, minor) = crate::dev_split(dev);
        let i = if let Some(i) = self
            .devices
            .iter()
            .position(|d| d.major == major && d.minor == minor)
        {
            i
        } else {
            self.devices.push(CutDevice {
                major,
                minor,
                ..CutDevice::default()
            });
            self.devices.len() - 1
        };
        let d = &mut self.devices[i];
        let slot = if complete_ns < self.read_from_ns.saturating_sub(KERNEL_COUNT_LAG_NS) {
            &mut d.before_read[group]
        } else {
            &mut d.during_read[group]
        };
        slot.0 += 1;
        slot.1 += bytes;
    }

    /// (`before_read`, `during_read`) of one device and group.
    pub fn of(&self, major: u32, minor: u32, group: usize) -> ((u64, u64), (u64, u64)) {
        self.devices
            .iter()
            .find(|d| d.major == major && d.minor == minor)
            .map_or(((0, 0), (0, 0)), |d| {
                (d.before_read[group], d.during_read[group])
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_io_just_before_the_counters_read_is_tallied_as_during_it() {
        let read_from_ns = 10_000_000;
        let mut c = Cut {
            at_ns: 1_000_000,
            read_from_ns,
            read_to_ns: read_from_ns + 200_000,
            ..Cut::default()
        };
        let dev = crate::dev_join(7, 1);
        for t in [
            // At the instant: the earlier file's.
            1_000_000,
            // Before the read, the kernel's count long done.
            1_000_001,
            read_from_ns - KERNEL_COUNT_LAG_NS - 1,
            // Its count may come after the read began.
            read_from_ns - KERNEL_COUNT_LAG_NS,
            read_from_ns - 9_000,
            // During the read.
            read_from_ns + 200_000,
            // After it: not the cut's.
            read_from_ns + 200_001,
        ] {
            c.tally(dev, 0, 4096, t);
        }
        assert_eq!(c.of(7, 1, 0), ((2, 8192), (3, 3 * 4096)));
    }

    #[test]
    fn aggregates_add_key_by_key() {
        let a = |minor, op, ios: u64| AggregateSnapshot {
            major: 7,
            minor,
            op: Some(op),
            ios,
            bytes: ios * 4096,
            size: vec![0, ios],
            ..AggregateSnapshot::default()
        };
        let s = AggregateSnapshot::sum(
            &[a(1, Op::Write, 5), a(0, Op::Read, 2)],
            &[a(0, Op::Read, 3), a(2, Op::Read, 1)],
        );
        let got: Vec<_> = s.iter().map(|x| (x.minor, x.op, x.ios, x.bytes)).collect();
        assert_eq!(
            got,
            [
                (0, Some(Op::Read), 5, 5 * 4096),
                (1, Some(Op::Write), 5, 5 * 4096),
                (2, Some(Op::Read), 1, 4096)
            ]
        );
        assert_eq!(s[0].size, [0, 5]);
    }
}
