//! Once the probe is attached: keep only the capabilities the daemon still needs and refuse
//! further program loads for the rest of the run (docs/agent/threat-model.md). The HTTP server,
//! the file writers and everything else that runs for months then run in a process that can
//! load no program, create no map and open no perf event.
//!
//! Capabilities are per thread. This runs on the main thread while it is the only one (the
//! runtime is tokio's current-thread one; its blocking pool starts later, from this thread,
//! and inherits its sets), and checks every thread afterwards.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use caps::{CapSet, Capability, CapsHashSet};

use crate::cli::Config;
use crate::probe::Probe;

/// What [`lock_down`] did: the capabilities kept, each with why; whether the seccomp filter
/// is in place; what could not be done.
#[derive(Debug, Default)]
pub struct Locked {
    pub dropped: bool,
    pub kept: Vec<(Capability, String)>,
    pub filtered: bool,
    pub warnings: Vec<String>,
}

impl Locked {
    /// The line said at the start.
    pub fn note(&self) -> String {
        let each: Vec<String> = self
            .kept
            .iter()
            .map(|(c, why)| format!("{c} ({why})"))
            .collect();
        let caps = match (self.dropped, each.is_empty()) {
            (false, _) => "capabilities NOT dropped (see the warning)".to_string(),
            (true, true) => "dropped capabilities after attaching; kept none".to_string(),
            (true, false) => format!(
                "dropped capabilities after attaching; kept {}",
                each.join(", ")
            ),
        };
        let loads = if self.filtered {
            "further program loads refused (seccomp)"
        } else {
            "further program loads NOT refused (no seccomp filter)"
        };
        format!("{caps}; {loads}")
    }
}

/// Drop what the run no longer needs, say what is kept, warn about what could not be done; the
/// run goes on whatever happens here. Called once, right after the probe is attached and the
/// first file is open.
pub fn after_attach(probe: &Probe, cfg: &Config) {
    if cfg.keep_privileges {
        eprintln!(
            "blkprof-trace: --keep-privileges: the tracer keeps its capabilities and may load \
             programs for its whole run"
        );
        return;
    }
    let locked = lock_down(|| probe.maps_readable(), &dirs_written_later(cfg));
    for w in &locked.warnings {
        eprintln!("blkprof-trace: warning: {w}");
    }
    eprintln!("blkprof-trace: {}", locked.note());
}

/// Where the run creates or deletes files after the start: rotated files (and `--keep`'s
/// deletions) beside the output, the flight recorder's dumps.
fn dirs_written_later(cfg: &Config) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Some(out) = &cfg.output
        && (cfg.rotate_size.is_some() || cfg.rotate_time.is_some())
    {
        dirs.push(match out.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        });
    }
    if let Some(f) = &cfg.flight_recorder {
        dirs.push(f.dir.path().to_path_buf());
    }
    dirs
}

/// `no_new_privs`, the capabilities dropped, the threads checked, the filter installed.
/// `maps_readable` reads one of the probe's maps; `written_later` are the directories files go
/// to after now.
pub fn lock_down(maps_readable: impl Fn() -> bool, written_later: &[PathBuf]) -> Locked {
    let mut out = Locked::default();
    let (one, zero): (libc::c_ulong, libc::c_ulong) = (1, 0);
    // SAFETY: prctl with integer arguments only (unsigned longs, as the kernel reads them).
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, one, zero, zero, zero) } != 0 {
        out.warnings.push(format!(
            "cannot set no_new_privs: {}",
            io::Error::last_os_error()
        ));
    }
    let dropped = drop_capabilities(&maps_readable, written_later, &mut out);
    out.dropped = dropped.is_ok();
    if let Err(e) = dropped {
        // Stopped halfway, what is left permitted is made effective again: the map reads may
        // need it.
        let restored = caps::read(None, CapSet::Permitted)
            .and_then(|p| caps::set(None, CapSet::Effective, &p).map(|()| p));
        let held = match restored {
            Ok(p) => {
                let mut names: Vec<String> = p.iter().map(ToString::to_string).collect();
                names.sort();
                names.join(" ")
            }
            Err(e) => format!("unknown: {e}"),
        };
        out.warnings.push(format!(
            "could not drop capabilities ({e}); the tracer keeps {held}"
        ));
        out.kept.clear();
    }
    match install_filter() {
        Ok(()) => out.filtered = true,
        Err(e) => out.warnings.push(format!(
            "no seccomp filter ({e}): further program loads are not refused"
        )),
    }
    // Where the drop failed the warning above says what is held.
    let kept: u64 = if out.dropped {
        out.kept.iter().map(|(c, _)| c.bitmask()).sum()
    } else {
        u64::MAX
    };
    out.warnings.extend(check_threads(kept, out.filtered));
    out
}

/// Every set emptied but for what the kernel still needs: the privilege `bpf()` wants on kernels
/// that gate every command with it, and `CAP_DAC_OVERRIDE` where root would otherwise not be
/// able to write its later files.
fn drop_capabilities(
    maps_readable: &impl Fn() -> bool,
    written_later: &[PathBuf],
    out: &mut Locked,
) -> Result<(), caps::errors::CapsError> {
    let permitted = caps::read(None, CapSet::Permitted)?;
    // CAP_SYS_ADMIN stands in for CAP_BPF where a runtime grants only the former.
    let bpf = [Capability::CAP_BPF, Capability::CAP_SYS_ADMIN]
        .into_iter()
        .find(|c| permitted.contains(c));
    let dac = Some(Capability::CAP_DAC_OVERRIDE).filter(|c| permitted.contains(c));
    let candidates: CapsHashSet = bpf.into_iter().chain(dac).collect();
    // CAP_SETPCAP (root's) stays effective until the bounding set is cut to what is kept:
    // then nothing run later could get the rest back, even without no_new_privs. It has no
    // part in the two questions asked meanwhile.
    let setpcap: CapsHashSet = Some(Capability::CAP_SETPCAP)
        .filter(|c| permitted.contains(c))
        .into_iter()
        .collect();
    caps::clear(None, CapSet::Ambient)?;
    caps::clear(None, CapSet::Inheritable)?;
    caps::set(None, CapSet::Effective, &setpcap)?;
    caps::set(None, CapSet::Permitted, &(&candidates | &setpcap))?;
    // Tried without, not assumed by kernel version: on older kernels (Debian's 5.10, not its
    // 6.1; the change came in about 5.19) kernel.unprivileged_bpf_disabled refuses every bpf()
    // command, map reads included, to a process without CAP_BPF; later ones gate only what
    // creates maps and programs.
    let mut keep = CapsHashSet::new();
    if let Some(c) = bpf
        && !maps_readable()
    {
        keep.insert(c);
        out.kept
            .push((c, "this kernel needs it to read the probe's maps".into()));
    }
    if let Some(c) = dac
        && let Some(dir) = written_later.iter().find(|d| !writable(d))
    {
        keep.insert(c);
        out.kept
            .push((c, format!("files are created in {} later", dir.display())));
    }
    if !setpcap.is_empty() {
        for c in caps::read(None, CapSet::Bounding)? {
            if !keep.contains(&c) {
                caps::drop(None, CapSet::Bounding, c)?;
            }
        }
    }
    caps::set(None, CapSet::Effective, &keep)?;
    caps::set(None, CapSet::Permitted, &keep)?;
    Ok(())
}

/// Whether this process, with its effective capabilities now, may create and delete files in
/// `dir` (faccessat2 with `AT_EACCESS`: the C libraries' `faccessat` guesses for root).
fn writable(dir: &Path) -> bool {
    let Ok(path) = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()) else {
        return false;
    };
    // SAFETY: a NUL-terminated path that outlives the call; integer flags.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_faccessat2,
            libc::AT_FDCWD,
            path.as_ptr(),
            libc::W_OK | libc::X_OK,
            libc::AT_EACCESS,
        )
    };
    rc == 0
}

/// Warnings for the threads that hold a capability beyond `kept` (a mask), or lack the filter.
fn check_threads(kept: u64, filtered: bool) -> Vec<String> {
    let mut warnings = Vec::new();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return vec!["cannot list /proc/self/task to check every thread's capabilities".into()];
    };
    for task in tasks.filter_map(Result::ok) {
        let Ok(status) = std::fs::read_to_string(task.path().join("status")) else {
            continue;
        };
        let s = ThreadStatus::parse(&status);
        let tid = task.file_name().to_string_lossy().into_owned();
        let extra = s.any_capability() & !kept;
        if extra != 0 {
            warnings.push(format!(
                "thread {tid} ({}) still holds capabilities {extra:#x}",
                s.name
            ));
        }
        if filtered && s.seccomp != Some(2) {
            warnings.push(format!("thread {tid} ({}) has no seccomp filter", s.name));
        }
    }
    warnings
}

/// The fields of a /proc/PID/status (or task/TID/status) that say what a thread may do.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ThreadStatus {
    pub name: String,
    /// `CapInh`, `CapPrm`, `CapEff`, `CapBnd`, `CapAmb`.
    pub inheritable: u64,
    pub permitted: u64,
    pub effective: u64,
    pub bounding: u64,
    pub ambient: u64,
    pub no_new_privs: Option<u32>,
    /// 0 none, 1 strict, 2 filter.
    pub seccomp: Option<u32>,
}

impl ThreadStatus {
    pub fn parse(status: &str) -> ThreadStatus {
        let fields: BTreeMap<&str, &str> = status
            .lines()
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k, v.trim()))
            .collect();
        let mask = |k: &str| {
            fields
                .get(k)
                .and_then(|v| u64::from_str_radix(v, 16).ok())
                .unwrap_or(0)
        };
        let number = |k: &str| fields.get(k).and_then(|v| v.parse().ok());
        ThreadStatus {
            name: fields.get("Name").copied().unwrap_or_default().to_string(),
            inheritable: mask("CapInh"),
            permitted: mask("CapPrm"),
            effective: mask("CapEff"),
            bounding: mask("CapBnd"),
            ambient: mask("CapAmb"),
            no_new_privs: number("NoNewPrivs"),
            seccomp: number("Seccomp"),
        }
    }

    /// Every capability the thread holds or could raise (not the bounding set, a limit).
    pub fn any_capability(&self) -> u64 {
        self.inheritable | self.permitted | self.effective | self.ambient
    }
}

/// The x32 ABI's numbers for the calls [`filter`] refuses: an `x86_64` process may call them
/// too (`arch/x86/entry/syscalls/syscall_64.tbl`: `__X32_SYSCALL_BIT` on the common numbers,
/// 512 and up for the x32 forms), where the kernel allows x32.
#[cfg(target_arch = "x86_64")]
const X32_REFUSED: [i64; 9] = [
    0x4000_0000 + 321, // bpf
    0x4000_0000 + 298, // perf_event_open
    0x4000_0000 + 175, // init_module
    0x4000_0000 + 313, // finit_module
    0x4000_0000 + 320, // kexec_file_load
    0x4000_0000 + 521, // ptrace
    0x4000_0000 + 528, // kexec_load
    0x4000_0000 + 539, // process_vm_readv
    0x4000_0000 + 540, // process_vm_writev
];

/// The filter: EPERM for `bpf()` commands that load, create or attach (map reads and updates,
/// `BPF_OBJ_GET_INFO_BY_FD` and closing a link, which detaches it, stay allowed), for
/// `perf_event_open`, module and kexec loads, ptrace and reading or writing another process's
/// memory; everything else allowed.
#[cfg(target_arch = "x86_64")]
pub fn filter() -> Result<seccompiler::BpfProgram, seccompiler::Error> {
    use aya_obj::generated::bpf_cmd;
    use seccompiler::{
        SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
        SeccompRule, TargetArch,
    };
    let commands = [
        bpf_cmd::BPF_MAP_CREATE,
        bpf_cmd::BPF_PROG_LOAD,
        bpf_cmd::BPF_BTF_LOAD,
        bpf_cmd::BPF_PROG_ATTACH,
        bpf_cmd::BPF_PROG_DETACH,
        bpf_cmd::BPF_RAW_TRACEPOINT_OPEN,
        bpf_cmd::BPF_LINK_CREATE,
        bpf_cmd::BPF_LINK_UPDATE,
    ];
    let bpf = commands
        .into_iter()
        .map(|cmd| {
            SeccompRule::new(vec![SeccompCondition::new(
                0,
                SeccompCmpArgLen::Dword,
                SeccompCmpOp::Eq,
                u64::from(cmd as u32),
            )?])
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut rules = BTreeMap::from([(libc::SYS_bpf, bpf)]);
    for nr in [
        libc::SYS_perf_event_open,
        libc::SYS_init_module,
        libc::SYS_finit_module,
        libc::SYS_kexec_load,
        libc::SYS_kexec_file_load,
        libc::SYS_ptrace,
        libc::SYS_process_vm_readv,
        libc::SYS_process_vm_writev,
    ]
    .into_iter()
    .chain(X32_REFUSED)
    {
        rules.insert(nr, Vec::new());
    }
    let errno = u32::try_from(libc::EPERM).unwrap_or(1);
    SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(errno),
        TargetArch::x86_64,
    )?
    .try_into()
    .map_err(seccompiler::Error::from)
}

/// The filter on every thread (TSYNC); where seccomp(2) itself is refused (a service manager's
/// own filter may lack it) and this is the only thread, prctl(2) installs it.
#[cfg(target_arch = "x86_64")]
fn install_filter() -> Result<(), String> {
    let prog = filter().map_err(|e| format!("building it failed: {e}"))?;
    match seccompiler::apply_filter_all_threads(&prog) {
        Ok(()) => Ok(()),
        Err(seccompiler::Error::Seccomp(e)) if thread_count() == Some(1) => {
            let fprog = libc::sock_fprog {
                len: u16::try_from(prog.len()).map_err(|_| "too long".to_string())?,
                filter: prog.as_ptr().cast_mut().cast(),
            };
            // SAFETY: the program outlives the call; the kernel copies it.
            let rc = unsafe {
                libc::prctl(
                    libc::PR_SET_SECCOMP,
                    libc::c_ulong::from(libc::SECCOMP_MODE_FILTER),
                    &raw const fprog,
                    0,
                    0,
                )
            };
            if rc == 0 {
                Ok(())
            } else {
                Err(format!(
                    "seccomp(2): {e}; prctl(2): {}",
                    io::Error::last_os_error()
                ))
            }
        }
        Err(e) => Err(e.to_string()),
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn install_filter() -> Result<(), String> {
    Err(format!(
        "the filter is built for x86_64 only, this is {}",
        std::env::consts::ARCH
    ))
}

#[cfg(target_arch = "x86_64")]
fn thread_count() -> Option<usize> {
    Some(std::fs::read_dir("/proc/self/task").ok()?.count())
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATUS: &str = "Name:\tblkprof-trace\nUmask:\t0022\nState:\tS (sleeping)\n\
        Tgid:\t4242\nPid:\t4242\nCapInh:\t0000000000000000\nCapPrm:\t0000008000000000\n\
        CapEff:\t0000008000000000\nCapBnd:\t000001ffffffffff\nCapAmb:\t0000000000000000\n\
        NoNewPrivs:\t1\nSeccomp:\t2\nSeccomp_filters:\t1\n";

    #[test]
    fn a_status_file_gives_the_sets_no_new_privs_and_seccomp() {
        let s = ThreadStatus::parse(STATUS);
        assert_eq!(s.name, "blkprof-trace");
        assert_eq!(s.effective, Capability::CAP_BPF.bitmask());
        assert_eq!(s.permitted, 1 << 39);
        assert_eq!(s.bounding, 0x1ff_ffff_ffff);
        assert_eq!((s.inheritable, s.ambient), (0, 0));
        assert_eq!(s.no_new_privs, Some(1));
        assert_eq!(s.seccomp, Some(2));
        assert_eq!(s.any_capability(), 1 << 39);
        // Kernels before 4.10 have no NoNewPrivs line; a missing field is not a 0.
        let old = ThreadStatus::parse("CapEff:\t0000003fffffffff\n");
        assert_eq!(
            (old.effective, old.no_new_privs, old.seccomp),
            (0x3f_ffff_ffff, None, None)
        );
    }

    #[test]
    fn the_note_names_what_is_kept() {
        let mut l = Locked {
            dropped: true,
            filtered: true,
            ..Locked::default()
        };
        assert_eq!(
            l.note(),
            "dropped capabilities after attaching; kept none; further program loads refused \
             (seccomp)"
        );
        l.kept.push((
            Capability::CAP_BPF,
            "this kernel needs it to read the probe's maps".into(),
        ));
        assert!(
            l.note()
                .contains("kept CAP_BPF (this kernel needs it to read the probe's maps); further")
        );
    }

    /// In a child process (the filter stays for life): what the filter lists is refused with
    /// EPERM, and a call it does not list answers as it did before.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_filter_refuses_loads_and_leaves_map_reads_alone() {
        use aya_obj::generated::bpf_cmd;
        let prog = filter().expect("the filter builds");
        let errno_of = |nr: i64, cmd: u32| -> i32 {
            // SAFETY: a null attribute pointer: the kernel refuses or fails the copy, nothing
            // is read or written here.
            let rc = unsafe { libc::syscall(nr, cmd, std::ptr::null::<u8>(), 0u32) };
            if rc < 0 {
                io::Error::last_os_error().raw_os_error().unwrap_or(0)
            } else {
                0
            }
        };
        let lookup = bpf_cmd::BPF_MAP_LOOKUP_ELEM as u32;
        let before = errno_of(libc::SYS_bpf, lookup);
        // SAFETY: fork in a test process: the child makes raw syscalls only, then _exit.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork");
        if pid == 0 {
            let fprog = libc::sock_fprog {
                len: u16::try_from(prog.len()).unwrap_or(0),
                filter: prog.as_ptr().cast_mut().cast(),
            };
            // SAFETY: raw syscalls on memory that outlives them; the child ends with _exit.
            unsafe {
                let (one, zero): (libc::c_ulong, libc::c_ulong) = (1, 0);
                libc::prctl(libc::PR_SET_NO_NEW_PRIVS, one, zero, zero, zero);
                if libc::prctl(
                    libc::PR_SET_SECCOMP,
                    libc::c_ulong::from(libc::SECCOMP_MODE_FILTER),
                    &raw const fprog,
                    0,
                    0,
                ) != 0
                {
                    libc::_exit(10);
                }
            }
            let refused = [
                (libc::SYS_bpf, bpf_cmd::BPF_PROG_LOAD as u32),
                (libc::SYS_bpf, bpf_cmd::BPF_MAP_CREATE as u32),
                (libc::SYS_bpf, bpf_cmd::BPF_LINK_CREATE as u32),
                (libc::SYS_perf_event_open, 0),
                // An unknown request: EIO where it is not refused.
                (libc::SYS_ptrace, u32::MAX),
                (0x4000_0000 + 321, 0),
            ];
            let code = if refused
                .iter()
                .any(|&(nr, c)| errno_of(nr, c) != libc::EPERM)
            {
                11
            } else if errno_of(libc::SYS_bpf, lookup) != before {
                12
            } else {
                0
            };
            // SAFETY: ends the child without running the test harness's exit handlers.
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        // SAFETY: waits for the child forked above.
        unsafe { libc::waitpid(pid, &raw mut status, 0) };
        assert!(libc::WIFEXITED(status), "{status:#x}");
        assert_eq!(
            libc::WEXITSTATUS(status),
            0,
            "10: not installed, 11: a listed call not refused, 12: a map lookup changed"
        );
    }
}
