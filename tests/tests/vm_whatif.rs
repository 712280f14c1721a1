//! `blkprof whatif` against a real md RAID0: the same fio job (fixed seed) runs on one emulated
//! NVMe disk and on an md RAID0 of four others, both traced; whatif's prediction from the
//! single disk's trace must be within 5% of the per-member IOs the array's trace counts (its
//! `arrays` section). Needs root, fio, mdadm and five disks: it is ignored but in the nested
//! VM (`--ignored`), where `BLKPROF_VM_WHATIF` names a directory to keep the traces in:
//!
//! ```text
//! cargo test -p blkprof-e2e --test vm_whatif --no-run   # prints the test executable
//! cargo xtask vm --disks 5 --disk-mb 1024 --timeout 1500 --out target/vm-whatif -- \
//!     env BLKPROF_VM_WHATIF=$PWD/target/vm-whatif BLKPROF_BIN_DIR=$PWD/target/release \
//!     TEST_EXECUTABLE --ignored --nocapture --test-threads=1
//! ```

#![expect(
    unused_crate_dependencies,
    reason = "a test crate links all the package's dependencies; the lib target checks them"
)]

use std::path::{Path, PathBuf};

use blkprof_e2e::{Tracer, fio, md_raid0, md_stop};

/// Where to keep the traces; a run with `--ignored` outside the VM fails here, saying so.
fn out_dir() -> PathBuf {
    std::env::var_os("BLKPROF_VM_WHATIF")
        .filter(|d| !d.is_empty())
        .map_or_else(
            || {
                panic!(
                    "BLKPROF_VM_WHATIF is not set: run in `cargo xtask vm --disks 5`, see the file"
                )
            },
            PathBuf::from,
        )
}

/// The job, the same on both targets: random 4 KB and 16 KB reads and 1 MB writes, each a
/// fixed amount with a fixed seed, so both targets get the same offsets in the same order.
fn jobs(target: &str) {
    let run = |args: &[&str]| {
        let mut a = vec![
            "--name=whatif",
            "--filename",
            target,
            "--direct=1",
            "--randrepeat=1",
            "--randseed=20",
            "--size=1000m",
        ];
        a.extend_from_slice(args);
        fio(&a);
    };
    run(&[
        "--rw=randread",
        "--bs=4k",
        "--io_size=24m",
        "--ioengine=libaio",
        "--iodepth=16",
    ]);
    run(&[
        "--rw=randread",
        "--bs=16k",
        "--io_size=32m",
        "--ioengine=libaio",
        "--iodepth=8",
    ]);
    run(&[
        "--rw=randwrite",
        "--bs=1m",
        "--io_size=48m",
        "--ioengine=libaio",
        "--iodepth=4",
    ]);
}

fn trace(device: &str, target: &str, out: &Path) {
    let t = Tracer::start(&[
        "--device",
        device,
        "--output",
        out.to_str().unwrap(),
        "--quiet",
    ]);
    jobs(target);
    let f = t.stop();
    assert!(f.status.success(), "{}\n{}", f.stderr, f.stdout);
}

fn pct(a: f64, b: f64) -> f64 {
    if b == 0.0 { 0.0 } else { (a - b) * 100.0 / b }
}

#[test]
#[ignore = "needs five emulated NVMe disks in the nested VM (BLKPROF_VM_WHATIF)"]
fn whatif_predicts_a_real_md_raid0s_members() {
    let dir = out_dir();
    let members: Vec<String> = (0..4).map(|i| format!("nvme{i}n1")).collect();
    let single = "nvme4n1";
    for d in members.iter().map(String::as_str).chain([single]) {
        assert!(
            Path::new("/sys/block").join(d).exists(),
            "no {d}: run in cargo xtask vm --disks 5"
        );
    }
    std::fs::create_dir_all(&dir).unwrap();
    let single_trace = dir.join("single.blkp");
    trace(single, &format!("/dev/{single}"), &single_trace);
    let mut worst: f64 = 0.0;
    for chunk_kb in [64u64, 512] {
        md_raid0(&members, chunk_kb);
        let md_trace = dir.join(format!("md{chunk_kb}.blkp"));
        trace("md0", "/dev/md0", &md_trace);
        md_stop();

        let w = analyzer::whatif::whatif(
            &single_trace,
            &analyzer::whatif::Options {
                raid0: analyzer::whatif::Raid0::new(4, chunk_kb * 1024).unwrap(),
                device: Some(single.into()),
                offset_bytes: 0,
            },
        )
        .unwrap();
        let predicted = serde_json::to_value(&w).unwrap();
        let report = analyzer::summary::summarize(&md_trace, &analyzer::series::Options::default())
            .unwrap()
            .to_json();
        let arrays = &report.sections["arrays"]["arrays"];
        let real = arrays
            .as_array()
            .and_then(|a| a.iter().find(|a| a["name"] == "md0"))
            .expect("md0 in the array trace's arrays section");
        eprintln!(
            "chunk {chunk_kb} KB: member  slot  predicted (reads/writes, if merged)  real (reads/writes)  diff"
        );
        for slot in 0..4u64 {
            let p = &predicted["array"]["members"][usize::try_from(slot).unwrap()];
            let merged = predicted["member_mix"][usize::try_from(slot).unwrap()]["ios_if_merged"]
                .as_u64()
                .unwrap();
            let r = real["members"]
                .as_array()
                .unwrap()
                .iter()
                .find(|m| m["slot"] == slot)
                .unwrap_or_else(|| panic!("slot {slot} in {real}"));
            let n = |v: &serde_json::Value, k: &str| v[k].as_u64().unwrap_or(0);
            // The members' queues may merge the contiguous pieces of one write (6.1's did,
            // 6.12's did not): the real count is held to the nearer of whatif's two figures.
            let d_split = pct(n(p, "ios") as f64, n(r, "ios") as f64);
            let d_merged = pct(merged as f64, n(r, "ios") as f64);
            let d = if d_split.abs() <= d_merged.abs() {
                d_split
            } else {
                d_merged
            };
            let d_reads = pct(n(p, "read_ios") as f64, n(r, "read_ios") as f64);
            eprintln!(
                "  {:<8} {slot}  {} ({}/{}, {merged})  {} ({}/{})  {d:+.1}% (reads {d_reads:+.1}%)",
                r["disk"].as_str().unwrap_or("?"),
                n(p, "ios"),
                n(p, "read_ios"),
                n(p, "write_ios"),
                n(r, "ios"),
                n(r, "read_ios"),
                n(r, "write_ios"),
            );
            worst = worst.max(d.abs());
        }
    }
    assert!(
        worst <= 5.0,
        "whatif's per-member IOs differ from the real array's by up to {worst:.1}%"
    );
}
