//! Synthetic traces with planted truth, written through the real trace writer: the ground
//! truth for the analyzer's tests and benchmarks.

use std::collections::BTreeMap;
use std::path::Path;

use tracer_common::format::{
    AggregateSnapshot, DeviceInfo, DiskStats, FormatError, IoRecord, ProbeCounters, QueueSettings,
    TraceHeader, TraceTrailer, TraceWriter, comm_bytes,
};
use tracer_common::op::{Op, StatGroup, flags};

use crate::numeric::f64_to_u64_saturating;

pub const DEV: u32 = (259 << 20) | 1;
pub const BASE_NS: u64 = 1_000_000_000_000;
pub const WALL_NS: i64 = 1_795_000_000_000_000_000;

/// One planted IO.
#[derive(Clone, Copy, Debug)]
pub struct Io {
    pub enter_ns: u64,
    pub issue_ns: u64,
    pub complete_ns: u64,
    pub op: Op,
    pub bytes: u32,
    pub sector: u64,
    pub os_inflight: u32,
    pub flags: u16,
}

/// Write `ios` (any order) as a trace of device nvme0n1 (259:1), with diskstats and
/// aggregates that match them exactly.
pub fn write_trace(path: &Path, ios: &mut [Io]) -> Result<(), FormatError> {
    write_trace_with(path, ios, &Meta::default())
}

/// What a planted trace's header says of its run besides the IOs: the tracer's `--label`s
/// and the disk's queue settings (an experiment's arm).
#[derive(Clone, Debug, Default)]
pub struct Meta {
    pub labels: BTreeMap<String, String>,
    pub queue: Option<QueueSettings>,
    /// The device's name (default nvme0n1) and the submitting task's (default java): what a
    /// crafted or imported trace can set to anything.
    pub device: Option<String>,
    pub comm: Option<String>,
}

/// [`write_trace`] with the header's labels and queue settings from `meta`.
pub fn write_trace_with(path: &Path, ios: &mut [Io], meta: &Meta) -> Result<(), FormatError> {
    ios.sort_by_key(|i| i.complete_ns);
    let device = meta.device.clone().unwrap_or_else(|| "nvme0n1".into());
    let mut start = DiskStats {
        name: device.clone(),
        major: 259,
        minor: 1,
        at_ns: BASE_NS,
        ..Default::default()
    };
    start.read_ios = 1000;
    start.write_ios = 2000;
    let header = TraceHeader {
        tracer_version: "synthetic".into(),
        host: "synth".into(),
        kernel: "6.18".into(),
        wall_clock_start_ns: WALL_NS,
        monotonic_base_ns: BASE_NS,
        devices: vec![DeviceInfo {
            name: device,
            major: 259,
            minor: 1,
            logical_block_size: 512,
            queue: meta.queue.clone(),
        }],
        labels: meta.labels.clone(),
        interval_ms: 1000,
        diskstats_start: vec![start.clone()],
        ..Default::default()
    };
    let mut w = TraceWriter::create(path, &header)?;
    let mut end = start.clone();
    let mut aggs: Vec<AggregateSnapshot> = Vec::new();
    let comm = comm_bytes(meta.comm.as_deref().unwrap_or("java"));
    for io in ios.iter() {
        let r = IoRecord {
            complete_ns: io.complete_ns,
            enter_ns: io.enter_ns,
            issue_ns: io.issue_ns,
            sector: io.sector,
            bytes: io.bytes,
            pid: 4242,
            task: 0,
            dev_inflight: io.os_inflight,
            os_inflight: io.os_inflight,
            error: 0,
            dev: DEV,
            requeues: 0,
            flags: io.flags,
            op: io.op,
            cgroup: 0,
            owner_cgroup: 0,
            file_dev: 0,
            file_ino: 0,
            file_id: 0,
            hw_queue: None,
        };
        w.push(&r, &comm)?;
        let b = u64::from(io.bytes);
        match r.stat_group() {
            StatGroup::Read => {
                end.read_ios += 1;
                end.read_sectors += b / 512;
            }
            StatGroup::Write => {
                end.write_ios += 1;
                end.write_sectors += b / 512;
            }
            StatGroup::Discard => {
                end.discard_ios += 1;
                end.discard_sectors += b / 512;
            }
            StatGroup::Flush => end.flush_ios += 1,
        }
        end.weighted_ms += 0; // kept in ns below
        let fr = io.flags & flags::FLUSH_RQ != 0;
        match aggs
            .iter_mut()
            .find(|a| a.op == Some(io.op) && a.flush_rq == fr)
        {
            Some(a) => {
                a.ios += 1;
                a.bytes += b;
                a.total_ns_sum += r.total_ns();
            }
            None => aggs.push(AggregateSnapshot {
                major: 259,
                minor: 1,
                op: Some(io.op),
                flush_rq: fr,
                ios: 1,
                bytes: b,
                total_ns_sum: r.total_ns(),
                ..Default::default()
            }),
        }
    }
    let last = ios.last().map_or(BASE_NS, |i| i.complete_ns);
    end.at_ns = last + 1_000_000;
    end.weighted_ms =
        start.weighted_ms + aggs.iter().map(|a| a.total_ns_sum).sum::<u64>() / 1_000_000;
    w.finish(&TraceTrailer {
        wall_clock_end_ns: WALL_NS
            .saturating_add(i64::try_from(end.at_ns - BASE_NS).unwrap_or(i64::MAX)),
        monotonic_end_ns: end.at_ns,
        reason: "duration".into(),
        diskstats_end: vec![end],
        aggregates_end: aggs,
        counters_end: ProbeCounters::default(),
        records_in_file: ios.len() as u64,
        ..TraceTrailer::default()
    })?;
    Ok(())
}

/// The planted workloads' generator (`analyzer::synth::Rng` to the tests and xtask).
pub use crate::numeric::Rng;

/// A Cassandra-shaped workload: `seconds` of 4 KB random reads at `read_iops`, with 512 KB
/// write bursts planted at `bursts` (start s, duration s, MB/s), each followed 2 s later by a
/// 4 GB discard; a trickle of 4 KB commit-log writes between.
pub fn cassandra_like(seconds: u64, read_iops: u64, bursts: &[(f64, f64, f64)]) -> Vec<Io> {
    cassandra_like_seeded(0x1234_5678, seconds, read_iops, bursts)
}

/// [`cassandra_like`] with the read times, latencies and sectors drawn from generator `seed`:
/// another recording of the same workload, differing only by noise.
pub fn cassandra_like_seeded(
    seed: u64,
    seconds: u64,
    read_iops: u64,
    bursts: &[(f64, f64, f64)],
) -> Vec<Io> {
    let mut rng = Rng(seed);
    let mut ios = Vec::new();
    let s = 1_000_000_000u64;
    let in_burst = |t: u64| {
        bursts
            .iter()
            .any(|&(b, d, _)| t as f64 >= b * 1e9 && (t as f64) < (b + d) * 1e9)
    };
    // Reads: fast outside bursts, slow inside.
    let n = seconds * read_iops;
    for i in 0..n {
        let t = i * s / read_iops + rng.below(s / read_iops);
        let lat = if in_burst(t) {
            8_000_000 + rng.below(4_000_000)
        } else {
            80_000 + rng.below(40_000)
        };
        let enter = BASE_NS + t;
        ios.push(Io {
            enter_ns: enter,
            issue_ns: enter + 2_000,
            complete_ns: enter + 2_000 + lat,
            op: Op::Read,
            bytes: 4096,
            sector: rng.below(1 << 30) & !7,
            os_inflight: if in_burst(t) { 200 } else { 4 },
            flags: flags::SYNC,
        });
    }
    // Commit-log trickle: 4 KB writes, 50 per second.
    for i in 0..seconds * 50 {
        let enter = BASE_NS + i * s / 50 + 7;
        ios.push(Io {
            enter_ns: enter,
            issue_ns: enter + 1_000,
            complete_ns: enter + 30_000,
            op: Op::Write,
            bytes: 4096,
            sector: 1_000_000 + i * 8,
            os_inflight: 2,
            flags: flags::SYNC,
        });
    }
    for &(b, d, mbps) in bursts {
        let per_s = f64_to_u64_saturating(mbps * 1e6 / (512.0 * 1024.0));
        let count = f64_to_u64_saturating(per_s as f64 * d);
        for i in 0..count {
            let enter = BASE_NS
                + f64_to_u64_saturating(b * 1e9)
                + i * f64_to_u64_saturating(d * 1e9) / count.max(1);
            ios.push(Io {
                enter_ns: enter,
                issue_ns: enter + 5_000,
                complete_ns: enter + 3_000_000,
                op: Op::Write,
                bytes: 512 << 10,
                sector: 2_000_000 + i * 1024,
                os_inflight: 200,
                flags: 0,
            });
        }
        let t = BASE_NS + f64_to_u64_saturating((b + d + 2.0) * 1e9);
        ios.push(Io {
            enter_ns: t,
            issue_ns: t + 1_000,
            complete_ns: t + 50_000_000,
            op: Op::Discard,
            bytes: !511,
            sector: 0,
            os_inflight: 1,
            flags: 0,
        });
    }
    ios
}
