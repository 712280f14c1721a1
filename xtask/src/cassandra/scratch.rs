//! What a run started and set up (children, cgroup, loop device, md array, mount, scratch
//! directory), undone in reverse order when dropped: on success, on failure and on Ctrl-C.

use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};

use super::cgroup::Cgroup;
use crate::signal::{pid, signal, signal_group};
use crate::util::interrupted;

/// What was started and set up, undone in reverse order on drop.
#[derive(Default)]
pub(super) struct Scratch {
    pub(super) dir: PathBuf,
    pub(super) cgroup: Option<Cgroup>,
    pub(super) loopdev: Option<String>,
    /// An md array made for the run (in the VM lab), stopped after the unmount.
    pub(super) md: Option<String>,
    pub(super) mounted: Option<PathBuf>,
    /// (what, child): stopped with SIGTERM, then SIGKILL after the grace time.
    children: Vec<(String, Child, Duration)>,
}

impl Scratch {
    pub(super) fn spawn(&mut self, what: &str, cmd: &mut Command, grace: Duration) -> Result<u32> {
        let child = cmd
            .process_group(0)
            .spawn()
            .with_context(|| format!("cannot start {what}: {cmd:?}"))?;
        let pid = child.id();
        self.children.push((what.to_string(), child, grace));
        Ok(pid)
    }

    pub(super) fn child(&mut self, what: &str) -> Option<&mut Child> {
        self.children
            .iter_mut()
            .find(|(w, ..)| w == what)
            .map(|(_, c, _)| c)
    }

    /// SIGTERM, wait up to `grace`, then SIGKILL. Returns the exit status if it ended by itself
    /// or on SIGTERM.
    pub(super) fn stop(&mut self, what: &str) -> Option<std::process::ExitStatus> {
        let i = self.children.iter().position(|(w, ..)| w == what)?;
        let (what, mut child, grace) = self.children.remove(i);
        stop_child(&what, &mut child, grace)
    }
}

fn stop_child(what: &str, child: &mut Child, grace: Duration) -> Option<std::process::ExitStatus> {
    if let Ok(Some(s)) = child.try_wait() {
        return Some(s);
    }
    let pid = pid(child);
    signal(child, libc::SIGTERM);
    let end = Instant::now() + grace;
    while Instant::now() < end {
        if let Ok(Some(s)) = child.try_wait() {
            return Some(s);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!(
        "cassandra: {what} (pid {pid}) did not stop within {} s of SIGTERM: SIGKILL",
        grace.as_secs()
    );
    // The whole group: a JVM or fio may have children of its own.
    signal_group(child, libc::SIGKILL);
    #[expect(
        clippy::let_underscore_must_use,
        reason = "reaps the child just killed; it did not stop when asked, so its exit status says nothing"
    )]
    let _ = child.wait();
    None
}

impl Drop for Scratch {
    fn drop(&mut self) {
        while let Some((what, mut child, grace)) = self.children.pop() {
            stop_child(&what, &mut child, grace);
        }
        self.cgroup.take();
        if let Some(m) = self.mounted.take() {
            let ok = Command::new("umount")
                .arg(&m)
                .status()
                .is_ok_and(|s| s.success());
            if !ok {
                eprintln!(
                    "cassandra: umount {} failed; detaching it lazily",
                    m.display()
                );
                #[expect(
                    clippy::let_underscore_must_use,
                    reason = "best-effort cleanup in Drop: there is no caller to report a failure to"
                )]
                let _ = Command::new("umount").arg("-l").arg(&m).status();
            }
        }
        if let Some(d) = self.loopdev.take() {
            #[expect(
                clippy::let_underscore_must_use,
                reason = "best-effort cleanup in Drop: there is no caller to report a failure to"
            )]
            let _ = Command::new("losetup").args(["-d", &d]).status();
        }
        if let Some(md) = self.md.take() {
            #[expect(
                clippy::let_underscore_must_use,
                reason = "best-effort cleanup in Drop: there is no caller to report a failure to"
            )]
            let _ = Command::new("mdadm").args(["--stop", &md]).status();
        }
        if !self.dir.as_os_str().is_empty() {
            #[expect(
                clippy::let_underscore_must_use,
                reason = "best-effort cleanup in Drop: there is no caller to report a failure to"
            )]
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Wait for a child to end by itself, watching for Ctrl-C.
pub(super) fn wait_child(
    s: &mut Scratch,
    what: &str,
    timeout: Duration,
) -> Result<std::process::ExitStatus> {
    let end = Instant::now() + timeout;
    loop {
        interrupted()?;
        let c = s
            .child(what)
            .with_context(|| format!("{what} is not running"))?;
        if let Some(st) = c.try_wait()? {
            s.children.retain(|(w, ..)| w != what);
            return Ok(st);
        }
        if Instant::now() > end {
            bail!("{what} did not finish within {} s", timeout.as_secs());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}
