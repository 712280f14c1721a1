//! A paced load that sleeps between its IOs: 4 KB random direct reads at a fixed rate, from
//! threads of this process that each wait for the next IO's instant in `nanosleep`.
//!
//! Not fio's `--rate_iops`: fio paces by spinning for any wait shorter than its measured sleep
//! granularity (`usec_spin`), which at 40k IOPS is most of them; work the kernel does in fio's
//! context (the programs of `block_io_start` and `block_rq_issue` run in its `io_submit`) then
//! shortens the spin instead of adding busy time, and fio's own CPU per IO stays the same
//! whatever the tracer (BENCHMARKS.md). Here a thread that sleeps until its next instant pays
//! every added nanosecond as busy time.

use std::fs::File;
use std::os::unix::fs::{FileExt as _, OpenOptionsExt as _};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use analyzer::numeric::Rng;
use anyhow::{Context as _, Result, bail};

const BLOCK: usize = 4096;

/// The load while it runs; [`Pacer::stop`] ends it.
pub(crate) struct Pacer {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<Result<u64>>>,
}

/// A 4 KB buffer aligned for direct IO.
#[repr(C, align(4096))]
struct Aligned([u8; BLOCK]);

impl Pacer {
    /// Start `threads` threads reading `dev` at `rate` IOs per second in all, each one IO at a
    /// time at its own instants (`threads / rate` apart, the threads staggered evenly).
    pub(crate) fn start(dev: &str, rate: u64, threads: usize) -> Result<Pacer> {
        if rate == 0 || threads == 0 {
            bail!("a paced load needs a rate and threads");
        }
        let size = File::open(dev)
            .and_then(|mut f| std::io::Seek::seek(&mut f, std::io::SeekFrom::End(0)))
            .with_context(|| format!("sizing {dev}"))?;
        let blocks = size / BLOCK as u64;
        if blocks == 0 {
            bail!("{dev} is smaller than one block");
        }
        let period = Duration::from_nanos(threads as u64 * 1_000_000_000 / rate);
        let stop = Arc::new(AtomicBool::new(false));
        let t0 = Instant::now();
        let mut handles = Vec::with_capacity(threads);
        for k in 0..threads {
            let file = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_DIRECT)
                .open(dev)
                .with_context(|| format!("opening {dev} for direct IO"))?;
            let stop = Arc::clone(&stop);
            let first = t0 + period * u32::try_from(k).unwrap_or(0) / u32::try_from(threads)?;
            handles.push(std::thread::spawn(move || -> Result<u64> {
                let mut buf = Box::new(Aligned([0; BLOCK]));
                // A reproducible spread of offsets, one seed per thread.
                let mut rng = Rng(0x9E37_79B9_7F4A_7C15_u64 ^ (k as u64 + 1));
                let mut next = first;
                let mut ios = 0;
                while !stop.load(Ordering::Relaxed) {
                    let now = Instant::now();
                    if next > now {
                        std::thread::sleep(next - now);
                    }
                    let off = rng.below(blocks) * BLOCK as u64;
                    file.read_exact_at(&mut buf.0, off).context("paced read")?;
                    ios += 1;
                    // Absolute instants: a late wake-up is caught up, the rate holds.
                    next += period;
                }
                Ok(ios)
            }));
        }
        Ok(Pacer {
            stop,
            threads: handles,
        })
    }

    /// Stop and wait for the threads; the IOs they did.
    pub(crate) fn stop(self) -> Result<u64> {
        self.stop.store(true, Ordering::Relaxed);
        let mut ios = 0;
        for t in self.threads {
            ios += t
                .join()
                .map_err(|_| anyhow::anyhow!("a paced-load thread panicked"))??;
        }
        Ok(ios)
    }
}
