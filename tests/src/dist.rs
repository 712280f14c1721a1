//! What the packaging tests share: the artifacts `cargo xtask dist` wrote, and a throwaway
//! root to install the .deb into.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::{TestDir, sh};

/// target/dist/ as `cargo xtask test` built it (`BLKPROF_DIST_DIR`); a run without it fails
/// here, saying so.
pub fn dist_dir() -> PathBuf {
    let dir = std::env::var_os("BLKPROF_DIST_DIR")
        .filter(|d| !d.is_empty())
        .map_or_else(
            || panic!("BLKPROF_DIST_DIR is not set: `cargo xtask test` builds the packages first"),
            PathBuf::from,
        );
    assert!(dir.is_dir(), "{} is not a directory", dir.display());
    dir
}

/// The one artifact in the dist directory whose name ends with `suffix` (`.deb`, `.rpm`,
/// `-oci.tar`, `-x86_64-linux-musl.tar.gz`).
pub fn artifact(suffix: &str) -> PathBuf {
    let dir = dist_dir();
    let found: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.to_string_lossy().ends_with(suffix))
        .collect();
    assert_eq!(
        found.len(),
        1,
        "one *{suffix} in {}: {found:?}",
        dir.display()
    );
    found.into_iter().next().expect("one")
}

/// The host's root under an overlay whose upper layer is a tmpfs, with /proc, /sys and /dev
/// bound in: what dpkg installs there (files, users) goes when it is dropped. As root.
pub struct ThrowawayRoot {
    /// None once dropped with something still mounted: then it is left on disk, never
    /// removed recursively through a bound /dev.
    dir: Option<TestDir>,
    root: PathBuf,
    layers: PathBuf,
}

impl ThrowawayRoot {
    #[expect(
        clippy::new_without_default,
        reason = "mounts file systems: not a default value"
    )]
    pub fn new() -> ThrowawayRoot {
        let dir = TestDir::new();
        let layers = dir.join("layers");
        let root = dir.join("root");
        let (l, r) = (layers.display(), root.display());
        sh(&format!(
            "mkdir -p {l} {r} && mount -t tmpfs blkprof-throwaway {l} && mkdir {l}/upper {l}/work \
             && mount -t overlay blkprof-throwaway -o lowerdir=/,upperdir={l}/upper,workdir={l}/work {r} \
             && for d in proc sys dev; do mount --rbind /$d {r}/$d && mount --make-rslave {r}/$d; done"
        ));
        ThrowawayRoot {
            dir: Some(dir),
            root,
            layers,
        }
    }

    /// `path` inside, as seen from the host.
    pub fn host_path(&self, path: &str) -> PathBuf {
        self.root.join(path.trim_start_matches('/'))
    }

    /// `chroot ROOT` followed by `args`, as a command to run or to wrap a tracer in.
    pub fn chroot(&self) -> Vec<String> {
        vec!["chroot".into(), self.root.display().to_string()]
    }

    /// Run `args` inside; the output, whether it succeeded or not.
    pub fn run(&self, args: &[&str]) -> Output {
        Command::new("chroot")
            .arg(&self.root)
            .args(args)
            .output()
            .expect("chroot")
    }

    /// Run `args` inside; stdout, after asserting success.
    pub fn ok(&self, args: &[&str]) -> String {
        let o = self.run(args);
        assert!(
            o.status.success(),
            "{args:?} in the throwaway root: {}\n{}",
            String::from_utf8_lossy(&o.stderr),
            String::from_utf8_lossy(&o.stdout)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// Copy a host file in (the packages live where the overlay shows them too, but a guest's
    /// shared directory may not be under its root).
    pub fn put(&self, from: &Path, to: &str) {
        std::fs::copy(from, self.host_path(to))
            .unwrap_or_else(|e| panic!("copy {} into the root: {e}", from.display()));
    }

    pub fn dir(&self) -> &TestDir {
        self.dir.as_ref().expect("the root's directory")
    }
}

impl Drop for ThrowawayRoot {
    fn drop(&mut self) {
        let unmounted = |path: &Path, recursive: bool| {
            let mut c = Command::new("umount");
            if recursive {
                c.arg("-R");
            }
            c.arg(path).status().is_ok_and(|s| s.success())
        };
        if !(unmounted(&self.root, true) && unmounted(&self.layers, false)) {
            eprintln!(
                "the throwaway root {} is still mounted: left in place",
                self.root.display()
            );
            std::mem::forget(self.dir.take());
        }
    }
}

/// As the systemd unit runs the agent: the locked-memory limit lifted by root first
/// (`LimitMEMLOCK=infinity`: kernels before 5.11 charge BPF maps to it; this machine's
/// sandboxed root may not lift it, but its kernel does not charge it), then `setpriv` to the
/// package's `blkprof` user with `CAP_BPF` and `CAP_PERFMON` only, in every set.
pub const AS_THE_UNIT_RUNS_IT: [&str; 11] = [
    "sh",
    "-c",
    "ulimit -l unlimited 2>/dev/null; exec \"$@\"",
    "sh",
    "setpriv",
    "--reuid=blkprof",
    "--regid=blkprof",
    "--clear-groups",
    "--inh-caps=-all,+bpf,+perfmon",
    "--ambient-caps=-all,+bpf,+perfmon",
    "--bounding-set=-all,+bpf,+perfmon",
];
