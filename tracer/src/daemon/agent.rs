//! The agent's side of the loop: the metrics endpoint's scrapes and the flight recorder's
//! dumps, and answering scrapes while the loop waits on something else.

use std::future::Future;
use std::path::PathBuf;

use aya::maps::{MapData, RingBuf};
use tokio::sync::{mpsc, oneshot};
use tracer_common::coverage::thousands;
use tracer_common::dev_split;
use tracer_common::format::AggregateSnapshot;
use tracer_common::op::StatGroup;

use super::source::drain_ring;
use super::{Run, read_file};
use crate::clock;
use crate::devices;
use crate::metrics::{self, Ask, Scrape};
use crate::outdir::OutDir;
use crate::probe::ProbeMode;
use crate::recorder;

/// The metrics endpoint's questions to the loop (none without `--metrics-addr`).
pub(super) type Asks = Option<mpsc::Receiver<Ask>>;

/// Where a dump's outcome goes: the file written, or why not.
pub(super) type DumpReply = oneshot::Sender<Result<PathBuf, String>>;

/// The next question, or never.
pub(super) async fn next_ask(asks: &mut Asks) -> Option<Ask> {
    match asks {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

impl Run {
    /// Answer one question of the metrics endpoint: the histograms up to now, then the
    /// kernel's counters; or a dump.
    pub(super) async fn answer(&mut self, ring: &mut RingBuf<MapData>, asks: &mut Asks, ask: Ask) {
        drain_ring(ring, self);
        match ask {
            Ask::Metrics(open, reply) => self.reply_scrape(open, reply),
            Ask::Dump(reply) => self.dump(ring, asks, "POST /dump", Some(reply)).await,
        }
    }

    fn reply_scrape(&mut self, openmetrics: bool, reply: oneshot::Sender<String>) {
        #[expect(
            clippy::let_underscore_must_use,
            reason = "the scraper hung up (its connection closed): nobody is left to answer"
        )]
        let _ = reply.send(self.scrape(openmetrics));
    }

    /// Await `fut` (a wait inside a rotation) while answering the metrics endpoint: a scrape
    /// does not wait for the rotation. A dump asked meanwhile is answered once the loop is
    /// back (it rotates itself).
    pub(super) async fn serving<T>(
        &mut self,
        ring: &mut RingBuf<MapData>,
        asks: &mut Asks,
        fut: impl Future<Output = T>,
    ) -> T {
        let mut fut = std::pin::pin!(fut);
        loop {
            tokio::select! {
                biased;
                v = &mut fut => return v,
                Some(ask) = next_ask(asks) => match ask {
                    Ask::Metrics(open, reply) => {
                        drain_ring(ring, self);
                        self.reply_scrape(open, reply);
                    }
                    Ask::Dump(reply) => self.deferred_dumps.push(reply),
                },
            }
        }
    }

    /// The dumps asked while the loop was busy.
    pub(super) async fn deferred_dumps(&mut self, ring: &mut RingBuf<MapData>, asks: &mut Asks) {
        while !self.deferred_dumps.is_empty() && self.stop.is_none() {
            let reply = self.deferred_dumps.remove(0);
            self.dump(ring, asks, "POST /dump", Some(reply)).await;
        }
    }

    /// Cut the flight recorder's open segment and write everything it holds as a trace file,
    /// in a blocking task (the loop goes on reading the ring); `reply` gets the file written,
    /// or why not, when it is done.
    pub(super) async fn dump(
        &mut self,
        ring: &mut RingBuf<MapData>,
        asks: &mut Asks,
        why: &str,
        reply: Option<DumpReply>,
    ) {
        let answer = |r: Result<PathBuf, String>| {
            if let Some(tx) = reply {
                #[expect(
                    clippy::let_underscore_must_use,
                    reason = "the asker hung up (its connection closed): nobody is left to tell"
                )]
                let _ = tx.send(r);
            }
        };
        if self.recorder.is_none() {
            return answer(Err(
                "no flight recorder: start blkprof-trace with --flight-recorder DURATION".into(),
            ));
        }
        // One at a time: each makes room for itself in --dump-dir.
        if self.dump_in_progress() {
            eprintln!(
                "blkprof-trace: flight recorder: {why}: a dump is being written; not another"
            );
            return answer(Err(
                "a dump is being written; ask again when it is done".into()
            ));
        }
        if let Err(e) = self.rotate(ring, asks).await {
            return answer(Err(e.to_string()));
        }
        let Some(rec) = self.recorder.as_mut() else {
            return answer(Err("no flight recorder".into()));
        };
        let Some(snapshot) = rec.snapshot() else {
            eprintln!("blkprof-trace: flight recorder: cannot dump: it holds nothing yet");
            return answer(Err("the flight recorder holds nothing yet".into()));
        };
        let (dir, limits) = (rec.dir.clone(), rec.limits);
        let wall_ns = clock::realtime_ns();
        let why = why.to_string();
        self.dumps
            .push(tokio::task::spawn_blocking(move || {
                // The header and trailer besides the frames: a few kB, up to about a MB with
                // many devices and full histograms.
                let need = snapshot.frame_bytes() + (1 << 20);
                let r = recorder::make_room(&dir, need, limits)
                    .map_err(|e| {
                        eprintln!("blkprof-trace: flight recorder: not dumping: {e}");
                        e
                    })
                    .and_then(|deleted| {
                        say_deleted(&dir, &deleted);
                        snapshot.write(&dir, wall_ns, &why).map_err(|e| {
                            eprintln!("blkprof-trace: flight recorder: cannot dump: {e}");
                            e.to_string()
                        })
                    })
                    .map(|w| {
                        eprintln!(
                            "blkprof-trace: flight recorder: wrote {} ({} IOs over {:.1} s, {} bytes; {why}){}",
                            w.path.display(),
                            thousands(w.records),
                            w.to_ns.saturating_sub(w.from_ns) as f64 / 1e9,
                            thousands(w.bytes),
                            if snapshot.shortened > 0 {
                                format!(
                                    "; the window is shorter than asked: {} segments went for --flight-recorder-size",
                                    snapshot.shortened
                                )
                            } else {
                                String::new()
                            }
                        );
                        if let Some(name) = w.path.file_name() {
                            say_deleted(&dir, &recorder::trim(&dir, name, limits));
                        }
                        w.path
                    });
                answer(r);
            }));
    }

    /// A dump is being written.
    pub(super) fn dump_in_progress(&mut self) -> bool {
        self.dumps.retain(|d| !d.is_finished());
        !self.dumps.is_empty()
    }

    /// Wait for the dumps being written.
    pub(super) async fn await_dumps(&mut self) {
        for d in std::mem::take(&mut self.dumps) {
            #[expect(
                clippy::let_underscore_must_use,
                reason = "a dump reports its own outcome (stderr, the POST /dump reply); a task \
                          that panicked has had its panic printed"
            )]
            let _ = d.await;
        }
    }

    /// The metrics endpoint's text, from the probe's counters read now.
    fn scrape(&mut self, openmetrics: bool) -> String {
        if self.metrics.is_none() {
            return String::new();
        }
        let aggregates = self.probe.aggregates().unwrap_or_default();
        let counters = self.counters().unwrap_or_default();
        let mut inflight: Vec<(u32, u64, Option<u64>)> = if self.probe.mode == ProbeMode::Records {
            self.probe
                .device_states()
                .into_iter()
                .map(|(d, st)| (d, st.os_inflight, Some(st.dev_inflight)))
                .collect()
        } else {
            // No counts of our own: the kernel's requests in flight per device (sysfs), and
            // none at the device.
            self.names
                .iter()
                .map(|(&d, name)| (d, devices::inflight(name).unwrap_or(0), None))
                .collect()
        };
        // Every traced device has its series from the first scrape, IO or not.
        let mut zeros = Vec::new();
        for d in &self.devices {
            let dev = d.dev();
            if !inflight.iter().any(|x| x.0 == dev) {
                inflight.push((dev, 0, Some(0)));
            }
            for g in StatGroup::ALL {
                if !aggregates.iter().any(|a| {
                    a.major == d.major && a.minor == d.minor && a.group() == g && !a.not_accounted
                }) {
                    zeros.push(AggregateSnapshot {
                        major: d.major,
                        minor: d.minor,
                        op: Some(match g {
                            StatGroup::Read => tracer_common::op::Op::Read,
                            StatGroup::Write => tracer_common::op::Op::Write,
                            StatGroup::Discard => tracer_common::op::Op::Discard,
                            StatGroup::Flush => tracer_common::op::Op::Flush,
                        }),
                        flush_rq: g == StatGroup::Flush,
                        ..AggregateSnapshot::default()
                    });
                }
            }
        }
        inflight.sort_unstable();
        let mut all = aggregates;
        all.extend(zeros);
        let names = &self.names;
        let name_of = |dev: u32| {
            names.get(&dev).cloned().unwrap_or_else(|| {
                let (ma, mi) = dev_split(dev);
                devices::name_of(ma, mi).unwrap_or_else(|| format!("{ma}:{mi}"))
            })
        };
        metrics::render(
            self.metrics.as_mut().expect("checked above"),
            &Scrape {
                aggregates: &all,
                counters: &counters,
                inflight: &inflight,
                name_of: &name_of,
                records: self.received_total,
                filtered_out: self.filtered_out,
                bpf_stats_enabled: read_file("/proc/sys/kernel/bpf_stats_enabled") == "1",
                kernel: &self.kernel,
            },
            openmetrics,
        )
    }
}

/// Say which dumps made room for a new one.
fn say_deleted(dir: &OutDir, deleted: &[std::ffi::OsString]) {
    for d in deleted {
        eprintln!(
            "blkprof-trace: flight recorder: deleted {} (--dump-max-files, --dump-quota)",
            dir.join(d).display()
        );
    }
}
