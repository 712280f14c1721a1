//! `blkprof whatif`: planted IOs whose members, pieces and queue depths were worked out by
//! hand, the JSON a script reads, and the CLI's errors.

#![expect(
    unused_crate_dependencies,
    reason = "a test crate links all the package's dependencies; the lib target checks them"
)]

#[expect(dead_code, reason = "each test crate uses part of the shared helpers")]
mod common;

use analyzer::synth::{BASE_NS, Io};
use analyzer::whatif::{Options, Raid0, whatif};
use common::{blkprof, trace};
use serde_json::Value;
use tracer_common::op::{Op, flags};

const K: u64 = 1024;
const T0: u64 = BASE_NS + 1_000_000_000;

fn io(op: Op, at: u64, bytes: u64, (enter, issue, complete): (u64, u64, u64)) -> Io {
    Io {
        enter_ns: T0 + enter,
        issue_ns: if issue == 0 { 0 } else { T0 + issue },
        complete_ns: T0 + complete,
        op,
        bytes: u32::try_from(bytes).unwrap(),
        sector: at / 512,
        os_inflight: 1,
        flags: 0,
    }
}

/// On 4 members with 64 KiB chunks (chunk k on member k mod 4, at (k / 4) * 64 KiB there):
/// A  read 4 KiB at 68 KiB: chunk 1 -> member 1
/// B  write 8 KiB at 60 KiB: the end of chunk 0 (member 0) and the start of chunk 1 (member 1);
///    issued while A is in flight on member 1
/// C  write 320 KiB at 224 KiB: half of chunk 3 (member 3), chunks 4..7 (every member's
///    second), half of chunk 8 (member 0's third): 6 pieces, two each on members 0 and 3
/// D  read 1 KiB at 256 KiB - 512: the last sector of member 3's chunk 3, the first of
///    member 0's chunk 4
/// a 2 MiB discard at 0: 512 KiB on every member
/// a flush (the device's own) and an absorbed empty flush (never issued): every member
/// a driver passthrough command: left out
fn planted() -> Vec<Io> {
    let mut flush = io(Op::Flush, 0, 0, (80_000, 80_100, 90_000));
    flush.flags = flags::FLUSH_RQ | flags::PREFLUSH;
    flush.sector = u64::MAX;
    let mut absorbed = io(Op::Flush, 0, 0, (100_000, 0, 100_500));
    absorbed.flags = flags::NEVER_ISSUED;
    vec![
        io(Op::Read, 68 * K, 4 * K, (100, 200, 10_000)),
        io(Op::Write, 60 * K, 8 * K, (400, 500, 1_000)),
        io(Op::Write, 224 * K, 320 * K, (20_000, 20_100, 30_000)),
        io(Op::Read, 256 * K - 512, K, (40_000, 40_100, 50_000)),
        io(Op::Discard, 0, 2048 * K, (60_000, 60_100, 70_000)),
        flush,
        absorbed,
        io(Op::DrvIn, 0, 4 * K, (110_000, 110_100, 120_000)),
    ]
}

#[test]
fn planted_ios_land_on_the_members_md_puts_them_on() {
    let dir = tempfile::tempdir().unwrap();
    let p = trace(dir.path(), "t.blkp", &mut planted());
    let opts = Options {
        raid0: Raid0::new(4, 64 * K).unwrap(),
        device: None,
        offset_bytes: 0,
    };
    let w = whatif(&p, &opts).unwrap();
    assert_eq!(w.device, "nvme0n1");
    let t = &w.trace_ios;
    assert_eq!(
        (t.ios, t.reads, t.writes, t.discards, t.flushes),
        (8, 2, 2, 1, 2)
    );
    assert_eq!(
        (t.never_issued, t.left_out_ops, t.left_out_damaged),
        (1, 1, 0)
    );
    // Requests per member: B, C x2, D, discard, 2 flushes | A, B, C, discard, 2 flushes |
    // C, discard, 2 flushes | C x2, D, discard, 2 flushes.
    assert_eq!(
        w.member_ios(),
        [
            (7, 4 * K + 64 * K + 32 * K + 512 + 512 * K),
            (6, 4 * K + 4 * K + 64 * K + 512 * K),
            (4, 64 * K + 512 * K),
            (6, 32 * K + 64 * K + 512 + 512 * K),
        ]
    );
    assert!((w.imbalance_ios() - 7.0 / (23.0 / 4.0)).abs() < 1e-9);
    // B, C, D and the discard reach several members: 2 + 6 + 2 + 4 pieces.
    let s = &w.splits;
    assert_eq!(
        (s.data_ios, s.split_ios, s.pieces_of_split, s.member_ios),
        (5, 4, 14, 23)
    );
    assert_eq!(s.pct_split, 80.0);
    let merged: Vec<u64> = w.member_mix.iter().map(|m| m.ios_if_merged).collect();
    assert_eq!(
        merged,
        [6, 6, 4, 5],
        "C's two pieces on members 0 and 3 merge"
    );
    // Queue depth at each issue, this request included: on member 1 B finds A in flight
    // (2); on members 0 and 3 C's two pieces are in flight together (2 each); the absorbed
    // flush was never issued and counts 0, as the arrays section counts it.
    let q = w.member_queues();
    assert_eq!(q[0], (8.0 / 7.0, 2));
    assert_eq!(q[1], (6.0 / 6.0, 2));
    assert_eq!(q[2], (3.0 / 4.0, 1));
    assert_eq!(q[3], (7.0 / 6.0, 2));
    // Member 0's sizes: 4 KiB, 64 KiB, 32 KiB, 512 B, 512 KiB (flushes carry no data).
    let classes: Vec<&str> = w.member_mix[0]
        .block_sizes
        .iter()
        .map(|z| z.class.as_str())
        .collect();
    assert_eq!(classes.len(), 5, "{classes:?}");
    assert!(classes.contains(&"512B") && classes.contains(&"512KB"));
}

#[test]
fn offset_shifts_the_mapping_and_leaves_out_what_lies_before() {
    let dir = tempfile::tempdir().unwrap();
    let p = trace(dir.path(), "t.blkp", &mut planted());
    let opts = Options {
        raid0: Raid0::new(4, 64 * K).unwrap(),
        device: Some("259:1".into()),
        offset_bytes: 64 * K,
    };
    let w = whatif(&p, &opts).unwrap();
    // B (at 60 KiB) and the discard (at 0) start before the array. A now lies in chunk 0
    // (member 0); C runs from 160 KiB to 480 KiB: half of chunk 2, chunks 3..6, half of
    // chunk 7 (members 2, 3, 0, 1, 2, 3); D ends chunk 2 and starts chunk 3. Two flushes each.
    assert_eq!(w.trace_ios.left_out_before_offset, 2);
    assert_eq!(w.splits.data_ios, 3);
    assert_eq!(
        w.member_ios().iter().map(|m| m.0).collect::<Vec<_>>(),
        [1 + 1 + 2, 1 + 2, 2 + 1 + 2, 2 + 1 + 2]
    );
}

#[test]
fn json_has_the_arrays_section_shape() {
    let dir = tempfile::tempdir().unwrap();
    let p = trace(dir.path(), "t.blkp", &mut planted());
    let o = blkprof(&[
        "whatif",
        "--raid0",
        "4",
        "--chunk",
        "64KiB",
        "--json",
        p.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["level"], "raid0");
    assert_eq!(v["members"], 4);
    assert_eq!(v["chunk_bytes"], 65536);
    assert_eq!(v["splits"]["split_ios"], 4);
    let a = &v["array"];
    assert_eq!(a["ios"], 23);
    assert_eq!(a["chunk_bytes"], 65536);
    let m = a["members"].as_array().unwrap();
    assert_eq!(m.len(), 4);
    let keys: Vec<&str> = m[0]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    for k in [
        "disk",
        "slot",
        "ios",
        "bytes",
        "read_ios",
        "write_ios",
        "pct_ios",
        "pct_bytes",
        "mean_request_bytes",
        "queue_depth_mean",
        "queue_depth_max",
        "p99_total_us",
    ] {
        assert!(keys.contains(&k), "{k} in {keys:?}");
    }
    assert_eq!(m[1]["disk"], "member1");
    assert_eq!(m[1]["slot"], 1);
    assert!(
        m[0]["p99_total_us"].is_null(),
        "a model predicts no latency"
    );
    assert_eq!(v["member_mix"][0]["ios_if_merged"], 6);
    assert!(!v["not_modelled"].as_array().unwrap().is_empty());
}

#[test]
fn text_reads_as_the_arrays_section() {
    let dir = tempfile::tempdir().unwrap();
    let p = trace(dir.path(), "t.blkp", &mut planted());
    let o = blkprof(&[
        "whatif",
        "--raid0",
        "4",
        "--chunk",
        "64k",
        p.to_str().unwrap(),
    ]);
    assert!(o.status.success());
    let t = String::from_utf8(o.stdout).unwrap();
    assert!(
        t.contains("array what-if (raid0, chunk 64KB): 23 IOs"),
        "{t}"
    );
    assert!(t.contains("split across members: 4 of 5 IOs (80.0%), into 14 pieces"));
    assert!(
        t.contains("  member0      slot 0               7 IOs"),
        "{t}"
    );
    assert!(t.contains("not modelled:"));
}

#[test]
fn a_trace_without_ios_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let p = trace(dir.path(), "t.blkp", &mut []);
    let o = blkprof(&[
        "whatif",
        "--raid0",
        "2",
        "--chunk",
        "4K",
        p.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0));
    let t = String::from_utf8(o.stdout).unwrap();
    assert!(
        t.contains("no IOs of nvme0n1 in the trace: nothing to map"),
        "{t}"
    );
    let o = blkprof(&[
        "whatif",
        "--raid0",
        "2",
        "--chunk",
        "4K",
        "--json",
        p.to_str().unwrap(),
    ]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["array"]["ios"], 0);
    assert_eq!(v["array"]["imbalance_ios"], 0.0);
}

#[test]
fn bad_shapes_and_inputs_exit_2_with_the_rule() {
    let dir = tempfile::tempdir().unwrap();
    let p = trace(dir.path(), "t.blkp", &mut planted());
    let p = p.to_str().unwrap();
    for (args, says) in [
        (vec!["--raid0", "1", "--chunk", "64K"], "at least 2"),
        (vec!["--raid0", "0", "--chunk", "64K"], "at least 2"),
        (vec!["--raid0", "4", "--chunk", "6K"], "multiple of 4 KiB"),
        (vec!["--raid0", "4", "--chunk", "0"], "multiple of 4 KiB"),
        (vec!["--raid0", "4", "--chunk", "64X"], "unknown unit"),
        (vec!["--raid0", "-3", "--chunk", "64K"], "--raid0"),
        (
            vec!["--raid0", "4", "--chunk", "64K", "--device", "sdz"],
            "no device sdz (it has: nvme0n1)",
        ),
        (
            vec!["--raid0", "4", "--chunk", "64K", "--offset", "1000"],
            "multiple of 512",
        ),
        (vec!["--chunk", "64K"], "--raid0"),
    ] {
        let mut a = vec!["whatif"];
        a.extend(&args);
        a.push(p);
        let o = blkprof(&a);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
    let o = blkprof(&[
        "whatif",
        "--raid0",
        "4",
        "--chunk",
        "64K",
        dir.path().join("missing.blkp").to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2));
}
