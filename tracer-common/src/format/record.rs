//! One IO as stored in (and decoded from) a trace file, and the task that submitted it.

use crate::op::{Op, StatGroup};

/// One IO as stored in (and decoded from) a trace file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IoRecord {
    /// `CLOCK_MONOTONIC` ns at completion.
    pub complete_ns: u64,
    /// When it entered the OS queue.
    pub enter_ns: u64,
    /// When it was issued to the device; 0 if never issued.
    pub issue_ns: u64,
    /// First sector (512-byte units).
    pub sector: u64,
    pub bytes: u32,
    /// Submitting process; with `task` naming its comm.
    pub pid: u32,
    /// Index into the reader's task table ([`super::TraceReader::tasks`]); ignored by the writer.
    pub task: u32,
    pub dev_inflight: u32,
    pub os_inflight: u32,
    pub error: i32,
    /// major << 20 | minor.
    pub dev: u32,
    pub requeues: u16,
    /// [`crate::op::flags`] bits.
    pub flags: u16,
    pub op: Op,
    /// The submitting task's cgroup (v2 id, the cgroup directory's inode number) at
    /// submission; 0 if unknown (files before version 3). Kept in the chunk's task table.
    pub cgroup: u64,
    /// The cgroup the block layer charged the IO to (the bio's blkcg, v2 id): the submitter's
    /// own for its IO, the one that dirtied the pages for writeback where the kernel tracks
    /// it; 0 if unknown (not traced: [`super::TraceHeader::owner_cgroups`]; files before
    /// version 5). Kept in the chunk's task table.
    pub owner_cgroup: u64,
    /// The file the IO's first data page belongs to: its file system (`s_dev`) and inode
    /// (named by [`super::TraceReader::file_path`]); `file_dev` is [`crate::FILE_DEV_ANON`]
    /// for pages of no file (direct IO), [`crate::FILE_DEV_DEVICE`] for the block device's own
    /// page cache (file system metadata, journal), 0 when unknown (no data pages, files not
    /// traced, files before version 5). Kept in the chunk's file table.
    pub file_dev: u32,
    pub file_ino: u64,
    /// The reader's id of that file ([`super::TraceReader::file`]), 0 when unknown (as
    /// `file_dev`). An inode number the trace names anew (reused by another file after the
    /// first was deleted) is another file with another id. Not written: writers ignore it.
    pub file_id: u32,
    /// The blk-mq hardware queue (`hctx` index: on NVMe, the submission queue) the request
    /// was dispatched through; `None` if unknown (files before version 4, imported traces).
    pub hw_queue: Option<u16>,
}

impl IoRecord {
    pub fn total_ns(&self) -> u64 {
        self.complete_ns.saturating_sub(self.enter_ns)
    }
    pub fn device_ns(&self) -> u64 {
        if self.issue_ns == 0 {
            0
        } else {
            self.complete_ns.saturating_sub(self.issue_ns)
        }
    }
    pub fn stat_group(&self) -> StatGroup {
        StatGroup::of(self.op, self.flags)
    }
}

/// A submitter as the records name it: (pid, comm, cgroup), with the cgroup its IOs were
/// charged to (a kworker writing back pages of several cgroups is one task per owner).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Task {
    pub pid: u32,
    pub comm: String,
    /// cgroup v2 id; 0 if unknown.
    pub cgroup: u64,
    /// The cgroup v2 id its IOs were charged to; 0 if unknown.
    pub owner_cgroup: u64,
}

impl IoRecord {
    /// The cgroup to charge the IO to: its owner where known, else its submitter's (0 if
    /// neither is known).
    pub fn charged_cgroup(&self) -> u64 {
        if self.owner_cgroup != 0 {
            self.owner_cgroup
        } else {
            self.cgroup
        }
    }
}

pub fn comm_bytes(comm: &str) -> [u8; 16] {
    let mut out = [0u8; 16];
    let b = comm.as_bytes();
    let n = b.len().min(15);
    out[..n].copy_from_slice(&b[..n]);
    out
}
