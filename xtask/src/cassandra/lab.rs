//! `cargo xtask cassandra --raid0 N`: the run inside the VM lab, on an md RAID0 of N emulated
//! NVMe disks.

use anyhow::{Context as _, Result, bail};

use super::{Options, PREBUILT_ENV, prepare};

/// `--raid0`: the Java side built here, then this same command inside the VM lab with N NVMe
/// disks, the node's data on their md RAID0; the run's files land in --out as on the host.
pub(super) fn in_vm(o: &Options) -> Result<()> {
    let n = o.raid0.context("--raid0")?;
    if !(4..=4096).contains(&o.chunk_kb) || !o.chunk_kb.is_power_of_two() {
        bail!(
            "--chunk-kb {}: md RAID0 takes a power of two from 4 to 4096 KB",
            o.chunk_kb
        );
    }
    prepare()?;
    std::fs::create_dir_all(&o.out)
        .with_context(|| format!("cannot create {}", o.out.display()))?;
    let out = o.out.canonicalize()?;
    let xtask = std::env::current_exe().context("the xtask binary")?;
    let mut cmd: Vec<String> = vec![
        "env".into(),
        format!("{PREBUILT_ENV}=1"),
        xtask.display().to_string(),
        "cassandra".into(),
        "--prebuilt".into(),
        "--in-vm".into(),
        format!("--raid0={n}"),
        format!("--chunk-kb={}", o.chunk_kb),
        format!("--duration={}", o.duration),
        format!("--records={}", o.records),
        format!("--threads={}", o.threads),
        format!("--out={}", out.display()),
        format!("--disk-gib={}", o.disk_gib),
        format!("--page-cache-mib={}", o.page_cache_mib),
        format!("--field-count={}", o.field_count),
        format!("--field-length={}", o.field_length),
    ];
    if let Some(kb) = o.read_ahead_kb {
        cmd.push(format!("--read-ahead-kb={kb}"));
    }
    if o.write_all_fields {
        cmd.push("--write-all-fields".into());
    }
    for l in &o.labels {
        cmd.push(format!("--label={l}"));
    }
    let vm = crate::vm::Options {
        kernel: "6.12".into(),
        disks: n,
        // The array holds the disk image's size, spread over the members.
        disk_mb: (o.disk_gib * 1024).div_ceil(u64::from(n)).max(1024),
        cpus: 2,
        // The node's 2 GiB heap, YCSB's JVM, the guest's page cache.
        memory_mb: 6144,
        timeout: 3600 + o.duration * 2,
        mttcg: false,
        out: Some(out.clone()),
        command: cmd,
        console: None,
    };
    eprintln!(
        "cassandra: in the VM lab on md RAID0 of {n} NVMe disks, chunk {} KB (the guest's CPU is emulated: expect tens of minutes)",
        o.chunk_kb
    );
    let r = crate::vm::run_vm(&vm)?;
    if r.code != 0 {
        bail!(
            "the node's run in the VM failed (exit code {}); the guest's dmesg: {}",
            r.code,
            r.out.join("dmesg.txt").display()
        );
    }
    std::fs::write(out.join("vm-seconds.txt"), format!("{:.0}", r.seconds))?;
    println!("{}", std::fs::read_to_string(out.join("report.txt"))?);
    Ok(())
}
