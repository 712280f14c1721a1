//! The tracing daemon: attach, stream the records, keep live statistics, write trace files
//! (rotating if asked), and end the same way on --duration, SIGINT and SIGTERM.
//!
//! The records come from a [`source`] (whole records, or half records joined here); each is
//! handled by [`records`] and goes to the [`output`], which [`rotation`] ends and starts anew
//! at the [`cuts`]. The metrics endpoint and the flight recorder's dumps are the [`agent`];
//! the end prints the [`summary`].

mod agent;
mod cuts;
mod live;
mod output;
mod pace;
mod records;
mod rotation;
mod source;
mod stop;
mod summary;

use std::collections::{HashMap, VecDeque};

use anyhow::Result;
use aya::maps::{MapData, RingBuf};
use tokio::io::unix::AsyncFd;
use tokio::signal::unix::{SignalKind, signal};
use tracer_common::Cuts;
use tracer_common::format::Cut;
use tracer_common::format::{
    AggregateSnapshot, DeviceInfo, DiskStats, FormatError, IoRecord, ProbeCounters, TraceHeader,
};

use self::agent::{Asks, DumpReply, next_ask};
use self::live::Interval;
use self::output::OutFiles;
use self::pace::DrainPace;
use self::source::{RecordSource, drain_ring};
use self::stop::StopReason;
use crate::cgroups::Cgroups;
use crate::cli::Config;
use crate::clock;
use crate::devices;
use crate::metrics::{self, Ask, Metrics};
use crate::probe::{Probe, ProbeMode, ProbeOptions};
use crate::recorder::Recorder;
use crate::stats::{Stats, print_header};

pub(super) struct Run {
    cfg: Config,
    probe: Probe,
    wall_start_ns: i64,
    mono_base_ns: u64,
    host: String,
    kernel: String,
    devices: Vec<DeviceInfo>,
    names: HashMap<u32, String>,
    stats: Stats,
    filter: records::Filter,
    output: Option<output::Output>,
    seq: u32,
    /// `--output`'s directory and file names.
    out: Option<OutFiles>,
    /// The next file could not be created: no rotation before this instant.
    rotation_retry: Option<std::time::Instant>,
    /// The open file's size at the last interval's end (`--keep`'s margin).
    written_at_last_tick: u64,
    /// The trace files `--keep` counts, oldest first (earlier runs' included).
    files: VecDeque<std::ffi::OsString>,
    /// Per file: header written at open.
    header: TraceHeader,
    received: Vec<(u32, [(u64, u64); 4])>,
    last_dev: usize,
    received_total: u64,
    filtered_out: u64,
    filtered_out_file: u64,
    malformed: u64,
    /// The first error writing the open file: the run stops on it.
    write_error: Option<FormatError>,
    /// A failed rotation stops the run, for this reason.
    stop: Option<StopReason>,
    stdout: std::io::Stdout,
    /// The run's cuts (see [`Cut`]) and the diskstats read at the start's.
    start_cut: Option<Cut>,
    end_cut: Option<Cut>,
    /// What the probe's cut map holds now.
    cuts: Cuts,
    /// Where the open file starts: the run's start cut, or the rotation that opened it (its
    /// IOs completing between the instant and the diskstats read are tallied on it).
    file_start_cut: Option<Cut>,
    /// While a rotation drains the ring: records completing after this instant belong to the
    /// next file and wait here (with the filtered-out ones counted) until it is open.
    hold_after: Option<u64>,
    held: Vec<(IoRecord, [u8; 16])>,
    held_filtered_out: u64,
    /// The exact aggregates of the epoch parity that is not being written, as frozen at the
    /// last rotation (see [`Cuts::rotation`]).
    frozen_other: Vec<AggregateSnapshot>,
    start_diskstats: Option<Vec<DiskStats>>,
    start_aggregates: Option<Vec<AggregateSnapshot>>,
    start_counters: Option<ProbeCounters>,
    /// /proc/diskstats at the run's start, for the end's summary of the whole run.
    diskstats_at_run_start: Vec<DiskStats>,
    /// Records of IOs that completed before the start's instant (not part of the run).
    before_start: u64,
    /// `--no-records`: the aggregates at the last tick (live lines are their change).
    prev_aggregates: Vec<AggregateSnapshot>,
    /// The histograms behind `--metrics-addr`.
    metrics: Option<Metrics>,
    /// The md arrays over the traced disks, read at the start.
    arrays: Vec<tracer_common::format::ArrayInfo>,
    recorder: Option<Recorder>,
    /// Flight-recorder dumps being written.
    dumps: Vec<tokio::task::JoinHandle<()>>,
    /// Dumps asked while the loop waited inside a rotation.
    deferred_dumps: Vec<DumpReply>,
    /// cgroup ids to paths, and the ids the open file (or segment) has named.
    cgroups: Cgroups,
    /// `--files`: the names the probe hands over, and the ones the open file has named.
    file_names: Option<crate::files::Files>,
    cgroups_named: crate::named::NamedOnce<u64>,
    /// The last record's (submitter, owner) cgroups, both named.
    last_cgroups: Option<(u64, u64)>,
    /// `--cgroup`: whether each id seen is inside one of them.
    cgroup_keep: HashMap<u64, bool>,
    /// A trigger fired: dump at this instant, saying why.
    pending_dump: Option<(tokio::time::Instant, String)>,
    /// Whole records, or half records and their join.
    source: RecordSource,
    /// When the ring is drained next.
    pace: DrainPace,
}

fn read_file(p: &str) -> String {
    std::fs::read_to_string(p)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

impl Run {
    /// The probe's counters, with the join's and the file names user space left out.
    fn counters(&self) -> Result<ProbeCounters, crate::probe::ProbeError> {
        let mut c = self.probe.counters()?;
        self.source.add_counters(&mut c);
        if let Some(f) = &self.file_names {
            c.file_name_drops += f.dropped;
        }
        Ok(c)
    }
}

/// Trace until the duration, a signal or a write error; the exit code: 0, or 1 when the trace
/// could not be written to its end (disk full, write error).
pub async fn run(cfg: Config) -> Result<u8> {
    let out = match &cfg.output {
        Some(o) => Some(OutFiles::open(
            o,
            cfg.rotate_size.is_some() || cfg.rotate_time.is_some(),
        )?),
        None => None,
    };
    // Listen before the probe attaches: a taken port fails the start, not the run.
    let listener = match cfg.metrics_addr {
        Some(a) => Some(metrics::bind(a).await?),
        None => None,
    };
    let (mut run, ring) = Run::load(cfg)?;
    if let Some((out, earlier)) = out {
        run.files.extend(earlier);
        run.out = Some(out);
    }
    run.begin()?;
    crate::privs::after_attach(&run.probe, &run.cfg);
    let mut asks = match listener {
        Some(l) => Some(run.serve_metrics(l)?),
        None => None,
    };
    run.announce();
    // SAFETY: the RingBuf owns its map fd, which stays open and unchanged while the AsyncFd lives.
    let mut ring = unsafe { AsyncFd::register(ring) }
        .map_err(|e| anyhow::anyhow!("polling the ring buffer: {e}"))?;
    let mut interval = Interval::new(run.wall_start_ns);
    let reason = run.trace(&mut ring, &mut asks, &mut interval).await?;
    run.end(ring.get_mut(), &mut asks, &interval, reason).await
}

impl Run {
    /// Load the probe (not attached yet) and set the run up around it.
    fn load(cfg: Config) -> Result<(Run, RingBuf<MapData>)> {
        let devices = cfg.targets.clone();
        let mut probe = Probe::load(&ProbeOptions {
            mode: cfg.mode,
            // Without records the ring stays empty: the smallest one.
            ring_bytes: if cfg.mode == ProbeMode::Records {
                cfg.ring_bytes
            } else {
                4096
            },
            devices: devices.iter().map(DeviceInfo::dev).collect(),
            owner_always: cfg.owner_always,
            files: cfg.files,
            halves: cfg.halves,
            btf: cfg.btf.clone(),
        })?;
        let ring = probe.take_ring()?;
        let half_rings = probe.take_half_rings()?;
        let half_flush = probe.take_half_flush()?;
        // Paced by the small rings: a drain's halves should fit them, where they stay in the
        // CPUs' caches; what does not spills into the large rings, not lost.
        let hot_ring_bytes = probe.halves.then_some(probe.hot_ring_bytes);
        let source = RecordSource::new(half_rings, half_flush);
        let file_names = if probe.config.files != 0 {
            Some(crate::files::Files::new(probe.take_names_ring()?))
        } else {
            None
        };
        let names = devices.iter().map(|d| (d.dev(), d.name.clone())).collect();
        let filter = records::Filter {
            pids: cfg.pids.clone(),
            comms: cfg
                .comms
                .iter()
                .map(|c| tracer_common::format::comm_bytes(c))
                .collect(),
            ops: cfg.ops.clone(),
        };
        // Half records: the pace of one ring, as if every IO were on one CPU.
        let pace = DrainPace::new(u64::from(hot_ring_bytes.unwrap_or(cfg.ring_bytes)));
        let run = Run {
            host: read_file("/proc/sys/kernel/hostname"),
            kernel: read_file("/proc/sys/kernel/osrelease"),
            cfg,
            probe,
            wall_start_ns: 0,
            mono_base_ns: 0,
            arrays: devices::arrays_of(&devices),
            devices,
            names,
            stats: Stats::new(),
            filter,
            output: None,
            seq: 0,
            out: None,
            rotation_retry: None,
            written_at_last_tick: 0,
            files: VecDeque::new(),
            header: TraceHeader::default(),
            received: Vec::new(),
            last_dev: 0,
            received_total: 0,
            filtered_out: 0,
            filtered_out_file: 0,
            malformed: 0,
            write_error: None,
            stop: None,
            stdout: std::io::stdout(),
            start_cut: None,
            end_cut: None,
            cuts: Cuts::default(),
            file_start_cut: None,
            hold_after: None,
            held: Vec::new(),
            held_filtered_out: 0,
            frozen_other: Vec::new(),
            start_diskstats: None,
            start_aggregates: None,
            diskstats_at_run_start: Vec::new(),
            start_counters: None,
            before_start: 0,
            metrics: None,
            prev_aggregates: Vec::new(),
            recorder: None,
            dumps: Vec::new(),
            deferred_dumps: Vec::new(),
            cgroups: Cgroups::new(),
            file_names,
            cgroups_named: crate::named::NamedOnce::default(),
            last_cgroups: None,
            cgroup_keep: HashMap::new(),
            pending_dump: None,
            source,
            pace,
        };
        Ok((run, ring))
    }

    /// Attach, cut the run's start, and open its first file.
    fn begin(&mut self) -> Result<()> {
        self.probe.attach()?;
        // The start program attaches last: a request stamped before now may have no start
        // half (it started before the probe was whole).
        self.source.set_attach_ns(clock::monotonic_ns());
        // The start: IOs completing after this instant belong to the run, in the records, the
        // aggregates and the kernel's counters alike.
        let (cut, ds) = self.cut(true)?;
        self.source.set_run(cut.at_ns, u64::MAX);
        self.start_cut = Some(cut.clone());
        self.file_start_cut = Some(cut);
        self.diskstats_at_run_start.clone_from(&ds);
        self.start_diskstats = Some(ds);
        let (w, m) = clock::clock_pair();
        self.wall_start_ns = w;
        self.mono_base_ns = m;
        if let Some(f) = &self.cfg.flight_recorder {
            self.recorder = Some(Recorder::new(
                f.window,
                f.max_bytes,
                f.dir.clone(),
                f.after,
                f.triggers.clone(),
                f.limits,
            ));
        }
        if self.cfg.output.is_some() || self.recorder.is_some() {
            self.open_output()?;
        } else {
            let (utc_offset_s, time_zone) = clock::local_zone(w);
            self.header = TraceHeader {
                wall_clock_start_ns: w,
                monotonic_base_ns: m,
                diskstats_start: self.start_diskstats.take().unwrap_or_default(),
                counters_start: self.start_counters.take().unwrap_or_default(),
                utc_offset_s,
                time_zone,
                ..Default::default()
            };
        }
        Ok(())
    }

    /// The metrics endpoint on `l`, its histograms kept from now; its questions.
    fn serve_metrics(
        &mut self,
        l: tokio::net::TcpListener,
    ) -> Result<tokio::sync::mpsc::Receiver<Ask>> {
        let mut m = if self.cfg.mode == ProbeMode::Records {
            Metrics::new(self.cfg.metrics_per_octave, self.wall_start_ns)
        } else {
            Metrics::from_kernel(self.cfg.metrics_per_octave, self.wall_start_ns)
        };
        for d in &self.devices {
            m.add_device(d.dev());
        }
        self.metrics = Some(m);
        let (tx, rx) = tokio::sync::mpsc::channel::<Ask>(16);
        let addr = l.local_addr()?;
        let access = metrics::Access {
            dump_token: self.cfg.dump_token.clone(),
        };
        tokio::spawn(metrics::serve(l, tx, access));
        eprintln!("blkprof-trace: metrics at http://{addr}/metrics");
        Ok(rx)
    }

    /// Say what is traced; the live view's header.
    fn announce(&self) {
        let what = if self.devices.is_empty() {
            "all block devices".to_string()
        } else {
            self.devices
                .iter()
                .map(|d| format!("{} ({}:{})", d.name, d.major, d.minor))
                .collect::<Vec<_>>()
                .join(", ")
        };
        eprintln!("blkprof-trace: tracing {what}; Ctrl-C to stop");
        if !self.cfg.quiet && !self.cfg.json {
            #[expect(
                clippy::let_underscore_must_use,
                reason = "as the live lines (`live_lines`): a closed stdout must not stop the trace"
            )]
            let _ = print_header(&mut self.stdout.lock());
        }
    }

    /// The loop: drain the ring, end intervals, rotate, answer the agent's questions, until
    /// the duration, a signal, or a failure to write.
    async fn trace(
        &mut self,
        ring: &mut AsyncFd<RingBuf<MapData>>,
        asks: &mut Asks,
        iv: &mut Interval,
    ) -> Result<StopReason> {
        let mut sigint = signal(SignalKind::interrupt())?;
        let mut sigterm = signal(SignalKind::terminate())?;
        let mut sigusr1 = signal(SignalKind::user_defined1())?;
        // A closed terminal or SSH session ends the run as Ctrl-C does, and a stray SIGUSR2
        // does nothing: by default both would end the process without the file's trailer.
        let mut sighup = signal(SignalKind::hangup())?;
        let mut sigusr2 = signal(SignalKind::user_defined2())?;
        let deadline = self.cfg.duration.map(|d| tokio::time::Instant::now() + d);
        let mut ticker = tokio::time::interval_at(
            tokio::time::Instant::now() + self.cfg.interval,
            self.cfg.interval,
        );
        // The probe never wakes us: drain the ring on a timer paced by the record rate
        // ([`DrainPace`]). (Without records the ring stays empty: no timer.)
        let records = self.probe.mode == ProbeMode::Records;
        // The first drain comes soon: the rate is not known yet.
        let mut next_drain = tokio::time::Instant::now() + DrainPace::MIN;
        loop {
            let sleep = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                guard = ring.readable_mut() => {
                    let mut guard = guard?;
                    drain_ring(guard.get_inner_mut(), self);
                    guard.clear_ready();
                }
                () = tokio::time::sleep_until(next_drain), if records => {
                    drain_ring(ring.get_mut(), self);
                    let now = tokio::time::Instant::now();
                    next_drain = now + self.pace.next(now.into_std());
                }
                _ = ticker.tick() => {
                    // The interval holds every record completed before its end.
                    drain_ring(ring.get_mut(), self);
                    self.end_interval(iv);
                    self.keep_room();
                    if self.rotation_due() && self.write_error.is_none() {
                        // A failure has said why and set the stop reason.
                        let _failed = self.rotate(ring.get_mut(), asks).await.is_err();
                    }
                }
                Some(ask) = next_ask(asks) => self.answer(ring.get_mut(), asks, ask).await,
                _ = sigusr1.recv() => {
                    if self.recorder.is_some() {
                        self.dump(ring.get_mut(), asks, "SIGUSR1", None).await;
                    } else {
                        eprintln!("blkprof-trace: SIGUSR1: no flight recorder to dump (start with --flight-recorder DURATION)");
                    }
                }
                () = async {
                    match self.pending_dump.as_ref().map(|p| p.0) {
                        Some(at) => tokio::time::sleep_until(at).await,
                        None => std::future::pending().await,
                    }
                } => {
                    if let Some((_, why)) = self.pending_dump.take() {
                        if self.dump_in_progress() {
                            // One at a time: the trigger's dump waits for the one being
                            // written.
                            self.pending_dump =
                                Some((tokio::time::Instant::now() + std::time::Duration::from_secs(1), why));
                        } else {
                            self.dump(ring.get_mut(), asks, &why, None).await;
                        }
                    }
                }
                () = sleep => return Ok(StopReason::Duration),
                _ = sigint.recv() => return Ok(StopReason::Signal),
                _ = sigterm.recv() => return Ok(StopReason::Signal),
                _ = sighup.recv() => return Ok(StopReason::Signal),
                _ = sigusr2.recv() => {
                    eprintln!("blkprof-trace: SIGUSR2 ignored (SIGUSR1 dumps the flight recorder; SIGINT, SIGTERM and SIGHUP stop)");
                }
            }
            self.deferred_dumps(ring.get_mut(), asks).await;
            if let Some(e) = &self.write_error {
                let reason = StopReason::of_error(e);
                if reason == StopReason::DiskFull {
                    eprintln!(
                        "blkprof-trace: disk full while writing the trace ({e}); stopping cleanly"
                    );
                } else {
                    eprintln!("blkprof-trace: writing the trace failed ({e}); stopping cleanly");
                }
                return Ok(reason);
            }
            if let Some(reason) = self.stop {
                return Ok(reason);
            }
        }
    }

    /// The open file is due for its rotation (size, age, or the recorder's segment length).
    fn rotation_due(&self) -> bool {
        if self
            .rotation_retry
            .is_some_and(|at| std::time::Instant::now() < at)
        {
            return false;
        }
        self.output.as_ref().is_some_and(|o| {
            self.cfg
                .rotate_size
                .is_some_and(|s| o.writer.bytes_written() >= s)
                || self
                    .cfg
                    .rotate_time
                    .is_some_and(|t| o.opened.elapsed() >= t)
                || self.recorder.as_ref().is_some_and(|r| {
                    // The open segment is bounded too: a twentieth of the recorder's bound.
                    o.opened.elapsed() >= r.segment || o.writer.bytes_written() >= r.max_bytes / 20
                })
        })
    }

    /// The end: the pending dump, the end's cut and the wait for the IOs in flight at it, the
    /// last file's trailer, the summary; the exit code.
    async fn end(
        mut self,
        ring: &mut RingBuf<MapData>,
        asks: &mut Asks,
        iv: &Interval,
        reason: StopReason,
    ) -> Result<u8> {
        // A trigger fired and its dump is still waiting: write it now, with what there is.
        // Dumps being written finish before the tracer says it is done (and before the
        // waiting one, as one is written at a time).
        self.await_dumps().await;
        if let Some((_, why)) = self.pending_dump.take() {
            let why = format!("{why}; the tracer stopped before its time after");
            self.dump(ring, asks, &why, None).await;
        }
        self.await_dumps().await;
        let (diskstats_end, counters) = self.cut_the_end(ring, asks, iv).await?;
        let aggregates = self.probe.aggregates()?;
        let mut counters = counters;
        if self.source.is_halves() {
            // The join finds a missed completion by its request; under a ring so overloaded
            // that lost halves went unnamed it can miss one whose every half was lost. The
            // kernel's counters against the exact aggregates count them all where the kernel
            // accounts.
            let gap: u64 = summary::run_coverage(&self, &diskstats_end, &aggregates)
                .iter()
                .flat_map(|d| &d.groups)
                .map(|g| g.unaccounted(0))
                .sum();
            counters.missed_completions = counters.missed_completions.max(gap);
        }
        let closed = self
            .end_file(
                &reason.to_string(),
                diskstats_end.clone(),
                aggregates.clone(),
                counters.clone(),
            )
            .map(output::Closing::finish);
        #[expect(
            clippy::let_underscore_must_use,
            reason = "the trace is written by now; a closed stdout (piped into `head`) loses \
                      only the summary, and the exit code says how the trace ended"
        )]
        let _ = summary::summary(
            &self,
            &diskstats_end,
            &aggregates,
            &counters,
            closed.as_ref(),
            reason,
        );
        Ok(u8::from(reason.failed()))
    }

    /// The end's cut: IOs completing by this instant belong to the run. The programs stay
    /// attached while the IOs in flight at the cut complete (tallied, not stored), so nothing
    /// submitted later is mistaken for an IO of before the start, and the ones that never
    /// complete are known by stage. The diskstats at the cut and the run's loss counters.
    async fn cut_the_end(
        &mut self,
        ring: &mut RingBuf<MapData>,
        asks: &mut Asks,
        iv: &Interval,
    ) -> Result<(Vec<DiskStats>, ProbeCounters)> {
        drain_ring(ring, self);
        let (cut, diskstats_end) = self.cut(false)?;
        if let Some(start) = &self.start_cut {
            self.source.set_run(start.at_ns, cut.at_ns);
        }
        self.end_cut = Some(cut);
        let stuck = self.wait_in_flight(ring, asks).await?;
        drain_ring(ring, self);
        if let Some(c) = &mut self.end_cut {
            c.never_completed += stuck.iter().sum::<u64>();
        }
        self.probe.detach();
        drain_ring(ring, self);
        self.finish_source();
        self.last_interval(iv);
        let mut counters = self.counters()?;
        counters.missed_completions += stuck.iter().sum::<u64>();
        for (m, s) in counters.missed_stage.iter_mut().zip(stuck) {
            *m += s;
        }
        if let (Some(start), Some(end)) = (&self.start_cut, &self.end_cut) {
            counters.submitters_lost += self.probe.submitters_left(start.at_ns, end.at_ns)?;
        }
        Ok((diskstats_end, counters))
    }
}
