//! Serialising the summary: the typed report model behind `report --json` (and so the text
//! and HTML reports), per device and op, with throughput, time series and the client's view
//! beside the disk's.

use std::collections::BTreeMap;

use tracer_common::format::{Ending, rfc3339};
use tracer_common::op::StatGroup;

use super::{
    ClientDiskRow, ClientVsDisk, DeviceStats, DiskWindow, JsonDevice, JsonLatency, JsonOp,
    JsonRate, JsonReport, JsonSeries, JsonSize, JsonTask, JsonThroughput, JsonTimeZones, OpStats,
    REPORT_SCHEMA_VERSION, Summary, TOP_TASKS,
};
use crate::analysis::series::Series;

impl Summary {
    pub fn to_json(&self) -> JsonReport {
        let mut devices = Vec::new();
        for d in self.devices.values() {
            let tot_ios: u64 = d.ops.values().map(|o| o.ios).sum::<u64>().max(1);
            let tot_bytes: u64 = d.ops.values().map(|o| o.bytes).sum::<u64>().max(1);
            let mut ops = BTreeMap::new();
            for (k, o) in &d.ops {
                let mut sizes: Vec<JsonSize> = o
                    .sizes
                    .iter()
                    .map(|(c, (n, b))| JsonSize {
                        class: c.label(),
                        pct_ios: *n as f64 * 100.0 / o.ios.max(1) as f64,
                        ios: *n,
                        bytes: *b,
                    })
                    .collect();
                sizes.sort_by_key(|z| std::cmp::Reverse(z.ios));
                ops.insert(
                    k.clone(),
                    JsonOp {
                        ios: o.ios,
                        bytes: o.bytes,
                        pct_ios: o.ios as f64 * 100.0 / tot_ios as f64,
                        pct_bytes: o.bytes as f64 * 100.0 / tot_bytes as f64,
                        block_sizes: sizes,
                        device_latency_us: JsonLatency::of(&o.device_latency_ns),
                        total_latency_us: JsonLatency::of(&o.total_latency_ns),
                        readahead_bytes: o.readahead_bytes,
                        errors: o.errors,
                    },
                );
            }
            for k in StatGroup::ALL.map(StatGroup::name) {
                if !ops.contains_key(k) {
                    let o = OpStats::new();
                    ops.insert(
                        k.into(),
                        JsonOp {
                            ios: 0,
                            bytes: 0,
                            pct_ios: 0.0,
                            pct_bytes: 0.0,
                            block_sizes: Vec::new(),
                            device_latency_us: JsonLatency::of(&o.device_latency_ns),
                            total_latency_us: JsonLatency::of(&o.total_latency_ns),
                            readahead_bytes: 0,
                            errors: 0,
                        },
                    );
                }
            }
            devices.push(JsonDevice {
                name: d.name.clone(),
                major: d.major,
                minor: d.minor,
                start: self.wall(d.first_ns),
                end: self.wall(d.last_ns),
                ops,
                absorbed_flushes: d.absorbed_flushes,
                coverage: self
                    .coverage
                    .iter()
                    .find(|c| c.major == d.major && c.minor == d.minor)
                    .cloned(),
                throughput: throughput(d),
                bursts: d.bursts.clone(),
                queue_depth_spikes: d.spikes.clone(),
                reads_during_bursts: d.read_impact.clone(),
                series: self.series_json(d),
                classes: self
                    .classes
                    .as_ref()
                    .and_then(|c| c.devices.iter().find(|x| x.name == d.name))
                    .map(|x| x.classes.clone())
                    .unwrap_or_default(),
                queue: self
                    .header
                    .devices
                    .iter()
                    .find(|i| i.major == d.major && i.minor == d.minor)
                    .and_then(|i| i.queue.clone()),
            });
        }
        JsonReport {
            schema_version: REPORT_SCHEMA_VERSION,
            traces: self.paths.iter().map(|p| p.display().to_string()).collect(),
            host: self.header.host.clone(),
            kernel: self.header.kernel.clone(),
            start: rfc3339(self.header.wall_clock_start_ns),
            labels: self.header.labels.clone(),
            start_unix_ns: self.header.wall_clock_start_ns,
            duration_s: self.trailer.as_ref().map(|t| {
                t.monotonic_end_ns
                    .saturating_sub(self.header.monotonic_base_ns) as f64
                    / 1e9
            }),
            records: self.records,
            complete: self.endings.iter().all(|(_, e)| *e == Ending::Complete),
            devices,
            markers: self
                .context
                .logs
                .iter()
                .flat_map(|l| l.markers.iter().cloned())
                .collect(),
            stress: self.context.stress.clone(),
            flush_match: self.flush_matches(),
            compaction_discards: self.compaction_discards(),
            lost: self.lost(),
            integrity: self.integrity.clone(),
            time_zones: JsonTimeZones {
                trace: crate::inputs::zone::Zone::of_trace(&self.header).label,
                app_log: self.context.logs.first().map(|l| l.time_zone.label.clone()),
                stress: self
                    .context
                    .stress
                    .first()
                    .map(|r| r.time_zone.label.clone()),
            },
            time_warnings: self.time_warnings(),
            client_vs_disk: self.client_vs_disk(),
            top_tasks: self
                .tasks
                .iter()
                .take(TOP_TASKS)
                .map(|(pid, comm, ios)| JsonTask {
                    pid: *pid,
                    comm: comm.clone(),
                    ios: *ios,
                })
                .collect(),
            tasks: self.tasks.len(),
            sections: self.sections.clone(),
            class_profile: self.classes.as_ref().map(|c| c.profile.clone()),
        }
    }

    /// [`JsonReport::client_vs_disk`].
    fn client_vs_disk(&self) -> Vec<ClientVsDisk> {
        let Some(d) = self.devices.values().next() else {
            return Vec::new();
        };
        let to_mono = |w: i64| self.header.mono_ns(w);
        let mut out = Vec::new();
        for run in &self.context.stress {
            let timed: Vec<_> = run
                .status
                .iter()
                .filter(|p| p.time_ns.is_some() && p.ops_per_s.is_some())
                .collect();
            if !timed
                .iter()
                .any(|p| p.time_ns.is_some_and(|t| self.near_trace(t)))
            {
                continue;
            }
            let s = &d.series;
            let mut prev: Option<i64> = None;
            let mut rows = Vec::new();
            for p in timed {
                let t = p.time_ns.unwrap_or(0);
                let from = prev.unwrap_or(t - 5_000_000_000);
                prev = Some(t);
                let (a, b) = (s.at_interval(to_mono(from)), s.at_interval(to_mono(t)));
                let ivs = s.intervals.get(a..b.min(s.intervals.len())).unwrap_or(&[]);
                let secs = (ivs.len() as f64 * s.interval_ns as f64 / 1e9).max(1e-9);
                rows.push(ClientDiskRow {
                    time: rfc3339(t),
                    ops_per_s: p.ops_per_s.unwrap_or(0.0),
                    client_p99_us: p
                        .latencies
                        .iter()
                        .filter_map(|l| l.p99_us.or(l.avg_us))
                        .fold(0.0, f64::max),
                    disk: (!ivs.is_empty()).then(|| DiskWindow {
                        write_mb_per_s: ivs.iter().map(|iv| iv.groups[1].1).sum::<u64>() as f64
                            / 1e6
                            / secs,
                        read_iops: ivs.iter().map(|iv| iv.groups[0].0).sum::<u64>() as f64 / secs,
                        queue_depth: (a..b).map(|i| s.interval_queue(i)).sum::<f64>()
                            / (b - a).max(1) as f64,
                        read_p99_us: ivs.iter().map(|iv| iv.read_lat[1]).max().unwrap_or(0) as f64
                            / 1e3,
                    }),
                });
            }
            out.push(ClientVsDisk {
                path: run.path.clone(),
                device: d.name.clone(),
                rows,
            });
        }
        out
    }
}

fn rate(s: &Series, g: StatGroup) -> JsonRate {
    let secs = s.interval_ns as f64 / 1e9;
    let n = s.intervals.len().max(1) as f64;
    let ios: Vec<f64> = s
        .intervals
        .iter()
        .map(|iv| iv.groups[g as usize].0 as f64 / secs)
        .collect();
    let mbs: Vec<f64> = s
        .intervals
        .iter()
        .map(|iv| iv.groups[g as usize].1 as f64 / 1e6 / secs)
        .collect();
    JsonRate {
        mean_mb_per_s: mbs.iter().sum::<f64>() / n,
        max_mb_per_s: mbs.iter().copied().fold(0.0, f64::max),
        mean_iops: ios.iter().sum::<f64>() / n,
        max_iops: ios.iter().copied().fold(0.0, f64::max),
    }
}

fn throughput(d: &DeviceStats) -> JsonThroughput {
    let s = &d.series;
    let n = s.intervals.len();
    JsonThroughput {
        read: rate(s, StatGroup::Read),
        write: rate(s, StatGroup::Write),
        discard: rate(s, StatGroup::Discard),
        flush: rate(s, StatGroup::Flush),
        queue_depth_mean: (0..n).map(|i| s.interval_queue(i)).sum::<f64>() / n.max(1) as f64,
        queue_depth_max: s.intervals.iter().map(|iv| iv.queue_max).max().unwrap_or(0),
    }
}

impl Summary {
    fn series_json(&self, d: &DeviceStats) -> JsonSeries {
        let s = &d.series;
        let secs = s.interval_ns as f64 / 1e9;
        let g = |f: &dyn Fn(&crate::analysis::series::Interval) -> f64| {
            s.intervals.iter().map(f).collect::<Vec<f64>>()
        };
        JsonSeries {
            interval_s: secs,
            start: self.wall(s.t0_ns),
            read_iops: g(&|iv| iv.groups[0].0 as f64 / secs),
            read_mb_per_s: g(&|iv| iv.groups[0].1 as f64 / 1e6 / secs),
            write_iops: g(&|iv| iv.groups[1].0 as f64 / secs),
            write_mb_per_s: g(&|iv| iv.groups[1].1 as f64 / 1e6 / secs),
            discard_mb_per_s: g(&|iv| iv.groups[2].1 as f64 / 1e6 / secs),
            flush_iops: g(&|iv| iv.groups[3].0 as f64 / secs),
            queue_depth_mean: (0..s.intervals.len())
                .map(|i| s.interval_queue(i))
                .collect(),
            queue_depth_max: s.intervals.iter().map(|iv| iv.queue_max).collect(),
            read_p99_us: g(&|iv| iv.read_lat[1] as f64 / 1e3),
            read_max_us: g(&|iv| iv.read_lat[3] as f64 / 1e3),
            write_p99_us: g(&|iv| iv.write_lat[1] as f64 / 1e3),
            write_max_us: g(&|iv| iv.write_lat[3] as f64 / 1e3),
            fine_interval_s: s.fine_ns as f64 / 1e9,
            fine_write_mb_per_s: {
                let fine_s = s.fine_ns as f64 / 1e9;
                s.fine_write_bytes
                    .iter()
                    .map(|&b| b as f64 / 1e6 / fine_s)
                    .collect()
            },
            fine_class_write_mb_per_s: self.classes.as_ref().map_or_else(Vec::new, |c| {
                let fine_s = s.fine_ns as f64 / 1e9;
                c.fine_written(
                    tracer_common::dev_join(d.major, d.minor),
                    s.fine_write_bytes.len(),
                )
                .into_iter()
                .map(|(class, v)| crate::report::model::ClassSeries {
                    class: class.to_string(),
                    mb_per_s: v.into_iter().map(|b| b as f64 / 1e6 / fine_s).collect(),
                })
                .collect()
            }),
        }
    }
}
