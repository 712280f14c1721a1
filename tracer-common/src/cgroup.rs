//! Where the unified (v2) cgroup hierarchy is mounted: the tracer names cgroup ids by walking
//! it, the end-to-end tests make cgroups in it.

use std::path::PathBuf;

/// The mount point of the cgroup2 hierarchy, from /proc/self/mountinfo (`/sys/fs/cgroup` on a
/// v2 system, `/sys/fs/cgroup/unified` on a hybrid one), if one is mounted.
pub fn cgroup2_mount() -> Option<PathBuf> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    mount_in(&info)
}

fn mount_in(mountinfo: &str) -> Option<PathBuf> {
    mountinfo.lines().find_map(|l| {
        let (pre, post) = l.split_once(" - ")?;
        (post.split_whitespace().next()? == "cgroup2")
            .then(|| pre.split_whitespace().nth(4).map(PathBuf::from))
            .flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_unified_hierarchy_among_v1_controllers() {
        let hybrid = "30 24 0:26 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755\n\
31 30 0:27 / /sys/fs/cgroup/unified rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n\
32 30 0:28 / /sys/fs/cgroup/blkio rw,nosuid - cgroup cgroup rw,blkio\n";
        assert_eq!(
            mount_in(hybrid),
            Some(PathBuf::from("/sys/fs/cgroup/unified"))
        );
        assert_eq!(
            mount_in("32 30 0:28 / /sys/fs/cgroup/blkio rw - cgroup cgroup rw,blkio\n"),
            None
        );
    }
}
