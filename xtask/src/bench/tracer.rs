//! Starting and stopping the tracers measured: blkprof-trace (or another build of it) and
//! libbpf-tools' biolatency.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};

use crate::signal::signal;

/// Start blkprof-trace with `args` and wait until it has attached (it says so, naming Ctrl-C,
/// on stderr).
pub(super) fn spawn_tracer(bin: &Path, args: &[&str]) -> Result<Child> {
    use std::io::Read;
    let mut child = Command::new(bin)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting blkprof-trace")?;
    let mut err = child.stderr.take().context("stderr")?;
    let mut buf = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut byte = [0u8; 1];
    while Instant::now() < deadline {
        if err.read(&mut byte)? == 0 {
            bail!("blkprof-trace exited: {}", String::from_utf8_lossy(&buf));
        }
        buf.push(byte[0]);
        if String::from_utf8_lossy(&buf).contains("Ctrl-C") {
            // Keep draining stderr so the tracer never blocks on it.
            std::thread::spawn(move || {
                let mut sink = Vec::new();
                #[expect(
                    clippy::let_underscore_must_use,
                    reason = "this thread only drains the tracer's stderr so that it never blocks; what it reads, or fails to, is of no use"
                )]
                let _ = err.read_to_end(&mut sink);
            });
            return Ok(child);
        }
    }
    bail!("blkprof-trace did not attach")
}

/// Send a child SIGINT, as Ctrl-C would: the tracer then writes its trailer and summary.
pub(super) fn interrupt(child: &Child) {
    signal(child, libc::SIGINT);
}

/// Stop a tracer started by [`spawn_tracer`] and wait for it; its stdout (the end summary) is
/// the error if it did not exit cleanly.
pub(super) fn stop_tracer(child: Child) -> Result<()> {
    interrupt(&child);
    let o = child.wait_with_output()?;
    if !o.status.success() {
        bail!(
            "blkprof-trace failed: {}",
            String::from_utf8_lossy(&o.stdout)
        );
    }
    Ok(())
}

/// Start `biolatency -Q -D` (it prints nothing until Ctrl-C).
pub(super) fn spawn_biolatency() -> Result<Child> {
    Command::new("biolatency")
        .args(["-Q", "-D"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting biolatency (Debian package libbpf-tools)")
}
