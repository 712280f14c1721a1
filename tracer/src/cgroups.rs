//! cgroup v2 ids to paths. The probe records the submitting task's cgroup id (the kernel's
//! `cgroup_id()`: the kernfs inode number of its directory in the unified hierarchy); the
//! daemon names each while the run is live, since a container's cgroup is gone when it stops.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

/// Paths of cgroup ids, learnt by walking the hierarchy when an unknown id shows up.
/// The most cgroup ids kept.
const MAX_IDS: usize = 1 << 16;

pub struct Cgroups {
    root: Option<PathBuf>,
    paths: HashMap<u64, Option<String>>,
}

impl Cgroups {
    pub fn new() -> Cgroups {
        Cgroups {
            root: tracer_common::cgroup::cgroup2_mount(),
            paths: HashMap::new(),
        }
    }

    /// The path of `id` below the mount ("/" for the root), if it still exists; each unknown
    /// id costs one walk of the hierarchy (which also learns every other cgroup there).
    pub fn path(&mut self, id: u64) -> Option<&str> {
        if !self.paths.contains_key(&id) {
            self.rescan();
            self.paths.entry(id).or_insert(None);
        }
        self.paths.get(&id).and_then(|p| p.as_deref())
    }

    fn rescan(&mut self) {
        let Some(root) = self.root.clone() else {
            return;
        };
        // Pods and services come and go for months: beyond this many ids (live and gone)
        // the table starts again from the live tree.
        if self.paths.len() >= MAX_IDS {
            self.paths.clear();
        }
        let mut stack = vec![root.clone()];
        while let Some(dir) = stack.pop() {
            let Ok(md) = std::fs::metadata(&dir) else {
                continue;
            };
            let rel = dir
                .strip_prefix(&root)
                .map_or_else(|_| "/".to_string(), |r| format!("/{}", r.to_string_lossy()));
            self.paths.insert(md.ino(), Some(rel));
            if let Ok(rd) = std::fs::read_dir(&dir) {
                stack.extend(
                    rd.filter_map(Result::ok)
                        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                        .map(|e| e.path()),
                );
            }
        }
    }

    /// `--cgroup` as given (a path below the mount, or the same with the mount's path in
    /// front) as a path below the mount, checked to exist.
    pub fn resolve_filter(&self, given: &str) -> Result<String, String> {
        let root = self.root.as_deref().ok_or_else(|| {
            format!("--cgroup {given}: no cgroup v2 (unified) hierarchy is mounted")
        })?;
        let rel = Path::new(given).strip_prefix(root).map_or_else(
            |_| given.to_string(),
            |r| format!("/{}", r.to_string_lossy()),
        );
        let rel = format!("/{}", rel.trim_matches('/'));
        if !root.join(rel.trim_start_matches('/')).is_dir() {
            return Err(format!(
                "--cgroup {given}: no such cgroup under {} (give its path there, e.g. /system.slice/cassandra.service)",
                root.display()
            ));
        }
        Ok(rel)
    }
}

impl Default for Cgroups {
    fn default() -> Self {
        Self::new()
    }
}

/// Whether `path` is `under` or below it.
pub fn within(path: &str, under: &str) -> bool {
    under == "/"
        || path == under
        || path
            .strip_prefix(under)
            .is_some_and(|rest| rest.starts_with('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_subtree_counts() {
        assert!(within("/a/b", "/a"));
        assert!(within("/a", "/a"));
        assert!(!within("/ab", "/a"));
        assert!(within("/x", "/"));
    }

    #[test]
    fn this_process_cgroup_is_found_by_its_id() {
        let mut c = Cgroups::new();
        let Some(root) = c.root.clone() else {
            return; // no cgroup2 here: nothing to resolve
        };
        // /proc/self/cgroup's "0::PATH" line names our v2 cgroup; its directory's inode is
        // the id the probe records.
        let own = std::fs::read_to_string("/proc/self/cgroup").unwrap();
        let rel = own
            .lines()
            .find_map(|l| l.strip_prefix("0::"))
            .expect("a v2 line")
            .to_string();
        let ino = std::fs::metadata(root.join(rel.trim_start_matches('/')))
            .unwrap()
            .ino();
        assert_eq!(c.path(ino), Some(rel.as_str()));
        assert_eq!(c.path(u64::MAX), None);
    }
}
