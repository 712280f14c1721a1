//! A memory cgroup for the node.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, Result};

/// A memory cgroup for the node (v2 or v1), so that the run phase has a small page cache and
/// YCSB's reads reach the device as they do when the data set is larger than memory.
pub(super) struct Cgroup {
    dir: PathBuf,
    v2: bool,
}

impl Cgroup {
    pub(super) fn create(name: &str) -> Option<Cgroup> {
        let v2 = Path::new("/sys/fs/cgroup/cgroup.controllers").exists();
        let base = if v2 {
            PathBuf::from("/sys/fs/cgroup")
        } else {
            PathBuf::from("/sys/fs/cgroup/memory")
        };
        if v2 {
            // The memory controller must be enabled for children of the root.
            #[expect(
                clippy::let_underscore_must_use,
                reason = "the controller may already be enabled, or not be allowed here; whether the cgroup can limit memory is checked next (its limit file)"
            )]
            let _ = std::fs::write(base.join("cgroup.subtree_control"), "+memory");
        }
        let dir = base.join(name);
        std::fs::create_dir(&dir).ok()?;
        let limit = if v2 {
            "memory.max"
        } else {
            "memory.limit_in_bytes"
        };
        if !dir.join(limit).exists() {
            #[expect(
                clippy::let_underscore_must_use,
                reason = "best-effort cleanup of a cgroup that cannot be used; the node then runs without one"
            )]
            let _ = std::fs::remove_dir(&dir);
            return None;
        }
        Some(Cgroup { dir, v2 })
    }

    pub(super) fn add(&self, pid: u32) -> Result<()> {
        std::fs::write(self.dir.join("cgroup.procs"), pid.to_string())
            .with_context(|| format!("moving pid {pid} into {}", self.dir.display()))
    }

    fn stat(&self, key: &str) -> u64 {
        std::fs::read_to_string(self.dir.join("memory.stat"))
            .unwrap_or_default()
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(' ')?;
                (k == key).then(|| v.trim().parse().ok()).flatten()
            })
            .unwrap_or(0)
    }

    /// Memory the node holds that is not page cache.
    pub(super) fn anon(&self) -> u64 {
        if self.v2 {
            self.stat("anon") + self.stat("kernel")
        } else {
            self.stat("total_rss")
        }
    }

    /// The node's page cache.
    pub(super) fn page_cache(&self) -> u64 {
        if self.v2 {
            self.stat("file")
        } else {
            self.stat("total_cache")
        }
    }

    /// Limit the node's memory, page cache included, to `bytes`.
    pub(super) fn limit(&self, bytes: u64) -> Result<()> {
        let f = if self.v2 {
            "memory.max"
        } else {
            "memory.limit_in_bytes"
        };
        std::fs::write(self.dir.join(f), bytes.to_string())
            .with_context(|| format!("setting {} of {}", f, self.dir.display()))
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        // Empty once the node has exited; a few tries while the kernel lets go of it.
        for _ in 0..50 {
            if std::fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        eprintln!("cassandra: could not remove {}", self.dir.display());
    }
}
