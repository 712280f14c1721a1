//! The daemon's share of half records (docs/design/records-without-shared-state.md): the CPU
//! time to join start, issue and end halves from two CPUs' rings into records and count the
//! requests in flight at each issue, per IO. The halves are made in memory the way the probe
//! would write them at 500k and at 40k IOPS (each drain's halves laid out per ring, untimed);
//! only the joiner's work is timed.

use std::time::{Duration, Instant};

use analyzer::numeric::Rng;
use anyhow::{Result, bail};
use tracer_common::join::Joiner;
use tracer_common::{
    END_LAST, EndHalf, HALF_BATCH_BYTES, HALF_END, HALF_ISSUE, HALF_START, HalfHead, IssueHalf,
    StartHalf,
};

/// The sweep's slack behind each drain.
const SLACK_NS: u64 = 1_000_000;

#[derive(Clone, Copy)]
enum Kind {
    Start,
    Issue,
    End,
}

/// One half: when its program runs, on which ring, of which IO.
#[derive(Clone, Copy)]
struct Half {
    at_ns: u64,
    ring: u8,
    kind: Kind,
    io: u32,
}

/// The IO's instants: started every `every_ns` (with jitter), issued within 3 µs, completed
/// 20-60 µs later, on one of 256 request addresses taken in turn.
fn instants(io: u64, every_ns: u64, rng: &mut Rng) -> (u64, u64, u64, u64) {
    let start = 1_000_000_000 + io * every_ns + rng.below(500);
    let issue = start + 300 + rng.below(3_000);
    let complete = issue + 20_000 + rng.below(40_000);
    let key = 0xffff_8880_1000_0000 + (io % 256) * 0x140;
    (key, start, issue, complete)
}

fn bytes_of<T: Copy>(v: &T, out: &mut Vec<u8>) {
    // SAFETY: the halves are repr(C) plain old data; every byte read is a field's (the
    // structs have no padding: tracer-common checks their sizes).
    out.extend_from_slice(unsafe {
        std::slice::from_raw_parts(std::ptr::from_ref(v).cast::<u8>(), size_of::<T>())
    });
}

/// At saturation here (500k IOPS) and at the CPU benchmark's 40k IOPS, the daemon draining
/// every 20 ms (its pace at both rates).
pub(crate) fn bench(ios: u64) -> Result<()> {
    rate(ios, 2_000, 20_000_000)?;
    rate(ios / 4, 25_000, 20_000_000)
}

/// As the probe lays the halves out: each CPU's batches of halves in its small ring (rings 0
/// and 1) until a drain's batches fill it, then in its large one (rings 2 and 3).
const RINGS: usize = 4;

fn rate(ios: u64, every_ns: u64, drain_ns: u64) -> Result<()> {
    let n = u32::try_from(ios)?;
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut halves = Vec::with_capacity(n as usize * 3);
    let mut io_instants = Vec::with_capacity(n as usize);
    for io in 0..n {
        let (key, start, issue, complete) = instants(u64::from(io), every_ns, &mut rng);
        io_instants.push((key, start, issue, complete));
        let cpu = (io % 2) as u8;
        // The start program runs just after the kernel's stamp, on the submitting CPU, as
        // the issue; the completion on either.
        halves.push(Half {
            at_ns: start + 200,
            ring: cpu,
            kind: Kind::Start,
            io,
        });
        halves.push(Half {
            at_ns: issue,
            ring: cpu,
            kind: Kind::Issue,
            io,
        });
        halves.push(Half {
            at_ns: complete,
            ring: ((io / 3) % 2) as u8,
            kind: Kind::End,
            io,
        });
    }
    halves.sort_by_key(|h| h.at_ns);
    let mut j = Joiner::new(0, RINGS);
    let mut rings: [Vec<u8>; RINGS] = Default::default();
    let mut lens: [Vec<usize>; RINGS] = Default::default();
    let hot_bytes = tracer_common::HOT_RING_BYTES as usize;
    let (mut records, mut busy, mut max_open) = (0u64, Duration::ZERO, 0usize);
    let mut next = 0;
    let mut drain = halves.first().map_or(0, |h| h.at_ns) + drain_ns;
    let dev = 259 << 20;
    while next < halves.len() {
        let upto = halves[next..].partition_point(|h| h.at_ns <= drain) + next;
        for r in 0..RINGS {
            rings[r].clear();
            lens[r].clear();
        }
        // Each CPU's batch (ring 0 or 1), as `HalfBatch`: written as one record when the next
        // half does not fit, and at the drain (as the daemon has them written at the cuts; in a
        // run it waits for a batch until it is 10 ms old, and sweeps short of it meanwhile).
        let mut batches: [Vec<u8>; 2] = Default::default();
        let mut place = |cpu: usize, batch: &mut Vec<u8>| {
            if batch.is_empty() {
                return;
            }
            // The probe's rule (flush_batch): the small ring while more than twice the
            // batch's size is free in it (each record takes 8 bytes of header).
            let mut ring = cpu;
            if rings[ring].len() + 8 * lens[ring].len() > hot_bytes.saturating_sub(2 * batch.len())
            {
                ring += 2;
            }
            rings[ring].extend_from_slice(batch);
            lens[ring].push(batch.len());
            batch.clear();
        };
        for h in &halves[next..upto] {
            let (key, start_ns, issue_ns, complete_ns) = io_instants[h.io as usize];
            let cpu = usize::from(h.ring);
            let size = match h.kind {
                Kind::Start => size_of::<StartHalf>(),
                Kind::Issue => size_of::<IssueHalf>(),
                Kind::End => size_of::<EndHalf>(),
            };
            if batches[cpu].len() + size > HALF_BATCH_BYTES {
                place(cpu, &mut batches[cpu]);
            }
            let out = &mut batches[cpu];
            let head = |half| HalfHead {
                half,
                dev,
                key,
                start_ns,
            };
            match h.kind {
                Kind::Start => bytes_of(
                    &StartHalf {
                        head: head(HALF_START),
                        cgroup: 1234,
                        comm: *b"cassandra\0\0\0\0\0\0\0",
                        pid: 4321,
                        flags: 0,
                        at_ns: h.at_ns,
                    },
                    out,
                ),
                Kind::Issue => bytes_of(
                    &IssueHalf {
                        head: head(HALF_ISSUE),
                        issue_ns,
                    },
                    out,
                ),
                Kind::End => bytes_of(
                    &EndHalf {
                        head: head(HALF_END),
                        complete_ns,
                        issue_ns,
                        sector: u64::from(h.io) * 8,
                        bytes: 4096,
                        end: END_LAST,
                        ..EndHalf::default()
                    },
                    out,
                ),
            }
        }
        for (cpu, batch) in batches.iter_mut().enumerate() {
            place(cpu, batch);
        }
        next = upto;
        let t = Instant::now();
        for r in 0..RINGS {
            let mut at = 0;
            for &len in &lens[r] {
                // SAFETY: the rings are next written after the unborrow below, as the daemon
                // releases its rings.
                unsafe { j.push_in_place(r, &rings[r][at..at + len]) };
                at += len;
            }
        }
        j.sweep(drain - SLACK_NS, &mut |e| {
            records += 1;
            std::hint::black_box(e);
        });
        j.unborrow();
        busy += t.elapsed();
        max_open = max_open.max(j.open());
        drain += drain_ns;
    }
    let t = Instant::now();
    j.finish(&mut |e| {
        records += 1;
        std::hint::black_box(e);
    });
    busy += t.elapsed();
    let st = j.stats();
    if records != ios || st.late != 0 || st.missed_completions != 0 || st.open_at_end != 0 {
        bail!("join bench: {records} records of {ios} IOs, {st:?}");
    }
    println!(
        "join: {:.0} ns per IO ({ios} IOs as 3 halves each, in batches of up to {HALF_BATCH_BYTES} bytes on 2 CPUs' small rings, spilling into their large ones; a drain every {} ms at \
         {} IOPS; {:.2} s; at most {max_open} requests open and halves waiting)",
        busy.as_nanos() as f64 / ios as f64,
        drain_ns / 1_000_000,
        1_000_000_000 / every_ns,
        busy.as_secs_f64(),
    );
    Ok(())
}
