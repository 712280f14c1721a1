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
use crate::probe::ProbeMode;

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
        let path = crate::recorder::dump_name(&rec.dir, clock::realtime_ns());
        let why = why.to_string();
        self.dumps.retain(|d| !d.is_finished());
        self.dumps
            .push(tokio::task::spawn_blocking(move || {
                let r = match snapshot.write(&path, &why) {
                    Ok((records, bytes, from, to)) => {
                        eprintln!(
                            "blkprof-trace: flight recorder: wrote {} ({} IOs over {:.1} s, {} bytes; {why}){}",
                            path.display(),
                            thousands(records),
                            to.saturating_sub(from) as f64 / 1e9,
                            thousands(bytes),
                            if snapshot.shortened > 0 {
                                format!(
                                    "; the window is shorter than asked: {} segments went for --flight-recorder-size",
                                    snapshot.shortened
                                )
                            } else {
                                String::new()
                            }
                        );
                        Ok(path)
                    }
                    Err(e) => {
                        eprintln!("blkprof-trace: flight recorder: cannot dump: {e}");
                        Err(e.to_string())
                    }
                };
                answer(r);
            }));
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
