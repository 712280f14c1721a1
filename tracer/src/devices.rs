//! Block devices: names, MAJ:MIN, sizes, and /proc/diskstats.

use std::collections::HashMap;
use std::path::Path;

use tracer_common::format::{DeviceInfo, DiskStats};

#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    #[error("block device {0:?} not found (see `lsblk` or /proc/partitions for names)")]
    NotFound(String),
    #[error(
        "{name} is a partition of {disk}; blkprof traces whole disks, where requests are issued: use --device {disk}"
    )]
    Partition { name: String, disk: String },
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{0:?} is not a device name (like loop0 or /dev/loop0) or MAJ:MIN (like 7:0)")]
    BadSpec(String),
}

fn read_trim(path: &Path) -> Result<String, DeviceError> {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .map_err(|source| DeviceError::Read {
            path: path.display().to_string(),
            source,
        })
}

/// Resolve `loop0`, `/dev/loop0` or `7:0` to a whole disk.
pub fn resolve(spec: &str) -> Result<DeviceInfo, DeviceError> {
    let name = if let Some((maj, min)) = spec.split_once(':') {
        let (Ok(maj), Ok(min)) = (maj.parse::<u32>(), min.parse::<u32>()) else {
            return Err(DeviceError::BadSpec(spec.into()));
        };
        name_of(maj, min).ok_or_else(|| DeviceError::NotFound(spec.into()))?
    } else {
        let n = spec.strip_prefix("/dev/").unwrap_or(spec);
        if n.is_empty() || n.contains('/') {
            return Err(DeviceError::BadSpec(spec.into()));
        }
        n.to_string()
    };
    let sys = Path::new("/sys/class/block").join(&name);
    if !sys.exists() {
        return Err(DeviceError::NotFound(spec.into()));
    }
    if sys.join("partition").exists() {
        let disk = std::fs::canonicalize(&sys)
            .ok()
            .and_then(|p| {
                p.parent()
                    .and_then(|d| d.file_name())
                    .map(|d| d.to_string_lossy().into_owned())
            })
            .unwrap_or_else(|| "the whole disk".into());
        return Err(DeviceError::Partition { name, disk });
    }
    info(&name)
}

pub fn info(name: &str) -> Result<DeviceInfo, DeviceError> {
    let sys = Path::new("/sys/class/block").join(name);
    let dev = read_trim(&sys.join("dev"))?;
    let (maj, min) = dev
        .split_once(':')
        .ok_or_else(|| DeviceError::BadSpec(dev.clone()))?;
    let lbs = read_trim(&sys.join("queue/logical_block_size"))
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(512);
    Ok(DeviceInfo {
        name: name.to_string(),
        major: maj.parse().map_err(|_| DeviceError::BadSpec(dev.clone()))?,
        minor: min.parse().map_err(|_| DeviceError::BadSpec(dev.clone()))?,
        logical_block_size: lbs,
    })
}

pub fn name_of(major: u32, minor: u32) -> Option<String> {
    let link = std::fs::read_link(format!("/sys/dev/block/{major}:{minor}")).ok()?;
    Some(link.file_name()?.to_string_lossy().into_owned())
}

pub fn read_diskstats() -> Result<HashMap<(u32, u32), DiskStats>, DeviceError> {
    let at = crate::clock::monotonic_ns();
    let text = std::fs::read_to_string("/proc/diskstats").map_err(|source| DeviceError::Read {
        path: "/proc/diskstats".into(),
        source,
    })?;
    Ok(tracer_common::format::parse_diskstats(&text, at))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_specs_are_named() {
        assert!(matches!(
            resolve("no-such-disk-xyz"),
            Err(DeviceError::NotFound(_))
        ));
        assert!(matches!(resolve("a:b"), Err(DeviceError::BadSpec(_))));
        assert!(matches!(resolve("../etc"), Err(DeviceError::BadSpec(_))));
    }
}
