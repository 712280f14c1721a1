//! What the benchmarks read from the machine: CPU time (of all CPUs, of one process), peak
//! memory, a device's reads, and the eBPF programs' own run time (`bpf_stats`).

use std::process::Command;

use anyhow::{Context as _, Result};

use crate::util::output;

/// (busy, all) jiffies of all CPUs together, from /proc/stat; idle and iowait are not busy.
pub(super) fn cpu_jiffies() -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let v: Vec<u64> = stat
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    let all: u64 = v.iter().take(8).sum();
    let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
    (all - idle, all)
}

/// Reads completed on device `name` so far (/proc/diskstats).
pub(super) fn diskstats_reads(name: &str) -> Result<u64> {
    let text = std::fs::read_to_string("/proc/diskstats")?;
    let m = tracer_common::format::parse_diskstats(&text, 0);
    m.values()
        .find(|d| d.name == name)
        .map(|d| d.read_ios)
        .context("device not in /proc/diskstats")
}

/// CPU time of all of a process's threads, in seconds, from each thread's schedstat (time on
/// CPU in ns; /proc/PID/stat counts in jiffies, 50 ns per IO at 20k IOPS over 10 s).
pub(super) fn proc_cpu_s(pid: u32) -> f64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0.0;
    };
    tasks
        .filter_map(Result::ok)
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum::<u64>() as f64
        / 1e9
}

/// A process's peak resident memory (`VmHWM`), in MiB.
pub(super) fn proc_hwm_mib(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| {
            v.split_whitespace()
                .next()
                .and_then(|n| n.parse::<f64>().ok())
        })
        .unwrap_or(0.0)
        / 1024.0
}

/// (sum of `run_time_ns`, sum of `run_cnt` of `complete_name`) of loaded programs whose name matches.
pub(super) fn prog_stats(
    matches: impl Fn(&str) -> bool,
    complete_name: &str,
) -> Result<(u64, u64)> {
    let out = output(Command::new("bpftool").args(["prog", "show", "-j"]))?;
    let v: serde_json::Value = serde_json::from_str(&out)?;
    let (mut ns, mut completions) = (0, 0);
    for p in v.as_array().into_iter().flatten() {
        let name = p["name"].as_str().unwrap_or("");
        if matches(name) {
            ns += p["run_time_ns"].as_u64().unwrap_or(0);
            if name.contains(complete_name) {
                completions += p["run_cnt"].as_u64().unwrap_or(0);
            }
        }
    }
    Ok((ns, completions))
}

/// Turn the kernel's per-program run-time statistics on or off.
pub(super) fn bpf_stats(on: bool) -> Result<()> {
    std::fs::write(
        "/proc/sys/kernel/bpf_stats_enabled",
        if on { "1" } else { "0" },
    )
    .context("setting kernel.bpf_stats_enabled")
}

/// Idle time of all CPUs so far, in ns: from cpuidle's per-state residency (µs) where the
/// kernel has a cpuidle driver, else from /proc/stat (idle + iowait, in `USER_HZ` ticks).
pub(super) fn idle_ns() -> u64 {
    let mut us = 0u64;
    let mut found = false;
    if let Ok(cpus) = std::fs::read_dir("/sys/devices/system/cpu") {
        for c in cpus.filter_map(Result::ok) {
            let name = c.file_name();
            let name = name.to_string_lossy();
            if !name.starts_with("cpu") || !name[3..].chars().all(|x| x.is_ascii_digit()) {
                continue;
            }
            let Ok(states) = std::fs::read_dir(c.path().join("cpuidle")) else {
                continue;
            };
            for s in states.filter_map(Result::ok) {
                if let Some(t) = std::fs::read_to_string(s.path().join("time"))
                    .ok()
                    .and_then(|t| t.trim().parse::<u64>().ok())
                {
                    us += t;
                    found = true;
                }
            }
        }
    }
    if found {
        return us * 1000;
    }
    let (busy, all) = cpu_jiffies();
    (all - busy) * 10_000_000
}
