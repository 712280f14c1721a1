//! `blkprof import --from blk` on hand-written blkparse sequences with merges, splits and
//! requeues: every IO gets the queue and issue times of its own request, and nothing a
//! merge or requeue leaves behind pairs with a later, unrelated IO at the same sector.

#![expect(
    unused_crate_dependencies,
    reason = "a test crate links all the package's dependencies; the lib target checks them"
)]

use std::path::Path;

use analyzer::import::{BlkStats, import_blk};
use tracer_common::format::{IoRecord, TraceReader};
use tracer_common::op::flags;

/// blkparse's default line: `dev cpu seq time pid action rwbs rest`, time in microseconds.
fn line(t_us: u64, pid: u32, action: &str, rwbs: &str, rest: &str) -> String {
    format!(
        "  7,0    0        1 {:>5}.{:09}  {pid:>5}  {action} {rwbs:>3} {rest}",
        t_us / 1_000_000,
        t_us % 1_000_000 * 1000
    )
}

fn import(lines: &[String]) -> Vec<IoRecord> {
    import_with_stats(lines).0
}

fn import_with_stats(lines: &[String]) -> (Vec<IoRecord>, BlkStats) {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("blk.txt");
    std::fs::write(&input, lines.join("\n")).unwrap();
    let out = dir.path().join("out.blkp");
    let st = import_blk(&input, &out, false).unwrap();
    (read(&out), st.blk)
}

fn read(p: &Path) -> Vec<IoRecord> {
    let mut r = TraceReader::open(p).unwrap();
    let mut all = Vec::new();
    let mut buf = Vec::new();
    while r.next_chunk(&mut buf).unwrap() {
        all.extend_from_slice(&buf);
    }
    all.sort_by_key(|r| r.complete_ns);
    all
}

const US: u64 = 1000;
const S: u64 = 1_000_000;

#[test]
fn a_back_merged_bio_leaves_no_queue_event_for_a_later_io() {
    let l = [
        line(S, 100, "Q", "WS", "0 + 8 [fio]"),
        line(S + 1, 100, "G", "WS", "0 + 8 [fio]"),
        line(S + 2, 100, "Q", "WS", "8 + 8 [fio]"),
        line(S + 2, 100, "M", "WS", "8 + 8 [fio]"),
        line(S + 3, 100, "Q", "WS", "16 + 8 [fio]"),
        line(S + 3, 100, "M", "WS", "16 + 8 [fio]"),
        line(S + 5, 100, "D", "WS", "0 + 24 [fio]"),
        line(S + 105, 0, "C", "WS", "0 + 24 [0]"),
        // Ten seconds later, unrelated 4 KB writes at the merged bios' sectors.
        line(11 * S, 200, "Q", "WS", "8 + 8 [dd]"),
        line(11 * S + 2, 200, "D", "WS", "8 + 8 [dd]"),
        line(11 * S + 52, 0, "C", "WS", "8 + 8 [0]"),
        line(12 * S, 200, "Q", "WS", "16 + 8 [dd]"),
        line(12 * S + 2, 200, "D", "WS", "16 + 8 [dd]"),
        line(12 * S + 52, 0, "C", "WS", "16 + 8 [0]"),
    ];
    let (r, st) = import_with_stats(&l);
    assert_eq!(
        st,
        BlkStats {
            merges: 2,
            ..BlkStats::default()
        },
        "nothing left pending"
    );
    assert_eq!(r.len(), 3);
    // The request starts at its G (the kernel's rq->start_time_ns), 1 us after the Q.
    assert_eq!(
        (r[0].bytes, r[0].pid, r[0].total_ns()),
        (24 * 512, 100, 104 * US)
    );
    assert_eq!(r[0].device_ns(), 100 * US);
    for r in &r[1..] {
        assert_eq!((r.bytes, r.pid), (4096, 200));
        assert_eq!(r.total_ns(), 52 * US, "queue time of its own Q: {r:?}");
        assert_eq!(r.flags & flags::STARTED_BEFORE, 0);
    }
}

#[test]
fn a_front_merge_moves_the_request_to_the_bio_sector() {
    let l = [
        line(2 * S, 100, "Q", "R", "8 + 8 [first]"),
        line(2 * S + 1, 100, "G", "R", "8 + 8 [first]"),
        line(2 * S + 10, 101, "Q", "R", "0 + 8 [second]"),
        line(2 * S + 10, 101, "F", "R", "0 + 8 [second]"),
        line(2 * S + 20, 100, "D", "R", "0 + 16 [first]"),
        line(2 * S + 220, 0, "C", "R", "0 + 16 [0]"),
        line(5 * S, 300, "Q", "R", "8 + 8 [later]"),
        line(5 * S + 1, 300, "D", "R", "8 + 8 [later]"),
        line(5 * S + 31, 0, "C", "R", "8 + 8 [0]"),
    ];
    let r = import(&l);
    assert_eq!(r.len(), 2);
    // The request was started by its first bio (at sector 8), not the front-merged one.
    assert_eq!((r[0].sector, r[0].bytes, r[0].pid), (0, 8192, 100));
    assert_eq!(r[0].total_ns(), 219 * US);
    assert_eq!((r[1].sector, r[1].pid, r[1].total_ns()), (8, 300, 31 * US));
}

#[test]
fn a_merged_away_request_leaves_no_queue_event() {
    // Two requests queued separately; the second is merged into the first (Linux 5.11+
    // traces that as M with the merged request's sector and size).
    let l = [
        line(S, 100, "Q", "W", "0 + 8 [a]"),
        line(S + 1, 100, "G", "W", "0 + 8 [a]"),
        line(S + 2, 100, "I", "W", "0 + 8 [a]"),
        line(S + 3, 101, "Q", "W", "8 + 8 [b]"),
        line(S + 4, 101, "G", "W", "8 + 8 [b]"),
        line(S + 5, 101, "I", "W", "8 + 8 [b]"),
        line(S + 6, 101, "M", "W", "8 + 8 [b]"),
        line(S + 7, 0, "D", "W", "0 + 16 [kworker]"),
        line(S + 57, 0, "C", "W", "0 + 16 [0]"),
        line(3 * S, 102, "Q", "W", "8 + 8 [c]"),
        line(3 * S + 1, 102, "D", "W", "8 + 8 [c]"),
        line(3 * S + 41, 0, "C", "W", "8 + 8 [0]"),
    ];
    let r = import(&l);
    assert_eq!(r.len(), 2);
    assert_eq!((r[0].total_ns(), r[0].pid), (56 * US, 100));
    assert_eq!((r[1].total_ns(), r[1].pid), (41 * US, 102));
}

#[test]
fn a_requeued_request_is_timed_from_its_last_issue_and_counted() {
    let l = [
        line(3 * S, 100, "Q", "R", "0 + 8 [fio]"),
        line(3 * S + 1, 100, "D", "R", "0 + 8 [fio]"),
        line(3 * S + 20, 0, "R", "R", "0 + 8 [0]"),
        line(3 * S + 500, 0, "D", "R", "0 + 8 [kworker]"),
        line(3 * S + 600, 0, "C", "R", "0 + 8 [0]"),
        line(4 * S, 100, "Q", "R", "0 + 8 [fio]"),
        line(4 * S + 1, 100, "D", "R", "0 + 8 [fio]"),
        line(4 * S + 31, 0, "C", "R", "0 + 8 [0]"),
    ];
    let (r, st) = import_with_stats(&l);
    assert_eq!(
        st,
        BlkStats {
            requeues: 1,
            ..BlkStats::default()
        },
        "nothing left pending"
    );
    assert_eq!(r.len(), 2);
    assert_eq!((r[0].total_ns(), r[0].device_ns()), (600 * US, 100 * US));
    assert_eq!(r[0].requeues, 1);
    assert_eq!((r[1].total_ns(), r[1].device_ns()), (31 * US, 30 * US));
    assert_eq!(r[1].requeues, 0);
}

#[test]
fn both_halves_of_a_split_bio_keep_its_queue_time() {
    let l = [
        line(S, 100, "Q", "W", "0 + 2048 [fio]"),
        line(S + 1, 100, "X", "W", "0 / 1024 [fio]"),
        line(S + 2, 100, "D", "W", "0 + 1024 [fio]"),
        line(S + 3, 100, "D", "W", "1024 + 1024 [fio]"),
        line(S + 300, 0, "C", "W", "0 + 1024 [0]"),
        line(S + 400, 0, "C", "W", "1024 + 1024 [0]"),
        // A bio queued and never completed within the input.
        line(S + 500, 100, "Q", "W", "4096 + 8 [fio]"),
    ];
    let (r, st) = import_with_stats(&l);
    assert_eq!(
        st,
        BlkStats {
            splits: 1,
            unmatched_queued: 1,
            ..BlkStats::default()
        }
    );
    assert_eq!(r.len(), 2);
    for (r, total) in r.iter().zip([300, 400]) {
        assert_eq!((r.bytes, r.pid, r.total_ns()), (512 << 10, 100, total * US));
        assert_eq!(r.flags & flags::STARTED_BEFORE, 0, "{r:?}");
    }
}

#[test]
fn hostile_numbers_are_errors_not_panics() {
    let good = [
        line(S, 100, "Q", "WS", "0 + 8 [fio]"),
        line(S + 1, 100, "F", "WS", "0 + 8 [fio]"),
        line(S + 2, 100, "D", "WS", "0 + 8 [fio]"),
        line(S + 3, 0, "C", "WS", "0 + 8 [0]"),
        line(S + 4, 0, "R", "WS", "0 + 8 [0]"),
        line(S + 5, 0, "X", "WS", "0 / 8 [fio]"),
    ];
    let hostile = [
        "18446744073709551615",
        "18446744073709551616",
        "4294967295",
        "4294967296",
        "99999999999999999999.9",
        "-1",
        "+1",
        "1.+5",
        "",
        "[",
        "/",
        "+",
        "9999999,1",
        "7,9999999",
    ];
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("blk.txt");
    let out = dir.path().join("out.blkp");
    // Every field of every line replaced by every hostile value: an error naming the line,
    // or a skip with --skip-bad; never a panic.
    for (li, l) in good.iter().enumerate() {
        let fields: Vec<&str> = l.split_whitespace().collect();
        for fi in 0..fields.len() {
            for h in hostile {
                let mut f = fields.clone();
                f[fi] = h;
                let mut lines: Vec<String> = good.to_vec();
                lines[li] = f.join(" ");
                lines.push(line(9 * S, 1, "Q", "W", "18446744073709551608 + 8 [x]"));
                lines.push(line(9 * S, 1, "F", "W", "18446744073709551608 + 8 [x]"));
                lines.push(line(9 * S, 1, "C", "W", "18446744073709551608 + 8 [0]"));
                std::fs::write(&input, lines.join("\n")).unwrap();
                // An error or a skip is an answer; only a panic is not.
                if let Err(e) = import_blk(&input, &out, h.len() % 2 == 0) {
                    assert!(!e.to_string().is_empty(), "line {li}, field {fi}, {h:?}");
                }
            }
        }
    }
    // A front merge past the last sector is an error naming the line.
    std::fs::write(
        &input,
        [
            line(S, 1, "Q", "W", "0 + 8 [x]"),
            line(S, 1, "F", "W", "18446744073709551615 + 8 [x]"),
        ]
        .join("\n"),
    )
    .unwrap();
    let e = import_blk(&input, &out, false).unwrap_err().to_string();
    assert!(e.contains("blk.txt:2:"), "{e}");
    // A count that overflows 32-bit bytes is an error, not a wrapped size.
    std::fs::write(&input, line(S, 0, "C", "W", "0 + 16777216 [0]")).unwrap();
    let e = import_blk(&input, &out, false).unwrap_err().to_string();
    assert!(e.contains("blk.txt:1:") && e.contains("too large"), "{e}");
}
