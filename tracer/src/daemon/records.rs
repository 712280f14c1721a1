//! What becomes of each record: the run's tallies, the filters, the live statistics, and the
//! open file (with the names of its devices, cgroups and files before their first record).

use tracer_common::format::{CgroupInfo, DeviceInfo, IoRecord};
use tracer_common::op::{StatGroup, flags};
use tracer_common::{
    EV_NEVER_ISSUED, EV_NOT_ACCOUNTED, EV_OUTSIDE_CUT, EV_STARTED_BEFORE_ATTACH, IoEvent,
    KIND_FLUSH_RQ, dev_split,
};

use super::Run;
use crate::cgroups::within;
use crate::devices;

pub(super) struct Filter {
    pub(super) pids: Vec<u32>,
    pub(super) comms: Vec<[u8; 16]>,
    pub(super) ops: Vec<tracer_common::op::Op>,
}

impl Filter {
    fn keep(&self, r: &IoRecord, comm: &[u8; 16]) -> bool {
        (self.pids.is_empty() || self.pids.contains(&r.pid))
            && (self.comms.is_empty() || self.comms.contains(comm))
            && (self.ops.is_empty() || self.ops.contains(&r.op))
    }
}

impl Run {
    pub(super) fn handle_event(&mut self, ev: IoEvent) {
        let (op, mut fl) = self.probe.decoder.decode(ev.cmd_flags);
        if ev.kind == KIND_FLUSH_RQ {
            fl |= flags::FLUSH_RQ;
        }
        if ev.flags & EV_NEVER_ISSUED != 0 {
            fl |= flags::NEVER_ISSUED;
        }
        if ev.flags & EV_STARTED_BEFORE_ATTACH != 0 {
            fl |= flags::STARTED_BEFORE;
        }
        if ev.flags & EV_NOT_ACCOUNTED != 0 {
            fl |= flags::NOT_ACCOUNTED;
        }
        if ev.flags & EV_OUTSIDE_CUT != 0 {
            // Not part of the run: tally what completed after the end's instant against the
            // kernel's counters read then.
            match &mut self.end_cut {
                Some(c) if ev.complete_ns > c.at_ns => {
                    let g = StatGroup::of(op, fl) as usize;
                    c.tally(ev.dev, g, u64::from(ev.bytes), ev.complete_ns);
                    if ev.enter_ns <= c.at_ns {
                        c.in_flight += 1;
                    }
                }
                _ => self.before_start += 1,
            }
            return;
        }
        // Tallied on the cut that starts the open file and on a rotation's in progress (each
        // counts only what completed between its instant and its diskstats read).
        let g = StatGroup::of(op, fl) as usize;
        for c in [&mut self.file_start_cut, &mut self.end_cut]
            .into_iter()
            .flatten()
        {
            c.tally(ev.dev, g, u64::from(ev.bytes), ev.complete_ns);
        }
        let r = IoRecord {
            complete_ns: ev.complete_ns,
            enter_ns: ev.enter_ns,
            issue_ns: ev.issue_ns,
            sector: ev.sector,
            bytes: ev.bytes,
            pid: ev.pid,
            task: 0,
            dev_inflight: ev.dev_inflight,
            os_inflight: ev.os_inflight,
            error: ev.error,
            dev: ev.dev,
            requeues: ev.requeues,
            flags: fl,
            op,
            cgroup: ev.cgroup,
            owner_cgroup: ev.owner_cgroup,
            file_dev: ev.file_dev,
            file_ino: ev.file_ino,
            file_id: 0,
            hw_queue: ev.hw_queue.checked_sub(1),
        };
        self.received_total += 1;
        // Per device and diskstats group; devices are few, and consecutive records mostly
        // share one, so a cached index beats hashing on this path.
        if self
            .received
            .get(self.last_dev)
            .is_none_or(|(d, _)| *d != r.dev)
        {
            self.last_dev = if let Some(i) = self.received.iter().position(|(d, _)| *d == r.dev) {
                i
            } else {
                self.new_device(r.dev);
                self.received.push((r.dev, [(0, 0); 4]));
                self.received.len() - 1
            };
        }
        let e = &mut self.received[self.last_dev].1[r.stat_group() as usize];
        e.0 += 1;
        e.1 += u64::from(r.bytes);
        let next_file = self.hold_after.is_some_and(|t| r.complete_ns > t);
        if !self.filter.keep(&r, &ev.comm)
            || (!self.cfg.cgroups.is_empty()
                && !self.cgroup_kept(r.cgroup)
                && (r.owner_cgroup == 0 || !self.cgroup_kept(r.owner_cgroup)))
        {
            self.filtered_out += 1;
            if next_file {
                self.held_filtered_out += 1;
            } else {
                self.filtered_out_file += 1;
            }
            return;
        }
        self.stats.record(&r);
        if let Some(m) = &mut self.metrics {
            m.record(&r);
        }
        if next_file {
            self.held.push((r, ev.comm));
        } else {
            self.write(&r, &ev.comm);
        }
    }

    pub(super) fn write(&mut self, r: &IoRecord, comm: &[u8; 16]) {
        if self.last_cgroups != Some((r.cgroup, r.owner_cgroup)) {
            self.name_cgroups(r.cgroup, r.owner_cgroup);
        }
        if let Some(f) = &mut self.file_names
            && f.must_name(r.file_dev, r.file_ino)
        {
            self.name_file(r.file_dev, r.file_ino);
        }
        if let Some(out) = &mut self.output
            && self.write_error.is_none()
            && let Err(e) = out.writer.push(r, comm)
        {
            self.write_error = Some(e);
        }
    }

    /// Write the paths of a record's cgroups (submitter's and owner) before the first record
    /// of each in the open file.
    #[cold]
    fn name_cgroups(&mut self, cgroup: u64, owner: u64) {
        self.last_cgroups = Some((cgroup, owner));
        for id in [cgroup, owner] {
            if id == 0 || !self.cgroups_named.first(id) {
                continue;
            }
            let Some(out) = &mut self.output else {
                return;
            };
            let path = self
                .cgroups
                .path(id)
                .map_or_else(|| "(gone)".to_string(), str::to_string);
            if let Err(e) = out.writer.write_cgroup(&CgroupInfo { id, path }) {
                self.write_error.get_or_insert(e);
            }
        }
    }

    /// Write a file's path before the first record of it in the open file (a file the probe
    /// could not name is left out: its records name the inode only).
    #[cold]
    fn name_file(&mut self, dev: u32, ino: u64) {
        let (Some(files), Some(out)) = (&mut self.file_names, &mut self.output) else {
            return;
        };
        if files.path(dev, ino).is_none() {
            // The probe hands a file's name over before its IO's record, but the name may have
            // come after this drain took the names: it is in the names ring now.
            files.drain();
        }
        let Some(path) = files.path(dev, ino) else {
            return;
        };
        let f = tracer_common::format::FileInfo {
            dev,
            ino,
            path: path.to_string(),
        };
        if let Err(e) = out.writer.write_file(&f) {
            self.write_error.get_or_insert(e);
        }
    }

    /// `--cgroup`: is this id inside one of them?
    #[cold]
    fn cgroup_kept(&mut self, id: u64) -> bool {
        if let Some(&k) = self.cgroup_keep.get(&id) {
            return k;
        }
        let k = self
            .cgroups
            .path(id)
            .is_some_and(|p| self.cfg.cgroups.iter().any(|c| within(p, c)));
        // Bounded as the path table is: ids of cgroups long gone are asked again.
        if self.cgroup_keep.len() >= 1 << 16 {
            self.cgroup_keep.clear();
        }
        self.cgroup_keep.insert(id, k);
        k
    }

    pub(super) fn new_device(&mut self, dev: u32) {
        if self.names.contains_key(&dev) {
            return;
        }
        let (ma, mi) = dev_split(dev);
        let info = devices::name_of(ma, mi)
            .and_then(|n| devices::info(&n).ok())
            .unwrap_or(DeviceInfo {
                name: format!("{ma}:{mi}"),
                major: ma,
                minor: mi,
                logical_block_size: 512,
                queue: None,
            });
        self.names.insert(dev, info.name.clone());
        if !self.devices.iter().any(|d| d.dev() == dev) {
            self.devices.push(info.clone());
            if let Some(out) = &mut self.output
                && let Err(e) = out.writer.write_device(&info)
            {
                self.write_error.get_or_insert(e);
            }
        }
    }
}
