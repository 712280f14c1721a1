//! blk-mq hardware queues: how each disk's IO spread over its hardware queues (on NVMe, the
//! submission/completion queue pairs; the block layer picks a request's queue from the CPU
//! that submitted it, through the map the trace header records from `mq/N/cpu_list`). An
//! application pinned to a few CPUs uses only their queues, whatever the disk offers.

use std::io::Write;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tracer_common::format::{IoRecord, TraceHeader};
use tracer_common::op::StatGroup;

use super::{Names, Section, SectionDef};
use crate::analysis::per_device::index;
use crate::analysis::series::Options;

pub(super) const DEF: SectionDef = SectionDef {
    name: "hw_queues",
    new,
    text,
    html,
};

#[derive(Serialize, Deserialize, Default)]
#[serde(default)]
struct Model {
    devices: Vec<DeviceModel>,
}

#[derive(Serialize, Deserialize, Default, Debug)]
#[serde(default)]
struct DeviceModel {
    name: String,
    /// Hardware queues the disk had at the start (the header's `mq` list); 0 if unknown.
    queues: u64,
    /// Queues that carried at least one IO.
    queues_used: u64,
    /// IOs whose queue is known.
    ios: u64,
    /// The busiest queue's IOs over the mean of all the disk's queues (the used and the idle
    /// ones): 1.00 when the IO spread evenly.
    imbalance_ios: f64,
    rows: Vec<QueueModel>,
}

#[derive(Serialize, Deserialize, Default, Debug)]
#[serde(default)]
struct QueueModel {
    index: u16,
    /// CPUs mapped to the queue, from the header (empty if unknown).
    cpus: Vec<u32>,
    ios: u64,
    bytes: u64,
    read_ios: u64,
    write_ios: u64,
    pct_ios: f64,
    pct_bytes: f64,
    mean_request_bytes: f64,
    /// Requests on the device at each IO's issue (this one included), mean.
    device_queue_depth_mean: f64,
    /// Issue to completion, mean, microseconds.
    device_latency_mean_us: f64,
}

/// One queue's counts. Kept per device in a vector indexed by queue, so that the per-record
/// path has no search and no branch on the queue (NVMe submitters alternate queues at random).
#[derive(Default, Clone, Copy)]
struct Tally {
    bytes: u64,
    /// IOs per diskstats group (read, write, discard, flush).
    groups: [u64; 4],
    issued: u64,
    inflight_sum: u64,
    device_ns_sum: u64,
}

impl Tally {
    fn ios(&self) -> u64 {
        self.groups.iter().sum()
    }
}

/// A device's queues: its tallies by queue index.
struct DevTallies {
    dev: u32,
    queues: Vec<Tally>,
}

/// A device's hardware queues as the header lists them: (index, CPUs).
type Listed = Vec<(u16, Vec<u32>)>;

/// Per device (few): a short list searched from the last one used.
struct HwQueues {
    header: Vec<(u32, Listed)>,
    devs: Vec<DevTallies>,
    last: usize,
}

fn new(_: &Options, header: &TraceHeader) -> Box<dyn Section> {
    let header = header
        .devices
        .iter()
        .filter_map(|d| {
            let q = d.queue.as_ref()?;
            Some((
                d.dev(),
                q.hw_queues
                    .iter()
                    .map(|h| (h.index, h.cpus.clone()))
                    .collect(),
            ))
        })
        .collect();
    Box::new(HwQueues {
        header,
        devs: Vec::new(),
        last: 0,
    })
}

impl HwQueues {
    /// The tallies of device `dev`, made when first needed.
    fn tallies(&mut self, dev: u32) -> &mut DevTallies {
        let i = index(
            &mut self.devs,
            &mut self.last,
            dev,
            |d| d.dev,
            || DevTallies {
                dev,
                queues: Vec::new(),
            },
        );
        &mut self.devs[i]
    }
}

impl Section for HwQueues {
    fn chunk(&mut self, records: &[IoRecord]) {
        // By runs of one device (records of a device mostly come together): its tallies are
        // found once per run, when an IO with a known queue needs them.
        for run in records.chunk_by(|a, b| a.dev == b.dev) {
            let Some(first) = run.iter().position(|r| r.hw_queue.is_some()) else {
                continue;
            };
            let d = self.tallies(run[first].dev);
            for r in &run[first..] {
                let Some(q) = r.hw_queue else { continue };
                let q = usize::from(q);
                if q >= d.queues.len() {
                    d.queues.resize(q + 1, Tally::default());
                }
                let t = &mut d.queues[q];
                t.bytes += u64::from(r.bytes);
                t.groups[r.stat_group() as usize] += 1;
                // Branch-free: an IO never issued adds 0 to the device figures.
                let issued = u64::from(r.issue_ns != 0);
                t.issued += issued;
                t.inflight_sum += issued * u64::from(r.dev_inflight);
                t.device_ns_sum += r.device_ns();
            }
        }
    }

    fn finish(self: Box<Self>, cx: &Names) -> Value {
        let mut devs: Vec<&DevTallies> = self.devs.iter().collect();
        devs.sort_unstable_by_key(|d| d.dev);
        let mut devices = Vec::new();
        for dt in devs {
            let dev = dt.dev;
            let known: &[(u16, Vec<u32>)] = self
                .header
                .iter()
                .find(|(d, _)| *d == dev)
                .map_or(&[], |(_, q)| q.as_slice());
            let mut rows: Vec<QueueModel> = known
                .iter()
                .map(|(index, cpus)| QueueModel {
                    index: *index,
                    cpus: cpus.clone(),
                    ..QueueModel::default()
                })
                .collect();
            for (queue, t) in (0u16..).zip(&dt.queues) {
                if t.ios() == 0 {
                    continue;
                }
                let i = if let Some(i) = rows.iter().position(|r| r.index == queue) {
                    i
                } else {
                    rows.push(QueueModel {
                        index: queue,
                        ..QueueModel::default()
                    });
                    rows.len() - 1
                };
                let row = &mut rows[i];
                row.ios = t.ios();
                row.bytes = t.bytes;
                row.read_ios = t.groups[StatGroup::Read as usize];
                row.write_ios = t.groups[StatGroup::Write as usize];
                if t.issued > 0 {
                    row.device_queue_depth_mean = t.inflight_sum as f64 / t.issued as f64;
                    row.device_latency_mean_us = t.device_ns_sum as f64 / t.issued as f64 / 1e3;
                }
            }
            rows.sort_by_key(|r| r.index);
            let ios: u64 = rows.iter().map(|r| r.ios).sum();
            let bytes: u64 = rows.iter().map(|r| r.bytes).sum();
            for r in &mut rows {
                r.pct_ios = pct(r.ios, ios);
                r.pct_bytes = pct(r.bytes, bytes);
                r.mean_request_bytes = if r.ios == 0 {
                    0.0
                } else {
                    r.bytes as f64 / r.ios as f64
                };
            }
            let most = rows.iter().map(|r| r.ios).max().unwrap_or(0);
            let mean = ios as f64 / rows.len().max(1) as f64;
            devices.push(DeviceModel {
                name: (cx.device)(dev),
                queues: known.len() as u64,
                queues_used: rows.iter().filter(|r| r.ios > 0).count() as u64,
                ios,
                imbalance_ios: if mean > 0.0 { most as f64 / mean } else { 0.0 },
                rows,
            });
        }
        if devices.is_empty() {
            return Value::Null;
        }
        serde_json::to_value(Model { devices }).unwrap_or(Value::Null)
    }
}

fn pct(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 * 100.0 / whole as f64
    }
}

/// The devices worth showing: those with more than one hardware queue (a disk with one, such
/// as a loop device, has nothing to spread).
fn model(v: &Value) -> Option<Model> {
    let mut m = Model::deserialize(v).ok()?;
    m.devices.retain(|d| d.rows.len() > 1);
    (!m.devices.is_empty()).then_some(m)
}

/// "0-3, 8" from [0, 1, 2, 3, 8]; "-" when unknown.
fn cpu_ranges(cpus: &[u32]) -> String {
    if cpus.is_empty() {
        return "-".into();
    }
    let mut ranges = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let mut j = i;
        while j + 1 < cpus.len() && cpus[j + 1] == cpus[j] + 1 {
            j += 1;
        }
        ranges.push(if j > i {
            format!("{}-{}", cpus[i], cpus[j])
        } else {
            cpus[i].to_string()
        });
        i = j + 1;
    }
    ranges.join(",")
}

fn headline(d: &DeviceModel) -> String {
    let queues = if d.queues > 0 {
        format!("{} hardware queues", d.queues)
    } else {
        format!("{} hardware queues seen", d.rows.len())
    };
    format!(
        "{queues}, {} used; busiest queue {:.2}x the mean",
        d.queues_used, d.imbalance_ios
    )
}

fn text(v: &Value, out: &mut dyn Write) -> std::io::Result<()> {
    let Some(m) = model(v) else { return Ok(()) };
    for d in &m.devices {
        writeln!(out, "\nhardware queues of {}: {}", d.name, headline(d))?;
        writeln!(
            out,
            "  {:>5}  {:<10} {:>12} {:>6}  {:>10} {:>6}  {:>8}  {:>12}  {:>12}",
            "queue", "cpus", "IOs", "IOs %", "bytes", "%", "mean", "device queue", "device mean"
        )?;
        for r in &d.rows {
            writeln!(
                out,
                "  {:>5}  {:<10} {:>12} {:>5.1}%  {:>10} {:>5.1}%  {:>8}  {:>12.1}  {:>12}",
                r.index,
                cpu_ranges(&r.cpus),
                tracer_common::coverage::thousands(r.ios),
                r.pct_ios,
                crate::report::format::bytes(r.bytes),
                r.pct_bytes,
                crate::analysis::sizes::human(crate::numeric::f64_to_u64_saturating(
                    r.mean_request_bytes
                )),
                r.device_queue_depth_mean,
                crate::report::format::fmt_us(r.device_latency_mean_us)
            )?;
        }
    }
    Ok(())
}

#[derive(askama::Template)]
#[template(path = "sections/hwqueues.html")]
struct Html<'a> {
    m: &'a Model,
}

fn html(v: &Value, h: &mut String) -> std::fmt::Result {
    let Some(m) = model(v) else { return Ok(()) };
    super::render_html(&Html { m: &m }, h)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracer_common::format::{DeviceInfo, HwQueue, QueueSettings};
    use tracer_common::op::Op;

    static NO_DEVICES: std::collections::BTreeMap<u32, crate::analysis::summary::DeviceStats> =
        std::collections::BTreeMap::new();

    fn names(name: &dyn Fn(u32) -> String) -> Names<'_> {
        Names {
            devices: &NO_DEVICES,
            diskstats: (&[], &[]),
            device: name,
            cgroup: &|_| None,
            file: &|_| None,
            arrays: &[],
        }
    }

    #[test]
    fn ios_are_counted_per_queue_with_the_cpus_the_header_maps() {
        let (nvme, lp) = (
            tracer_common::dev_join(259, 1),
            tracer_common::dev_join(7, 0),
        );
        let header = TraceHeader {
            devices: vec![DeviceInfo {
                name: "nvme0n1".into(),
                major: 259,
                minor: 1,
                logical_block_size: 512,
                queue: Some(QueueSettings {
                    hw_queues: (0..4)
                        .map(|i| HwQueue {
                            index: i,
                            cpus: vec![2 * u32::from(i), 2 * u32::from(i) + 1],
                        })
                        .collect(),
                    ..QueueSettings::default()
                }),
            }],
            ..TraceHeader::default()
        };
        let mut s = new(&Options::default(), &header);
        let rec = |dev, q, op, bytes, inflight| IoRecord {
            dev,
            op,
            bytes,
            dev_inflight: inflight,
            hw_queue: q,
            enter_ns: 1_000,
            issue_ns: 2_000,
            complete_ns: 52_000,
            ..IoRecord::default()
        };
        let mut rs = Vec::new();
        for i in 0..300u32 {
            // Alternating queues 0 and 2, as two submitters on CPUs 0 and 5 would.
            let q = if i % 2 == 0 { 0 } else { 2 };
            rs.push(rec(nvme, Some(q), Op::Read, 4096, 1 + i % 3));
        }
        for _ in 0..100 {
            rs.push(rec(nvme, Some(2), Op::Write, 131_072, 8));
        }
        rs.push(rec(nvme, None, Op::Read, 4096, 1));
        rs.push(rec(lp, Some(0), Op::Read, 4096, 1));
        s.chunk(&rs[..123]);
        s.chunk(&rs[123..]);
        let name = |d: u32| match tracer_common::dev_split(d) {
            (259, _) => "nvme0n1".to_string(),
            _ => "loop0".to_string(),
        };
        let v = s.finish(&names(&name));
        let all = Model::deserialize(&v).unwrap();
        assert_eq!(all.devices.len(), 2, "the loop device is in the JSON");
        let m = model(&v).unwrap();
        assert_eq!(
            m.devices.len(),
            1,
            "but not shown: one queue, nothing to spread"
        );
        let d = &m.devices[0];
        assert_eq!(
            (d.name.as_str(), d.queues, d.queues_used),
            ("nvme0n1", 4, 2)
        );
        assert_eq!(d.ios, 400, "the IO of unknown queue is left out");
        assert_eq!(
            d.imbalance_ios, 2.5,
            "250 of a mean 100 over all four queues"
        );
        let rows: Vec<(u16, u64, u64, f64)> = d
            .rows
            .iter()
            .map(|r| (r.index, r.ios, r.write_ios, r.pct_ios))
            .collect();
        assert_eq!(
            rows,
            [
                (0, 150, 0, 37.5),
                (1, 0, 0, 0.0),
                (2, 250, 100, 62.5),
                (3, 0, 0, 0.0)
            ]
        );
        assert_eq!(d.rows[2].cpus, [4, 5]);
        // Queue 0: in-flight 1, 3, 2, 1, 3, 2, ... over the even i.
        assert!((d.rows[0].device_queue_depth_mean - 2.0).abs() < 0.01);
        assert_eq!(d.rows[2].device_latency_mean_us, 50.0);
        assert_eq!(
            d.rows[2].mean_request_bytes,
            (150.0 * 4096.0 + 100.0 * 131_072.0) / 250.0
        );
        let mut t = Vec::new();
        text(&v, &mut t).unwrap();
        let t = String::from_utf8(t).unwrap();
        assert!(
            t.contains("hardware queues of nvme0n1: 4 hardware queues, 2 used; busiest queue 2.50x the mean"),
            "{t}"
        );
        assert!(t.contains("4-5"), "{t}");
        assert!(!t.contains("loop0"), "{t}");
        let mut h = String::new();
        html(&v, &mut h).unwrap();
        assert!(h.contains("<h3>Hardware queues of nvme0n1</h3>"), "{h}");
    }

    #[test]
    fn a_trace_without_queues_has_no_section() {
        let mut s = new(&Options::default(), &TraceHeader::default());
        s.chunk(&[IoRecord::default()]);
        assert!(s.finish(&names(&|_| String::new())).is_null());
    }

    #[test]
    fn cpu_lists_read_as_ranges() {
        assert_eq!(cpu_ranges(&[0, 1, 2, 3, 8, 10, 11]), "0-3,8,10-11");
        assert_eq!(cpu_ranges(&[5]), "5");
        assert_eq!(cpu_ranges(&[]), "-");
    }
}
