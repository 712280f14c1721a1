//! The start of a records body: the record count (u32 LE), the chunk's base time (u64 LE), the
//! device table (count, then each `dev` as a varint) and the task table (count, then each pid
//! as a varint, the comm's length as a byte and the comm, from version 3 the cgroup id as a
//! varint, and from version 5 the owner cgroup id as a varint), and from version 5 the file
//! table (count, then each file's device and inode as varints). Records store indexes into
//! these tables.

use std::collections::HashMap;

use super::codec::{Cursor, put_varint};
use super::record::Task;
use crate::fasthash::FastMap;

/// A task as the writer tells them apart: pid, NUL-padded comm, cgroup, and the cgroup its IO
/// is charged to (one kworker writes back for many).
type TaskKey = (u32, [u8; 16], u64, u64);

/// The tables of the chunk being written, built as records arrive.
#[derive(Default)]
pub(super) struct TableBuilder {
    devs: Vec<u32>,
    dev_index: FastMap<u32, u32>,
    tasks: Vec<TaskKey>,
    task_index: FastMap<TaskKey, u32>,
    files: Vec<(u32, u64)>,
    file_index: FastMap<(u32, u64), u32>,
    last_file: Option<((u32, u64), u32)>,
    /// Consecutive records mostly share device and task: skip the hash lookups then.
    last_dev: Option<(u32, u32)>,
    last_task: Option<(TaskKey, u32)>,
}

impl TableBuilder {
    /// The index of `dev` in the device table, added if new.
    #[inline]
    #[expect(
        clippy::cast_possible_truncation,
        reason = "a table has at most one entry per record of the chunk: at most \
                  DEFAULT_CHUNK_RECORDS (8192)"
    )]
    pub(super) fn dev(&mut self, dev: u32) -> u32 {
        match self.last_dev {
            Some((d, i)) if d == dev => i,
            _ => {
                let i = if let Some(&i) = self.dev_index.get(&dev) {
                    i
                } else {
                    let i = self.devs.len() as u32;
                    self.devs.push(dev);
                    self.dev_index.insert(dev, i);
                    i
                };
                self.last_dev = Some((dev, i));
                i
            }
        }
    }

    /// The file column's value for a file: 0 for none (`dev` 0), else its index in the file
    /// table + 1, added if new.
    #[inline]
    #[expect(
        clippy::cast_possible_truncation,
        reason = "a table has at most one entry per record of the chunk: at most \
                  DEFAULT_CHUNK_RECORDS (8192)"
    )]
    pub(super) fn file(&mut self, dev: u32, ino: u64) -> u32 {
        if dev == 0 {
            return 0;
        }
        let key = (dev, ino);
        match self.last_file {
            Some((k, i)) if k == key => i,
            _ => {
                let i = if let Some(&i) = self.file_index.get(&key) {
                    i
                } else {
                    self.files.push(key);
                    let i = self.files.len() as u32;
                    self.file_index.insert(key, i);
                    i
                };
                self.last_file = Some((key, i));
                i
            }
        }
    }

    /// The index of the task (`pid`, NUL-padded `comm`, `cgroup`, `owner`) in the task table,
    /// added if new.
    #[inline]
    #[expect(
        clippy::cast_possible_truncation,
        reason = "a table has at most one entry per record of the chunk: at most \
                  DEFAULT_CHUNK_RECORDS (8192)"
    )]
    pub(super) fn task(&mut self, pid: u32, comm: &[u8; 16], cgroup: u64, owner: u64) -> u32 {
        let key = (pid, *comm, cgroup, owner);
        match self.last_task {
            Some((k, i)) if k == key => i,
            _ => {
                let i = if let Some(&i) = self.task_index.get(&key) {
                    i
                } else {
                    let i = self.tasks.len() as u32;
                    self.tasks.push(key);
                    self.task_index.insert(key, i);
                    i
                };
                self.last_task = Some((key, i));
                i
            }
        }
    }

    /// Append the start of a records body of `count` records as format `version` has it
    /// (task tables with cgroups from version 3, owners from version 5).
    #[expect(
        clippy::cast_possible_truncation,
        reason = "a comm's length, at most 16"
    )]
    pub(super) fn write(&self, body: &mut Vec<u8>, count: u32, base_ns: u64, version: u16) {
        body.extend_from_slice(&count.to_le_bytes());
        body.extend_from_slice(&base_ns.to_le_bytes());
        put_varint(body, self.devs.len() as u64);
        for &d in &self.devs {
            put_varint(body, u64::from(d));
        }
        put_varint(body, self.tasks.len() as u64);
        for (pid, comm, cgroup, owner) in &self.tasks {
            put_varint(body, u64::from(*pid));
            let n = comm.iter().position(|&c| c == 0).unwrap_or(16);
            body.push(n as u8);
            body.extend_from_slice(&comm[..n]);
            if version >= 3 {
                put_varint(body, *cgroup);
            }
            if version >= 5 {
                put_varint(body, *owner);
            }
        }
        if version >= 5 {
            put_varint(body, self.files.len() as u64);
            for (dev, ino) in &self.files {
                put_varint(body, u64::from(*dev));
                put_varint(body, *ino);
            }
        }
    }

    /// Empty, for the next chunk.
    pub(super) fn clear(&mut self) {
        self.devs.clear();
        self.dev_index.clear();
        self.tasks.clear();
        self.task_index.clear();
        self.files.clear();
        self.file_index.clear();
        self.last_file = None;
        self.last_dev = None;
        self.last_task = None;
    }
}

/// A task as the reader tells them apart: pid, comm, cgroup, owner.
type ReaderTaskKey = (u32, Vec<u8>, u64, u64);

/// A reader's tasks, over all the chunks it has read: each (pid, comm, cgroup, owner) gets one
/// id.
#[derive(Default)]
pub(super) struct TaskIds {
    pub(super) tasks: Vec<Task>,
    pub(super) ids: HashMap<ReaderTaskKey, u32>,
    /// The file's task tables hold cgroups (version 3 on).
    pub(super) cgroups: bool,
    /// The file's task tables hold owner cgroups, and its chunks file tables (version 5 on).
    pub(super) owners: bool,
    /// The files met so far by id - 1: file system, inode, and path once named.
    pub(super) files: Vec<(u32, u64, Option<String>)>,
    /// The id of each (file system, inode) now.
    pub(super) file_ids: HashMap<(u32, u64), u32>,
}

/// Files a reader tells apart at most (about 100 bytes each): a damaged or hostile file cannot
/// make it hold more; the IO of files beyond has file id 0 (unknown).
const MAX_FILE_IDS: usize = 1 << 22;

impl TaskIds {
    /// The id of a file of a chunk's file table (0 when the reader holds too many).
    fn file_id(&mut self, dev: u32, ino: u64) -> u32 {
        if let Some(&id) = self.file_ids.get(&(dev, ino)) {
            return id;
        }
        self.new_file(dev, ino, None)
    }

    fn new_file(&mut self, dev: u32, ino: u64, path: Option<String>) -> u32 {
        if self.files.len() >= MAX_FILE_IDS {
            return 0;
        }
        self.files.push((dev, ino, path));
        let id = u32::try_from(self.files.len()).unwrap_or(0);
        self.file_ids.insert((dev, ino), id);
        id
    }

    /// A File frame: the path of (file system, inode) from here on. The same path again
    /// changes nothing; a first name names the file met unnamed; another name is another file
    /// (an inode number reused after the first file was deleted).
    pub(super) fn name_file(&mut self, dev: u32, ino: u64, path: &str) {
        if let Some(&id) = self.file_ids.get(&(dev, ino))
            && let Some(f) = (id as usize)
                .checked_sub(1)
                .and_then(|i| self.files.get_mut(i))
        {
            match &f.2 {
                Some(p) if p == path => return,
                None => {
                    f.2 = Some(path.to_string());
                    return;
                }
                Some(_) => {}
            }
        }
        self.new_file(dev, ino, Some(path.to_string()));
    }

    /// The id of a task, `None` when the reader already holds 2^32 of them (no file does).
    fn id(&mut self, pid: u32, comm: &[u8], cgroup: u64, owner: u64) -> Option<u32> {
        let next = u32::try_from(self.tasks.len()).ok()?;
        let id = *self
            .ids
            .entry((pid, comm.to_vec(), cgroup, owner))
            .or_insert(next);
        if id == next {
            self.tasks.push(Task {
                pid,
                comm: String::from_utf8_lossy(comm).into_owned(),
                cgroup,
                owner_cgroup: owner,
            });
        }
        Some(id)
    }
}

/// What a record takes from its task-table entry.
#[derive(Clone, Copy)]
pub(super) struct ChunkTask {
    pub(super) pid: u32,
    pub(super) cgroup: u64,
    pub(super) owner_cgroup: u64,
}

/// The tables of a chunk as read.
pub(super) struct ChunkTables {
    pub(super) count: u32,
    pub(super) base: u64,
    pub(super) devs: Vec<u32>,
    /// Per entry of the chunk's task table: the reader's task id and the task.
    pub(super) tasks: Vec<(u32, ChunkTask)>,
    /// (file system, inode, reader's file id) per entry of the chunk's file table (version 5
    /// on).
    pub(super) files: Vec<(u32, u64, u32)>,
}

/// "records frame: `what`", the reason a damaged records frame is reported with.
pub(super) fn bad(what: &str) -> String {
    format!("records frame: {what}")
}

/// Read the start of a records body, mapping its tasks to `ids`.
#[expect(
    clippy::cast_possible_truncation,
    reason = "devices and pids were written from u32s: a wider value is only in a damaged file, \
              and is cut (refusing it would change how damaged files read)"
)]
pub(super) fn read_tables(c: &mut Cursor, ids: &mut TaskIds) -> Result<ChunkTables, String> {
    let count = c
        .bytes(4)
        .map(|b| u32::from_le_bytes(b.try_into().expect("4")))
        .ok_or_else(|| bad("no count"))?;
    let base = c
        .bytes(8)
        .map(|b| u64::from_le_bytes(b.try_into().expect("8")))
        .ok_or_else(|| bad("no base time"))?;
    let ndev = c.varint().ok_or_else(|| bad("no device table"))?;
    // Every count is bounded by the bytes that remain (each entry takes at least one byte
    // for a device, two for a task) before memory is reserved for it.
    let ndev = usize::try_from(ndev)
        .ok()
        .filter(|&n| n <= c.remaining())
        .ok_or_else(|| bad("device table longer than the frame"))?;
    let mut devs = Vec::with_capacity(ndev);
    for _ in 0..ndev {
        devs.push(c.varint().ok_or_else(|| bad("short device table"))? as u32);
    }
    let ntask = c.varint().ok_or_else(|| bad("no task table"))?;
    let ntask = u32::try_from(ntask)
        .ok()
        .filter(|&n| n <= count)
        .ok_or_else(|| bad("more tasks than records"))? as usize;
    if ntask > c.remaining() / 2 {
        return Err(bad("task table longer than the frame"));
    }
    let mut tasks = Vec::with_capacity(ntask);
    for _ in 0..ntask {
        let pid = c.varint().ok_or_else(|| bad("short task table"))? as u32;
        let n = *c
            .bytes(1)
            .and_then(|b| b.first())
            .ok_or_else(|| bad("short task table"))? as usize;
        let comm = c.bytes(n.min(16)).ok_or_else(|| bad("short task table"))?;
        let cgroup = if ids.cgroups {
            c.varint().ok_or_else(|| bad("short task table"))?
        } else {
            0
        };
        let owner = if ids.owners {
            c.varint().ok_or_else(|| bad("short task table"))?
        } else {
            0
        };
        let t = ChunkTask {
            pid,
            cgroup,
            owner_cgroup: owner,
        };
        let id = ids
            .id(pid, comm, cgroup, owner)
            .ok_or_else(|| bad("more tasks than a reader tells apart"))?;
        tasks.push((id, t));
    }
    let mut files = Vec::new();
    if ids.owners {
        let nfile = c.varint().ok_or_else(|| bad("no file table"))?;
        let nfile = u32::try_from(nfile)
            .ok()
            .filter(|&n| n <= count)
            .map(|n| n as usize)
            .filter(|&n| n <= c.remaining() / 2)
            .ok_or_else(|| bad("file table longer than the frame"))?;
        files.reserve(nfile);
        for _ in 0..nfile {
            let short = || bad("short file table");
            let dev = u32::try_from(c.varint().ok_or_else(short)?)
                .map_err(|_| bad("file device out of range"))?;
            let ino = c.varint().ok_or_else(short)?;
            files.push((dev, ino, ids.file_id(dev, ino)));
        }
    }
    Ok(ChunkTables {
        count,
        base,
        devs,
        tasks,
        files,
    })
}
