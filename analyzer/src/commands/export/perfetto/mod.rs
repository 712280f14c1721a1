//! `blkprof export --format perfetto`: Perfetto's native protobuf trace (a stream of
//! TracePackets with TrackEvents, names interned), for ui.perfetto.dev. docs/perfetto.md.
//!
//! Layout: per device a track whose lane child tracks (merged in the UI by
//! `sibling_merge_key`) hold one outer slice per IO, submission to completion, with a nested
//! slice issue to completion; each IO takes the lowest lane free at its submission, so slices on
//! a lane never overlap. Counter tracks per device carry the report's per-interval series
//! (`blkprof report --json`, computed by the report's own code) and the highest device
//! in-flight count per interval.
//!
//! The encoder is hand-written (`proto.rs`): the few messages and field numbers are those of
//! Perfetto's protos (protos/perfetto/trace/, Apache License 2.0, Copyright The Android Open
//! Source Project), checked against the compiled protos of the `perfetto` Python package
//! 0.59.1 that tests/tests/perfetto.rs parses the output with.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io::Write;
use std::path::Path;

use tracer_common::format::{IoRecord, TraceReader};
use tracer_common::op::{Op, StatGroup};

mod lanes;
mod proto;

use super::{ExportError, flag_names, varint};
use crate::analysis::series::Options;
use crate::analysis::summary::{Window, summarize};
use lanes::Lanes;
use proto::{
    CD_UNIT, CD_UNIT_NAME, COUNTER, DA_NAME_IID, DA_STRING_IID, DA_UINT, ID_ANNOTATION_NAMES,
    ID_EVENT_NAMES, ID_STRING_VALUES, INSTANT, Interner, MERGE_BY_KEY, P_INTERNED, P_SEQ_FLAGS,
    P_SEQ_ID, P_TIMESTAMP, P_TRACK_DESCRIPTOR, P_TRACK_EVENT, SEQ_CLEARED, SEQ_ID, SEQ_NEEDS,
    SLICE_BEGIN, SLICE_END, TD_COUNTER, TD_MERGE_BEHAVIOR, TD_MERGE_KEY, TD_NAME, TD_ORDER_RANK,
    TD_PARENT, TD_UUID, TE_DEBUG, TE_DOUBLE_COUNTER, TE_NAME_IID, TE_TRACK_UUID, TE_TYPE,
    TRACE_PACKET, UNIT_COUNT, field_bytes, field_double, field_msg, field_varint,
};

/// Which IOs to write; the counters always cover the whole trace (clipped to the time range).
#[derive(Clone, Debug, Default)]
pub struct PerfettoOptions {
    /// Only this device (name or MAJ:MIN).
    pub device: Option<String>,
    /// IOs submitted at or after this `CLOCK_MONOTONIC` time.
    pub from_ns: Option<TimePoint>,
    /// IOs submitted before this time.
    pub to_ns: Option<TimePoint>,
    /// IOs whose total latency (submission to completion) is at least this.
    pub min_latency_ns: u64,
    /// IOs of at least this many bytes.
    pub min_bytes: u64,
    /// The stress tool's output and the application's logs (`--stress`, `--app-log`): tracks
    /// of their own on the trace's clock.
    pub context: crate::analysis::summary::Context,
}

/// A point in the trace given on the command line: seconds from its start, or a wall time.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum TimePoint {
    /// ns after the trace's start (the header's `monotonic_base_ns`).
    SinceStart(u64),
    /// Unix ns.
    Wall(i64),
}

impl TimePoint {
    /// "90" or "1.5s" or "2m" (from the trace's start), or RFC 3339 ("2026-11-22T06:45:03Z").
    pub fn parse(s: &str) -> Result<TimePoint, String> {
        if let Ok(t) = s.parse::<jiff::Timestamp>() {
            return i64::try_from(t.as_nanosecond())
                .map(TimePoint::Wall)
                .map_err(|_| format!("{s:?}: out of range"));
        }
        if s.trim().parse::<f64>().is_ok_and(|v| v == 0.0) {
            return Ok(TimePoint::SinceStart(0));
        }
        tracer_common::units::parse_duration(s)
            .ok()
            .and_then(|d| u64::try_from(d.as_nanos()).ok())
            .map(TimePoint::SinceStart)
            .ok_or_else(|| {
                format!(
                    "{s:?}: expected a time from the trace's start (90, 1.5s, 2m) or an RFC 3339 time (2026-11-22T06:45:03Z)"
                )
            })
    }

    fn mono(self, base_ns: u64, wall_start_ns: i64) -> u64 {
        match self {
            TimePoint::SinceStart(d) => base_ns.saturating_add(d),
            TimePoint::Wall(w) => base_ns.saturating_add_signed(w.saturating_sub(wall_start_ns)),
        }
    }
}

/// What was written.
#[derive(Default, Debug, Clone, PartialEq, Eq)]
pub struct PerfettoStats {
    /// IOs written (one outer slice each).
    pub ios: u64,
    /// IOs left out by --device, the time range or the cuts.
    pub cut: u64,
    /// Records whose times cannot belong to the run (as the report leaves them out).
    pub damaged: u64,
    /// Lanes in all devices (the most IOs in flight at once, per device, summed).
    pub lanes: u64,
    /// Counter samples.
    pub counter_samples: u64,
    /// Slices and instants of the application's log (flushes, compactions, SSTable deletions)
    /// and counter samples of the stress tool.
    pub app_slices: u64,
    pub app_instants: u64,
    pub stress_samples: u64,
    /// Bytes written.
    pub bytes: u64,
}

/// IOs are held this long (by submission time, against the completions read) so that they
/// are laned in submission order; an IO slower than this still gets a lane where it does not
/// overlap anything, though maybe not the lowest free one.
const REORDER_NS: u64 = 2_000_000_000;

/// Debug annotation names, interned once (iid = position + 1).
const ANNOTATIONS: [&str; 9] = [
    "sector",
    "bytes",
    "flags",
    "pid",
    "comm",
    "os_inflight",
    "dev_inflight",
    "table",
    "detail",
];
const ARG_BYTES: u64 = 2;
const ARG_TABLE: u64 = 8;
const ARG_DETAIL: u64 = 9;
const INNER_NAME: &str = "on device";

/// Device and counter tracks are numbered from here; lanes from 1 (small varints per event).
const TRACK_UUID_BASE: u64 = 1 << 40;
/// The application's and the stress tool's tracks, from here.
const APP_UUID_BASE: u64 = 1 << 41;

/// `R 4K`, `W 512K`, `F` (a flush of no data), `F absorbed` (an empty flush the flush
/// machinery absorbed: never reached the device; the report counts it apart).
fn slice_name(rec: &IoRecord) -> String {
    let op = match rec.op {
        Op::Read => "R",
        Op::Write => "W",
        Op::Flush if rec.stat_group() != StatGroup::Flush => return "F absorbed".into(),
        Op::Flush => "F",
        Op::Discard => "D",
        op => op.name(),
    };
    if rec.bytes == 0 {
        return op.into();
    }
    let h = crate::analysis::sizes::human(u64::from(rec.bytes));
    let size = h
        .strip_suffix("B")
        .filter(|s| s.ends_with(['K', 'M', 'G']))
        .unwrap_or(&h);
    format!("{op} {size}")
}

/// An IO waiting to be laned: (submission, arrival order, record, device index, comm).
type Pending = Reverse<(u64, u64, IoKey)>;

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct IoKey {
    complete_ns: u64,
    issue_ns: u64,
    sector: u64,
    bytes: u32,
    pid: u32,
    task: u32,
    dev_inflight: u32,
    os_inflight: u32,
    flags: u16,
    op: u8,
    dev_index: usize,
}

struct Writer<'a> {
    out: &'a mut dyn Write,
    packet: Vec<u8>,
    msg: Vec<u8>,
    inner: Vec<u8>,
    interned: Vec<u8>,
    names: Interner,
    strings: Interner,
    next_lane_uuid: u64,
    bytes: u64,
}

impl Writer<'_> {
    fn emit(&mut self) -> std::io::Result<()> {
        let mut head = Vec::with_capacity(11);
        varint(u64::from(TRACE_PACKET) << 3 | 2, &mut head);
        varint(self.packet.len() as u64, &mut head);
        self.out.write_all(&head)?;
        self.out.write_all(&self.packet)?;
        self.bytes += (head.len() + self.packet.len()) as u64;
        self.packet.clear();
        Ok(())
    }

    fn track(
        &mut self,
        uuid: u64,
        parent: Option<u64>,
        name: &str,
        rank: Option<i64>,
        merge_key: Option<&str>,
        counter_unit: Option<&str>,
    ) -> std::io::Result<()> {
        let p = &mut self.packet;
        field_msg(p, P_TRACK_DESCRIPTOR, &mut self.msg, |m| {
            field_varint(m, TD_UUID, uuid);
            field_bytes(m, TD_NAME, name.as_bytes());
            if let Some(parent) = parent {
                field_varint(m, TD_PARENT, parent);
            }
            if let Some(rank) = rank {
                // Protocol Buffers encode a negative int32 as its 64-bit two's complement.
                field_varint(m, TD_ORDER_RANK, rank.cast_unsigned());
            }
            if let Some(key) = merge_key {
                field_varint(m, TD_MERGE_BEHAVIOR, MERGE_BY_KEY);
                field_bytes(m, TD_MERGE_KEY, key.as_bytes());
            }
            if let Some(unit) = counter_unit {
                field_msg(m, TD_COUNTER, &mut self.inner, |c| {
                    field_varint(c, CD_UNIT, UNIT_COUNT);
                    field_bytes(c, CD_UNIT_NAME, unit.as_bytes());
                });
            }
        });
        self.emit()
    }

    /// The first packet: clears the sequence's state and interns the annotation names.
    fn start(&mut self) -> std::io::Result<()> {
        let p = &mut self.packet;
        field_varint(p, P_SEQ_ID, SEQ_ID);
        field_varint(p, P_SEQ_FLAGS, SEQ_CLEARED);
        field_msg(p, P_INTERNED, &mut self.msg, |m| {
            for (i, n) in (1u64..).zip(ANNOTATIONS) {
                field_msg(m, ID_ANNOTATION_NAMES, &mut self.inner, |e| {
                    field_varint(e, 1, i);
                    field_bytes(e, 2, n.as_bytes());
                });
            }
        });
        self.emit()
    }

    /// The four events of one IO on its lane: begin (submission), begin (issue), end, end.
    fn io(
        &mut self,
        lane_uuid: u64,
        enter_ns: u64,
        k: &IoKey,
        name: &str,
        comm: &str,
    ) -> std::io::Result<()> {
        let rec_flags = k.flags;
        let (name_iid, new_name) = self.names.get(name);
        let (inner_iid, new_inner) = self.names.get(INNER_NAME);
        let flags = flag_names(rec_flags);
        let (comm_iid, new_comm) = self.strings.get(comm);
        let (flags_iid, new_flags) = if flags.is_empty() {
            (0, false)
        } else {
            self.strings.get(&flags)
        };
        self.interned.clear();
        let intern = |b: &mut Vec<u8>, scratch: &mut Vec<u8>, field: u32, id: u64, s: &str| {
            field_msg(b, field, scratch, |e| {
                field_varint(e, 1, id);
                field_bytes(e, 2, s.as_bytes());
            });
        };
        if new_name {
            intern(
                &mut self.interned,
                &mut self.inner,
                ID_EVENT_NAMES,
                name_iid,
                name,
            );
        }
        if new_inner {
            intern(
                &mut self.interned,
                &mut self.inner,
                ID_EVENT_NAMES,
                inner_iid,
                INNER_NAME,
            );
        }
        if new_comm {
            intern(
                &mut self.interned,
                &mut self.inner,
                ID_STRING_VALUES,
                comm_iid,
                comm,
            );
        }
        if new_flags {
            intern(
                &mut self.interned,
                &mut self.inner,
                ID_STRING_VALUES,
                flags_iid,
                &flags,
            );
        }
        // Outer begin, with the IO's figures.
        let p = &mut self.packet;
        field_varint(p, P_TIMESTAMP, enter_ns);
        field_varint(p, P_SEQ_ID, SEQ_ID);
        field_varint(p, P_SEQ_FLAGS, SEQ_NEEDS);
        if !self.interned.is_empty() {
            field_bytes(p, P_INTERNED, &self.interned);
        }
        let uint_args: [(u64, u64); 6] = [
            (1, k.sector),
            (2, u64::from(k.bytes)),
            (4, u64::from(k.pid)),
            (6, u64::from(k.os_inflight)),
            (7, u64::from(k.dev_inflight)),
            (0, 0),
        ];
        field_msg(p, P_TRACK_EVENT, &mut self.msg, |m| {
            field_varint(m, TE_TYPE, SLICE_BEGIN);
            field_varint(m, TE_TRACK_UUID, lane_uuid);
            field_varint(m, TE_NAME_IID, name_iid);
            let mut arg = |m: &mut Vec<u8>, name: u64, field: u32, v: u64| {
                field_msg(m, TE_DEBUG, &mut self.inner, |a| {
                    field_varint(a, DA_NAME_IID, name);
                    field_varint(a, field, v);
                });
            };
            for &(n, v) in &uint_args[..3] {
                arg(m, n, DA_UINT, v);
            }
            arg(m, 5, DA_STRING_IID, comm_iid);
            if flags_iid != 0 {
                arg(m, 3, DA_STRING_IID, flags_iid);
            }
            for &(n, v) in &uint_args[3..5] {
                arg(m, n, DA_UINT, v);
            }
        });
        self.emit()?;
        if k.issue_ns != 0 {
            let p = &mut self.packet;
            field_varint(p, P_TIMESTAMP, k.issue_ns.max(enter_ns));
            field_varint(p, P_SEQ_ID, SEQ_ID);
            field_varint(p, P_SEQ_FLAGS, SEQ_NEEDS);
            field_msg(p, P_TRACK_EVENT, &mut self.msg, |m| {
                field_varint(m, TE_TYPE, SLICE_BEGIN);
                field_varint(m, TE_TRACK_UUID, lane_uuid);
                field_varint(m, TE_NAME_IID, inner_iid);
            });
            self.emit()?;
        }
        for _ in 0..=u32::from(k.issue_ns != 0) {
            let p = &mut self.packet;
            field_varint(p, P_TIMESTAMP, k.complete_ns);
            field_varint(p, P_SEQ_ID, SEQ_ID);
            field_msg(p, P_TRACK_EVENT, &mut self.msg, |m| {
                field_varint(m, TE_TYPE, SLICE_END);
                field_varint(m, TE_TRACK_UUID, lane_uuid);
            });
            self.emit()?;
        }
        Ok(())
    }

    /// An interned event name or string value, added to `self.interned` when new.
    fn intern(&mut self, string_value: bool, s: &str) -> u64 {
        let (field, (id, new)) = if string_value {
            (ID_STRING_VALUES, self.strings.get(s))
        } else {
            (ID_EVENT_NAMES, self.names.get(s))
        };
        if new {
            field_msg(&mut self.interned, field, &mut self.inner, |e| {
                field_varint(e, 1, id);
                field_bytes(e, 2, s.as_bytes());
            });
        }
        id
    }

    /// A slice (or, without an end, an instant) of the application's on `track`, with
    /// unsigned and string arguments (annotation name iids).
    fn app_event(
        &mut self,
        track: u64,
        start: u64,
        end: Option<u64>,
        name: &str,
        uints: &[(u64, u64)],
        strs: &[(u64, &str)],
    ) -> std::io::Result<()> {
        self.interned.clear();
        let name_iid = self.intern(false, name);
        let str_iids: Vec<(u64, u64)> = strs
            .iter()
            .map(|&(n, v)| (n, self.intern(true, v)))
            .collect();
        let p = &mut self.packet;
        field_varint(p, P_TIMESTAMP, start);
        field_varint(p, P_SEQ_ID, SEQ_ID);
        field_varint(p, P_SEQ_FLAGS, SEQ_NEEDS);
        if !self.interned.is_empty() {
            field_bytes(p, P_INTERNED, &self.interned);
        }
        field_msg(p, P_TRACK_EVENT, &mut self.msg, |m| {
            field_varint(
                m,
                TE_TYPE,
                if end.is_some() { SLICE_BEGIN } else { INSTANT },
            );
            field_varint(m, TE_TRACK_UUID, track);
            field_varint(m, TE_NAME_IID, name_iid);
            for &(n, v) in uints {
                field_msg(m, TE_DEBUG, &mut self.inner, |a| {
                    field_varint(a, DA_NAME_IID, n);
                    field_varint(a, DA_UINT, v);
                });
            }
            for &(n, v) in &str_iids {
                field_msg(m, TE_DEBUG, &mut self.inner, |a| {
                    field_varint(a, DA_NAME_IID, n);
                    field_varint(a, DA_STRING_IID, v);
                });
            }
        });
        self.emit()?;
        if let Some(end) = end {
            let p = &mut self.packet;
            field_varint(p, P_TIMESTAMP, end);
            field_varint(p, P_SEQ_ID, SEQ_ID);
            field_msg(p, P_TRACK_EVENT, &mut self.msg, |m| {
                field_varint(m, TE_TYPE, SLICE_END);
                field_varint(m, TE_TRACK_UUID, track);
            });
            self.emit()?;
        }
        Ok(())
    }

    fn counter(&mut self, uuid: u64, ts: u64, v: f64) -> std::io::Result<()> {
        let p = &mut self.packet;
        field_varint(p, P_TIMESTAMP, ts);
        field_varint(p, P_SEQ_ID, SEQ_ID);
        field_msg(p, P_TRACK_EVENT, &mut self.msg, |m| {
            field_varint(m, TE_TYPE, COUNTER);
            field_varint(m, TE_TRACK_UUID, uuid);
            field_double(m, TE_DOUBLE_COUNTER, v);
        });
        self.emit()
    }
}

struct Device {
    name: String,
    dev: u32,
    uuid: u64,
    lanes: Lanes,
    /// Highest device in-flight count sampled at an issue, per report interval.
    dev_inflight_max: Vec<u32>,
}

pub fn export_perfetto(
    path: &Path,
    opts: &PerfettoOptions,
    out: &mut dyn Write,
) -> Result<PerfettoStats, ExportError> {
    let series_opts = Options::default();
    // The counters are the report's own series (same intervals, same definitions).
    let report = summarize(path, &series_opts)?.to_json();
    let mut r = TraceReader::open(path)?;
    let header = r.header().clone();
    let file_bytes = std::fs::metadata(path).map_or(u64::MAX, |m| m.len());
    let scan = r.scan()?;
    let window = Window::of(&header, &scan, &series_opts, file_bytes);
    // The run, for the application's events: to the trailer's end, or the last completion.
    let run_end = scan
        .trailer
        .as_ref()
        .map(|t| t.monotonic_end_ns)
        .filter(|&e| e >= header.monotonic_base_ns);
    let t0 = header.monotonic_base_ns;
    let interval_ns = window.opts.interval_ns;
    let only = match &opts.device {
        Some(name) => Some(super::find_device(&header.devices, name)?.dev()),
        None => None,
    };
    let from = opts
        .from_ns
        .map_or(0, |t| t.mono(t0, header.wall_clock_start_ns));
    let to = opts
        .to_ns
        .map_or(u64::MAX, |t| t.mono(t0, header.wall_clock_start_ns));
    let mut w = Writer {
        out,
        packet: Vec::new(),
        msg: Vec::new(),
        inner: Vec::new(),
        interned: Vec::new(),
        names: Interner::default(),
        strings: Interner::default(),
        next_lane_uuid: 1,
        bytes: 0,
    };
    let mut st = PerfettoStats::default();
    w.start()?;
    let mut devs: Vec<Device> = Vec::new();
    let mut heap: BinaryHeap<Pending> = BinaryHeap::new();
    let mut seq = 0u64;
    let mut comms: Vec<String> = Vec::new();
    let mut buf = Vec::new();
    let place = |w: &mut Writer, devs: &mut Vec<Device>, comms: &[String], enter: u64, k: IoKey| {
        let d = &mut devs[k.dev_index];
        let (lane, new) = d.lanes.take(enter, k.complete_ns);
        if new {
            let uuid = w.next_lane_uuid;
            w.next_lane_uuid += 1;
            d.lanes.uuid.push(uuid);
            let key = format!("{} IOs", d.name);
            w.track(
                uuid,
                Some(d.uuid),
                &d.name,
                Some(i64::from(lane)),
                Some(&key),
                None,
            )?;
        }
        let uuid = d.lanes.uuid[lane as usize];
        let rec = IoRecord {
            complete_ns: k.complete_ns,
            bytes: k.bytes,
            flags: k.flags,
            op: Op::from_code(k.op),
            ..Default::default()
        };
        w.io(uuid, enter, &k, &slice_name(&rec), &comms[k.task as usize])
    };
    while r.next_chunk(&mut buf)? {
        comms.extend(r.tasks()[comms.len()..].iter().map(|t| t.comm.clone()));
        for rec in &buf {
            if !window.holds(rec) || rec.enter_ns > rec.complete_ns {
                st.damaged += 1;
                continue;
            }
            if only.is_some_and(|d| d != rec.dev) {
                st.cut += 1;
                continue;
            }
            let di = device_index(&mut w, &mut devs, &r, rec.dev)?;
            if rec.issue_ns != 0 && rec.issue_ns >= t0 {
                let i = crate::numeric::u64_to_usize_saturating((rec.issue_ns - t0) / interval_ns);
                let v = &mut devs[di].dev_inflight_max;
                if v.len() <= i {
                    v.resize(i + 1, 0);
                }
                v[i] = v[i].max(rec.dev_inflight);
            }
            if rec.enter_ns < from
                || rec.enter_ns >= to
                || rec.total_ns() < opts.min_latency_ns
                || u64::from(rec.bytes) < opts.min_bytes
            {
                st.cut += 1;
                continue;
            }
            let k = IoKey {
                complete_ns: rec.complete_ns,
                issue_ns: rec.issue_ns,
                sector: rec.sector,
                bytes: rec.bytes,
                pid: rec.pid,
                task: rec.task,
                dev_inflight: rec.dev_inflight,
                os_inflight: rec.os_inflight,
                flags: rec.flags,
                op: rec.op as u8,
                dev_index: di,
            };
            heap.push(Reverse((rec.enter_ns, seq, k)));
            seq += 1;
            while let Some(Reverse(top)) = heap.peek() {
                if top.0.saturating_add(REORDER_NS) > rec.complete_ns {
                    break;
                }
                let Some(Reverse((enter, _, k))) = heap.pop() else {
                    break;
                };
                place(&mut w, &mut devs, &comms, enter, k)?;
                st.ios += 1;
            }
        }
    }
    while let Some(Reverse((enter, _, k))) = heap.pop() {
        place(&mut w, &mut devs, &comms, enter, k)?;
        st.ios += 1;
    }
    counter_tracks(&mut w, &devs, &report, (t0, from, to), &mut st)?;
    let last_completion = devs
        .iter()
        .flat_map(|d| d.lanes.end_ns.iter().copied())
        .max()
        .unwrap_or(t0);
    let clock = Clock {
        t0,
        wall0: header.wall_clock_start_ns,
        from: from.max(t0),
        to: to.min(run_end.unwrap_or(last_completion)),
    };
    app_tracks(&mut w, &opts.context, &clock, &mut st)?;
    w.out.flush()?;
    st.bytes = w.bytes;
    Ok(st)
}

/// The index in `devs` of device `dev`, its track written when first met.
fn device_index(
    w: &mut Writer,
    devs: &mut Vec<Device>,
    r: &TraceReader,
    dev: u32,
) -> std::io::Result<usize> {
    if let Some(i) = devs.iter().position(|d| d.dev == dev) {
        return Ok(i);
    }
    let name = super::dev_name(r, dev);
    let uuid = TRACK_UUID_BASE + 100 * devs.len() as u64;
    w.track(uuid, None, &name, None, None, None)?;
    devs.push(Device {
        name,
        dev,
        uuid,
        lanes: Lanes::default(),
        dev_inflight_max: Vec::new(),
    });
    Ok(devs.len() - 1)
}

/// Counter tracks of the report's series, per device, each sample at its interval's start;
/// those of the intervals that reach into `from..to` (the trace's start `t0`).
fn counter_tracks(
    w: &mut Writer,
    devs: &[Device],
    report: &crate::report::model::JsonReport,
    (t0, from, to): (u64, u64, u64),
    st: &mut PerfettoStats,
) -> std::io::Result<()> {
    for d in devs {
        st.lanes += d.lanes.end_ns.len() as u64;
        let (major, minor) = tracer_common::dev_split(d.dev);
        let Some(j) = report
            .devices
            .iter()
            .find(|j| j.major == major && j.minor == minor)
        else {
            continue;
        };
        let s = &j.series;
        let dev_max: Vec<f64> = d.dev_inflight_max.iter().map(|&v| f64::from(v)).collect();
        let os_max: Vec<f64> = s.queue_depth_max.iter().map(|&v| f64::from(v)).collect();
        let counters: [(&str, &str, &[f64]); 12] = [
            ("read IOPS", "IO/s", &s.read_iops),
            ("write IOPS", "IO/s", &s.write_iops),
            ("flush IOPS", "IO/s", &s.flush_iops),
            ("read MB/s", "MB/s", &s.read_mb_per_s),
            ("write MB/s", "MB/s", &s.write_mb_per_s),
            ("discard MB/s", "MB/s", &s.discard_mb_per_s),
            ("read p99 us", "us", &s.read_p99_us),
            ("write p99 us", "us", &s.write_p99_us),
            ("OS in-flight mean", "IOs", &s.queue_depth_mean),
            ("OS in-flight max", "IOs", &os_max),
            ("device in-flight max", "IOs", &dev_max),
            ("", "", &[]),
        ];
        let interval_ns = crate::numeric::f64_to_u64_saturating((s.interval_s * 1e9).round());
        // Counter i ranks i - 20: above the lanes, in this order.
        for ((i, rank), (name, unit, values)) in (1u64..).zip(-19i64..).zip(counters) {
            if name.is_empty() || values.iter().all(|&v| v == 0.0) {
                continue;
            }
            let uuid = d.uuid + i;
            w.track(
                uuid,
                Some(d.uuid),
                &format!("{} {name}", d.name),
                Some(rank),
                None,
                Some(unit),
            )?;
            for (k, &v) in (0u64..).zip(values) {
                let ts = t0 + k * interval_ns;
                if ts + interval_ns <= from || ts >= to {
                    continue;
                }
                w.counter(uuid, ts, v)?;
                st.counter_samples += 1;
            }
        }
    }
    Ok(())
}

/// From the logs' wall clock to the trace's (`CLOCK_MONOTONIC`), and the span events are kept
/// in: those that start in it (the trace's run, from the header's start to the trailer's end
/// or, in a file cut short, the last completion; cut by --from/--to).
struct Clock {
    t0: u64,
    wall0: i64,
    from: u64,
    to: u64,
}

impl Clock {
    /// The trace's time of a wall-clock time, if it starts within the span.
    fn at(&self, wall_ns: i64) -> Option<u64> {
        let d = wall_ns.checked_sub(self.wall0)?;
        let t = self.t0.checked_add_signed(d)?;
        (t >= self.from && t < self.to).then_some(t)
    }

    /// The trace's time of an end (not clipped, only kept from going before `start`).
    fn end(&self, start: u64, wall_ns: i64) -> u64 {
        wall_ns
            .checked_sub(self.wall0)
            .and_then(|d| self.t0.checked_add_signed(d))
            .unwrap_or(start)
            .max(start)
    }
}

/// The application's log and the stress tool on tracks of their own: per log a track with
/// lanes of memtable flushes (named by table, with the bytes flushed) and of compactions
/// (named by id), and SSTable deletions as instants; per stress output, counters of its
/// throughput and per-op latency from its status lines.
fn app_tracks(
    w: &mut Writer,
    ctx: &crate::analysis::summary::Context,
    clock: &Clock,
    st: &mut PerfettoStats,
) -> std::io::Result<()> {
    let mut next_uuid = APP_UUID_BASE;
    for log in &ctx.logs {
        log_tracks(w, log, clock, &mut next_uuid, st)?;
    }
    for run in &ctx.stress {
        stress_tracks(w, run, clock, &mut next_uuid, st)?;
    }
    Ok(())
}

/// One application log's tracks (`app_tracks`), their uuids counted on from `next_uuid`.
fn log_tracks(
    w: &mut Writer,
    log: &crate::inputs::stress::AppLog,
    clock: &Clock,
    next_uuid: &mut u64,
    st: &mut PerfettoStats,
) -> std::io::Result<()> {
    // A log's spans: (start, end, name, uint args, string args).
    type Span<'a> = (u64, u64, String, Vec<(u64, u64)>, Vec<(u64, &'a str)>);
    let mut uuid = || {
        *next_uuid += 1;
        *next_uuid
    };
    let file = Path::new(&log.path)
        .file_name()
        .map_or(log.path.clone(), |f| f.to_string_lossy().into_owned());
    let root = uuid();
    w.track(
        root,
        None,
        &format!("Cassandra ({file})"),
        Some(-100),
        None,
        None,
    )?;
    let flushes: Vec<Span> = log
        .flushes
        .iter()
        .filter_map(|f| {
            let t = clock.at(f.start_ns)?;
            let args = f.bytes.map(|b| (ARG_BYTES, b)).into_iter().collect();
            Some((
                t,
                clock.end(t, f.end_ns),
                format!("flush {}", f.table),
                args,
                vec![(ARG_TABLE, f.table.as_str())],
            ))
        })
        .collect();
    let compactions: Vec<Span> = log
        .compactions
        .iter()
        .filter_map(|c| {
            let t = clock.at(c.start_ns)?;
            Some((
                t,
                clock.end(t, c.end_ns),
                format!("compaction {}", c.id),
                Vec::new(),
                Vec::new(),
            ))
        })
        .collect();
    for (name, mut spans) in [("memtable flushes", flushes), ("compactions", compactions)] {
        if spans.is_empty() {
            continue;
        }
        spans.sort_by_key(|s| (s.0, s.1));
        let parent = uuid();
        w.track(parent, Some(root), name, None, None, None)?;
        let mut lanes = Lanes::default();
        let key = format!("{file} {name}");
        for (start, end, n, uints, strs) in &spans {
            let (lane, new) = lanes.take(*start, *end);
            if new {
                let u = uuid();
                lanes.uuid.push(u);
                w.track(
                    u,
                    Some(parent),
                    name,
                    Some(i64::from(lane)),
                    Some(&key),
                    None,
                )?;
            }
            w.app_event(
                lanes.uuid[lane as usize],
                *start,
                Some(*end),
                n,
                uints,
                strs,
            )?;
            st.app_slices += 1;
        }
    }
    let deleted: Vec<(u64, &crate::inputs::stress::Marker)> = log
        .markers
        .iter()
        .filter(|m| m.kind == "sstable-deleted")
        .filter_map(|m| Some((clock.at(m.time_ns)?, m)))
        .collect();
    if !deleted.is_empty() {
        let t = uuid();
        w.track(t, Some(root), "SSTables deleted", None, None, None)?;
        for (ts, m) in deleted {
            let table = m.table.as_deref().unwrap_or("");
            w.app_event(
                t,
                ts,
                None,
                "SSTable deleted",
                &[],
                &[(ARG_TABLE, table), (ARG_DETAIL, m.detail.as_str())],
            )?;
            st.app_instants += 1;
        }
    }
    Ok(())
}

/// One stress tool output's counter tracks (`app_tracks`), their uuids counted on from
/// `next_uuid`.
fn stress_tracks(
    w: &mut Writer,
    run: &crate::inputs::stress::StressRun,
    clock: &Clock,
    next_uuid: &mut u64,
    st: &mut PerfettoStats,
) -> std::io::Result<()> {
    // A run's throughput, then each op's latencies in the order first met: (name, unit, samples).
    type Counter<'a> = (String, &'a str, Vec<(u64, f64)>);
    let mut uuid = || {
        *next_uuid += 1;
        *next_uuid
    };
    let points: Vec<(u64, &crate::inputs::stress::StatusPoint)> = run
        .status
        .iter()
        .filter_map(|p| Some((clock.at(p.time_ns?)?, p)))
        .collect();
    if points.is_empty() {
        return Ok(());
    }
    let file = Path::new(&run.path)
        .file_name()
        .map_or(run.path.clone(), |f| f.to_string_lossy().into_owned());
    let root = uuid();
    w.track(
        root,
        None,
        &format!("{} ({file})", run.tool),
        Some(-99),
        None,
        None,
    )?;
    let mut series: Vec<Counter> = vec![(
        "ops/s".into(),
        "ops/s",
        points
            .iter()
            .filter_map(|(t, p)| Some((*t, p.ops_per_s?)))
            .collect(),
    )];
    for (t, p) in &points {
        for l in &p.latencies {
            for (what, v) in [("avg", l.avg_us), ("p99", l.p99_us)] {
                let Some(v) = v else { continue };
                let name = format!("{} {what} us", l.op);
                match series.iter_mut().find(|s| s.0 == name) {
                    Some(s) => s.2.push((*t, v)),
                    None => series.push((name, "us", vec![(*t, v)])),
                }
            }
        }
    }
    for (name, unit, samples) in series {
        if samples.is_empty() {
            continue;
        }
        let u = uuid();
        w.track(
            u,
            Some(root),
            &format!("{} {name}", run.tool),
            None,
            None,
            Some(unit),
        )?;
        for (t, v) in samples {
            w.counter(u, t, v)?;
            st.stress_samples += 1;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lanes_never_overlap_and_the_lowest_free_lane_is_taken() {
        let mut l = Lanes::default();
        assert_eq!(l.take(0, 10), (0, true));
        assert_eq!(l.take(5, 8), (1, true));
        // Lane 1 ended at 8, lane 0 at 10: at 9 only lane 1 is free.
        assert_eq!(l.take(9, 20), (1, false));
        assert_eq!(l.take(11, 12), (0, false));
        // An end at the same instant as a start does not free the lane.
        assert_eq!(l.take(12, 13), (2, true));
        // A late IO (submitted before the last one seen) goes where nothing overlaps it.
        assert_eq!(l.take(10, 11), (3, true));
        // At 14 lanes 0 (ended 12), 2 (13) and 3 (11) are free: the lowest.
        assert_eq!(l.take(14, 15), (0, false));
    }

    #[test]
    fn slice_names_read_as_op_and_size() {
        let rec = |op, bytes| IoRecord {
            op,
            bytes,
            ..Default::default()
        };
        assert_eq!(slice_name(&rec(Op::Read, 4096)), "R 4K");
        assert_eq!(slice_name(&rec(Op::Write, 512 << 10)), "W 512K");
        assert_eq!(slice_name(&rec(Op::Write, 512)), "W 512B");
        assert_eq!(slice_name(&rec(Op::Flush, 0)), "F absorbed");
    }

    /// The cuts keep exactly the IOs they say: submitted in [from, to), slow enough, big
    /// enough; every one of them written once.
    #[test]
    fn the_time_range_and_the_cuts_keep_exactly_the_ios_they_name() {
        use crate::inputs::synth::{BASE_NS, cassandra_like, write_trace};
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.blkp");
        let mut ios = cassandra_like(6, 500, &[(2.0, 1.0, 400.0)]);
        write_trace(&p, &mut ios).unwrap();
        let run = |o: PerfettoOptions| {
            let mut out = Vec::new();
            let st = export_perfetto(&p, &o, &mut out).unwrap();
            assert_eq!(st.bytes, out.len() as u64);
            assert_eq!(st.ios + st.cut, ios.len() as u64);
            st.ios
        };
        assert_eq!(run(PerfettoOptions::default()), ios.len() as u64);
        let count = |f: &dyn Fn(&crate::inputs::synth::Io) -> bool| {
            ios.iter().filter(|i| f(i)).count() as u64
        };
        let (from, to) = (BASE_NS + 1_500_000_000, BASE_NS + 4_000_000_000);
        assert_eq!(
            run(PerfettoOptions {
                from_ns: Some(TimePoint::SinceStart(1_500_000_000)),
                to_ns: Some(TimePoint::SinceStart(4_000_000_000)),
                ..Default::default()
            }),
            count(&|i| i.enter_ns >= from && i.enter_ns < to)
        );
        let slow = run(PerfettoOptions {
            min_latency_ns: 1_000_000,
            ..Default::default()
        });
        assert_eq!(slow, count(&|i| i.complete_ns - i.enter_ns >= 1_000_000));
        assert!(slow > 0 && slow < ios.len() as u64);
        assert_eq!(
            run(PerfettoOptions {
                min_bytes: 64 << 10,
                ..Default::default()
            }),
            count(&|i| u64::from(i.bytes) >= 64 << 10)
        );
    }

    #[test]
    fn time_points_parse_as_offsets_or_wall_times() {
        assert_eq!(
            TimePoint::parse("90"),
            Ok(TimePoint::SinceStart(90_000_000_000))
        );
        assert_eq!(TimePoint::parse("0"), Ok(TimePoint::SinceStart(0)));
        assert_eq!(
            TimePoint::parse("1.5s"),
            Ok(TimePoint::SinceStart(1_500_000_000))
        );
        assert_eq!(
            TimePoint::parse("1970-01-01T00:00:01Z"),
            Ok(TimePoint::Wall(1_000_000_000))
        );
        assert!(TimePoint::parse("soon").unwrap_err().contains("RFC 3339"));
    }
}
