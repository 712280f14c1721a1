//! The scratch devices the benchmarks read: loop devices over /dev/shm, and queue settings put
//! back when done.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context as _, Result};

use crate::util::{output, run};

/// A loop device over an image file; detached and the image removed when dropped.
pub(super) struct Loop {
    pub(super) dev: String,
    img: PathBuf,
}

impl Loop {
    /// A loop device over a sparse image of `size` (truncate's units) in /dev/shm, named
    /// `name` and this process's pid.
    pub(super) fn in_shm(name: &str, size: &str) -> Result<Loop> {
        let img = PathBuf::from(format!("/dev/shm/{name}-{}.img", std::process::id()));
        run(Command::new("truncate").args(["-s", size]).arg(&img))?;
        let dev = output(Command::new("losetup").args(["-f", "--show"]).arg(&img))?
            .trim()
            .to_string();
        Ok(Loop { dev, img })
    }

    /// The device's name without /dev/ (as blkprof-trace --device and /proc/diskstats name it).
    pub(super) fn name(&self) -> &str {
        self.dev.trim_start_matches("/dev/")
    }
}

impl Drop for Loop {
    fn drop(&mut self) {
        #[expect(
            clippy::let_underscore_must_use,
            reason = "best-effort cleanup in Drop: there is no caller to report a failure to"
        )]
        let _ = Command::new("losetup").args(["-d", &self.dev]).status();
        #[expect(clippy::let_underscore_must_use, reason = "as above")]
        let _ = std::fs::remove_file(&self.img);
    }
}

/// A queue setting of a device, put back when dropped.
pub(super) struct QueueSetting {
    path: PathBuf,
    before: String,
}

impl QueueSetting {
    pub(super) fn set(dev: &str, name: &str, value: &str) -> Result<QueueSetting> {
        let path = PathBuf::from(format!("/sys/block/{dev}/queue/{name}"));
        let before = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        std::fs::write(&path, value).with_context(|| format!("writing {}", path.display()))?;
        Ok(QueueSetting {
            path,
            before: before.trim().to_string(),
        })
    }
}

impl Drop for QueueSetting {
    fn drop(&mut self) {
        #[expect(
            clippy::let_underscore_must_use,
            reason = "best-effort cleanup in Drop: there is no caller to report a failure to"
        )]
        let _ = std::fs::write(&self.path, &self.before);
    }
}
