//! `--files`: the paths of the files IOs belong to. The probe names each file the first time
//! it meets it (the components of its first dentry up to its file system's root, read while
//! the IO is live, so that a file deleted right after is still named); this puts them under
//! the file system's mount point and keeps them for the trace's File frames.

use std::collections::HashMap;

use aya::maps::{MapData, RingBuf};
use tracer_common::{FILE_NAME_DEPTH, FILE_NAME_LEN, FileName};

/// Files remembered at most (about 100 bytes each); beyond, new names are counted and left out.
const MAX_FILES: usize = 1 << 20;

pub struct Files {
    ring: RingBuf<MapData>,
    /// Path of each (file system, inode) named so far.
    paths: HashMap<(u32, u64), String>,
    /// Mount point of each file system device, from /proc/self/mountinfo (reread when a file
    /// of an unknown device is named).
    mounts: HashMap<u32, MountPoint>,
    /// Names left out: the table was full, or a record was short.
    pub dropped: u64,
    /// The files the open trace file has named.
    named: crate::named::NamedOnce<(u32, u64)>,
}

/// Where a file system's tree shows: mounted at `at`, showing its subtree `root`.
struct MountPoint {
    at: String,
    root: String,
}

impl Files {
    pub fn new(ring: RingBuf<MapData>) -> Files {
        Files {
            ring,
            paths: HashMap::new(),
            mounts: HashMap::new(),
            dropped: 0,
            named: crate::named::NamedOnce::default(),
        }
    }

    /// Take every name waiting in the ring (before the records that follow them).
    pub fn drain(&mut self) {
        loop {
            let f: FileName = {
                let Some(item) = self.ring.next() else { break };
                if item.len() < size_of::<FileName>() {
                    self.dropped += 1;
                    continue;
                }
                // SAFETY: the item holds a whole FileName, written by the probe; read unaligned.
                unsafe { std::ptr::read_unaligned(item.as_ptr().cast()) }
            };
            let key = (f.key.dev, f.key.ino);
            // No dentry to read (an inode the dcache no longer holds): left unnamed, as a
            // dropped name is.
            if f.depth == 0 {
                self.dropped += 1;
                continue;
            }
            if self.paths.len() >= MAX_FILES && !self.paths.contains_key(&key) {
                self.dropped += 1;
                continue;
            }
            let rel = relative_path(&f);
            let path = self.under_mount(f.key.dev, &rel);
            // A new name (an inode number reused by another file) is named again in the file.
            if self
                .paths
                .insert(key, path.clone())
                .is_some_and(|old| old != path)
            {
                self.named.forget(&key);
            }
        }
    }

    /// The path of a file, if named.
    pub fn path(&self, dev: u32, ino: u64) -> Option<&str> {
        self.paths.get(&(dev, ino)).map(String::as_str)
    }

    /// Whether the open trace file still has to name this file (once per file per trace
    /// file); marks it named.
    #[inline]
    pub fn must_name(&mut self, dev: u32, ino: u64) -> bool {
        ino != 0 && self.named.first((dev, ino))
    }

    /// A new trace file names its own files.
    pub fn new_file(&mut self) {
        self.named.new_file();
    }

    fn under_mount(&mut self, dev: u32, rel: &str) -> String {
        if !self.mounts.contains_key(&dev) {
            self.mounts = mounts();
        }
        match self.mounts.get(&dev) {
            Some(m) => {
                // A bind mount shows a subtree: the part of the path below it.
                let below = if m.root == "/" {
                    Some(rel)
                } else {
                    rel.strip_prefix(m.root.as_str())
                        .filter(|r| r.is_empty() || r.starts_with('/'))
                };
                match below {
                    Some(r) if m.at == "/" => {
                        if r.is_empty() {
                            "/".into()
                        } else {
                            r.into()
                        }
                    }
                    Some(r) => format!("{}{r}", m.at),
                    None => format!("({}:{}){rel}", dev >> 20, dev & 0xfffff),
                }
            }
            None => format!("({}:{}){rel}", dev >> 20, dev & 0xfffff),
        }
    }
}

/// The path below the file system's root ("/dir/file"), from the probe's components
/// (innermost first, the root's own "/" last); "/…" in front when the walk stopped short.
fn relative_path(f: &FileName) -> String {
    let depth = (f.depth as usize).min(FILE_NAME_DEPTH);
    let mut parts: Vec<String> = f.names[..depth]
        .iter()
        .map(|n| {
            let len = n.iter().position(|&c| c == 0).unwrap_or(FILE_NAME_LEN);
            String::from_utf8_lossy(&n[..len]).into_owned()
        })
        .collect();
    if f.complete != 0 && parts.last().is_some_and(|p| p == "/") {
        parts.pop();
    }
    parts.reverse();
    let mut out = String::new();
    if f.complete == 0 {
        out.push_str("/…");
    }
    for p in parts {
        out.push('/');
        out.push_str(&p);
    }
    if out.is_empty() {
        out.push('/');
    }
    out
}

/// Each device's first mount (a mount of its whole tree preferred), from
/// /proc/self/mountinfo.
fn mounts() -> HashMap<u32, MountPoint> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    mounts_in(&info)
}

fn mounts_in(info: &str) -> HashMap<u32, MountPoint> {
    let mut out: HashMap<u32, MountPoint> = HashMap::new();
    for l in info.lines() {
        let f: Vec<&str> = l.split(' ').collect();
        let (Some(dev), Some(root), Some(at)) = (f.get(2), f.get(3), f.get(4)) else {
            continue;
        };
        let Some((ma, mi)) = dev.split_once(':') else {
            continue;
        };
        let (Ok(ma), Ok(mi)) = (ma.parse::<u32>(), mi.parse::<u32>()) else {
            continue;
        };
        let dev = tracer_common::dev_join(ma, mi);
        let m = MountPoint {
            at: unescape(at),
            root: unescape(root),
        };
        match out.get(&dev) {
            Some(old) if old.root == "/" || m.root != "/" => {}
            _ => {
                out.insert(dev, m);
            }
        }
    }
    out
}

/// mountinfo's octal escapes (`\040` for a space).
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracer_common::FileKey;

    fn name(parts: &[&str], complete: bool) -> FileName {
        let mut f = FileName {
            key: FileKey::default(),
            depth: u32::try_from(parts.len()).unwrap(),
            complete: u32::from(complete),
            names: [[0; FILE_NAME_LEN]; FILE_NAME_DEPTH],
        };
        for (i, p) in parts.iter().enumerate() {
            f.names[i][..p.len()].copy_from_slice(p.as_bytes());
        }
        f
    }

    #[test]
    fn components_make_a_path_below_the_root() {
        assert_eq!(
            relative_path(&name(&["nb-1-big-Data.db", "t-1234", "ks", "/"], true)),
            "/ks/t-1234/nb-1-big-Data.db"
        );
        assert_eq!(relative_path(&name(&["f", "d"], false)), "/…/d/f");
        assert_eq!(relative_path(&name(&["/"], true)), "/");
    }

    #[test]
    fn mount_points_prefer_whole_trees_and_unescape() {
        let info = "22 1 259:1 /sub /mnt/bind rw - ext4 /dev/nvme0n1p1 rw\n\
                    23 1 259:1 / /var/lib/my\\040data rw - ext4 /dev/nvme0n1p1 rw\n\
                    24 1 7:0 /x /only-sub rw - ext4 /dev/loop0 rw\n";
        let m = mounts_in(info);
        assert_eq!(m[&tracer_common::dev_join(259, 1)].at, "/var/lib/my data");
        assert_eq!(m[&tracer_common::dev_join(7, 0)].root, "/x");
    }
}
