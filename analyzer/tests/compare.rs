//! `blkprof compare`: rows are keyed the same way in every arm, and a figure an arm does not
//! have is n/a (null in JSON), never 0 and never a flagged change.

#![expect(
    unused_crate_dependencies,
    reason = "a test crate links all the package's dependencies; the lib target checks them"
)]

#[expect(dead_code, reason = "each test crate uses part of the shared helpers")]
mod common;

use analyzer::compare::{Comparison, compare, write_text};
use analyzer::summary::JsonReport;
use analyzer::synth::{BASE_NS, Io};
use serde_json::Value;
use tracer_common::op::{Op, flags};

/// `n` IOs per (op, bytes) entry, one every 100 us, 100 us device latency.
fn workload(mix: &[(Op, u32, u64)]) -> Vec<Io> {
    let mut ios = Vec::new();
    let mut t = 0u64;
    for &(op, bytes, n) in mix {
        for _ in 0..n {
            let enter = BASE_NS + t;
            ios.push(Io {
                enter_ns: enter,
                issue_ns: enter + 5_000,
                complete_ns: enter + 105_000,
                op,
                bytes,
                sector: t / 100,
                os_inflight: 1,
                flags: flags::SYNC,
            });
            t += 100_000;
        }
    }
    ios
}

/// The report of `mix` ([`workload`]) written as a trace.
fn report(mix: &[(Op, u32, u64)]) -> JsonReport {
    let dir = tempfile::tempdir().unwrap();
    common::report(&common::trace(dir.path(), "t.blkp", &mut workload(mix)))
}

/// The JSON row of `metric`: (values, flagged); panics if there is no such row.
fn row(c: &Comparison, metric: &str) -> (Vec<Value>, bool) {
    let j = serde_json::to_value(c).unwrap();
    let r = j["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["metric"] == metric)
        .unwrap_or_else(|| panic!("no row {metric:?} in {:#}", j["rows"]));
    (
        r["values"].as_array().unwrap().clone(),
        r["flagged"].as_bool().unwrap(),
    )
}

fn text(c: &Comparison) -> String {
    let mut out = Vec::new();
    write_text(&mut out, c).unwrap();
    String::from_utf8(out).unwrap()
}

#[test]
fn size_classes_are_matched_class_by_class_when_the_top_class_differs() {
    // A writes mostly 4 KB, B mostly 64 KB; B also writes a few 1 MB requests A never does.
    let a = report(&[(Op::Write, 4096, 800), (Op::Write, 65536, 200)]);
    let b = report(&[
        (Op::Write, 4096, 300),
        (Op::Write, 65536, 690),
        (Op::Write, 1 << 20, 10),
    ]);
    let c = compare(&[a, b], None).unwrap();
    let (v, flagged) = row(&c, "write share of 4KB");
    assert_eq!(v, [80.0, 30.0], "4 KB share in each arm");
    assert!(flagged);
    let (v, flagged) = row(&c, "write share of 64KB");
    assert_eq!(v, [20.0, 69.0], "64 KB share in each arm");
    assert!(flagged);
    // A has writes but none of 1 MB: a real 0%.
    let (v, _) = row(&c, "write share of 1MB");
    assert_eq!(v, [0.0, 1.0]);
    let t = text(&c);
    assert!(!t.contains("-100"), "no invented disappearance:\n{t}");
    // Classes in size order, one row each (the findings after the table may name them again).
    let t = &t[..t.find("\nFindings").unwrap_or(t.len())];
    let i4 = t.find("write share of 4KB").unwrap();
    let i64 = t.find("write share of 64KB").unwrap();
    let i1m = t.find("write share of 1MB").unwrap();
    assert!(i4 < i64 && i64 < i1m, "{t}");
    assert_eq!(t.matches("write share of 64KB").count(), 1, "{t}");
}

#[test]
fn an_op_missing_in_one_arm_is_na_not_zero_and_not_flagged() {
    let with = || report(&[(Op::Read, 4096, 500), (Op::Discard, 1 << 20, 50)]);
    let without = || report(&[(Op::Read, 4096, 550)]);
    for (c, other) in [
        (compare(&[with(), without()], None).unwrap(), 1),
        (compare(&[without(), with()], None).unwrap(), 0),
    ] {
        let this = 1 - other;
        // The count itself really is 0 in the arm without discards: a real, flagged change.
        let (v, flagged) = row(&c, "discard IOs");
        assert_eq!(
            (v[this].as_f64(), v[other].as_f64()),
            (Some(50.0), Some(0.0))
        );
        assert!(flagged);
        // Per-IO figures of an op with no IOs do not exist: null, and no change flagged.
        for m in [
            "discard latency p50",
            "discard latency p99",
            "discard mean request size",
            "discard share of 1MB",
        ] {
            let (v, flagged) = row(&c, m);
            assert!(v[this].is_f64(), "{m}: {v:?}");
            assert!(v[other].is_null(), "{m}: {v:?}");
            assert!(!flagged, "{m} flagged");
        }
        let t = text(&c);
        let line = t
            .lines()
            .find(|l| l.contains("discard latency p50"))
            .unwrap();
        assert!(line.contains("n/a") && line.starts_with(' '), "{line}");
        assert!(!line.contains('%'), "no change against n/a: {line}");
        // No arm writes: no per-IO rows of writes at all.
        assert!(!t.contains("write latency"), "{t}");
    }
    // An op absent from a report altogether (a report from elsewhere) is n/a even for counts.
    let mut gone = without();
    gone.devices[0].ops.remove("discard");
    let c = compare(&[with(), gone], None).unwrap();
    let (v, flagged) = row(&c, "discard IOs");
    assert!(v[0].is_f64() && v[1].is_null(), "{v:?}");
    assert!(!flagged);
}
