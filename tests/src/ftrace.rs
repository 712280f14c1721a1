//! The kernel's ftrace `blk` tracer: an independent witness of every request.

use std::path::PathBuf;

use crate::{WriteOnDrop, sh};

/// The kernel's ftrace `blk` tracer recording one device: an independent witness of every
/// request (blkparse-style lines). Restores the tracer, the device's trace switch and the
/// buffer size when dropped, also when a test panics.
pub struct FtraceBlk {
    tracing: PathBuf,
    _restore: WriteOnDrop,
}

impl FtraceBlk {
    /// Start recording `dev` (a name such as `loop3`) into a 64 MiB buffer.
    pub fn start(dev: &str) -> FtraceBlk {
        let tracing = PathBuf::from("/sys/kernel/tracing");
        if !tracing.join("current_tracer").exists() {
            sh("mount -t tracefs tracefs /sys/kernel/tracing");
        }
        let current = std::fs::read_to_string(tracing.join("current_tracer")).expect("tracer");
        assert_eq!(
            current.trim(),
            "nop",
            "ftrace is in use (current_tracer is {current:?}): wait for it to finish"
        );
        // "7 (expanded: 1408)" until first used, then "1408".
        let size = std::fs::read_to_string(tracing.join("buffer_size_kb")).expect("buffer size");
        let buffer_size_kb = size
            .split_once("expanded: ")
            .map_or(size.trim(), |(_, e)| e.trim_end_matches([')', '\n']))
            .to_string();
        let device_switch = PathBuf::from(format!("/sys/block/{dev}/trace/enable"));
        // Recording may have been left off (`tracing_on` 0) by someone else's session.
        let tracing_on = std::fs::read_to_string(tracing.join("tracing_on")).expect("tracing_on");
        let g = FtraceBlk {
            _restore: WriteOnDrop(vec![
                (tracing.join("tracing_on"), tracing_on.trim().to_string()),
                (tracing.join("current_tracer"), "nop".into()),
                (device_switch.clone(), "0".into()),
                (tracing.join("trace"), String::new()),
                (tracing.join("buffer_size_kb"), buffer_size_kb),
            ]),
            tracing,
        };
        g.write("trace", "");
        g.write("buffer_size_kb", "65536");
        std::fs::write(&device_switch, "1").expect("blk trace enable");
        g.write("current_tracer", "blk");
        g.write("tracing_on", "1");
        g
    }

    fn write(&self, file: &str, value: &str) {
        std::fs::write(self.tracing.join(file), value)
            .unwrap_or_else(|e| panic!("{}: {e}", self.tracing.join(file).display()));
    }

    /// Everything recorded so far (the `trace` file: all CPUs, in time order).
    pub fn text(&self) -> String {
        std::fs::read_to_string(self.tracing.join("trace")).expect("trace")
    }
}

/// The blk action letter of an ftrace or blkparse line (`Q`, `M`, `C`, ...), if it is one.
pub fn blk_action(line: &str) -> Option<&str> {
    let tok: Vec<&str> = line.split_whitespace().collect();
    let di = tok.iter().position(|t| {
        t.split_once(',').is_some_and(|(a, b)| {
            !a.is_empty()
                && !b.is_empty()
                && a.bytes().all(|c| c.is_ascii_digit())
                && b.bytes().all(|c| c.is_ascii_digit())
        })
    })?;
    // ftrace: "task [cpu] flags time: dev ACTION"; blkparse: "dev cpu seq time pid ACTION".
    let ai = if di > 0 && tok[di - 1].ends_with(':') {
        di + 1
    } else {
        di + 5
    };
    tok.get(ai).copied()
}
