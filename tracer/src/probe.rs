//! Loading and attaching the eBPF probe, and reading its maps and program statistics.

use std::os::fd::{AsFd, AsRawFd};

use aya::{
    Btf, Ebpf, EbpfLoader,
    maps::{Array, HashMap as BpfHashMap, MapData, PerCpuArray, PerCpuHashMap, RingBuf},
    programs::{BtfTracePoint, RawTracePoint},
};
use tracer_common::{
    AGG_EPOCH, AGG_FLUSH_RQ, AGG_NOT_ACCOUNTED, AGGREGATE_SLOT_COUNT, AggKey, Aggregate,
    AggregateSlot, BIO_SLOT_BUSY, BIO_SLOT_COUNT, BioSlot, COUNTER_SLOTS, Counter, DeviceSlot,
    DeviceState, GLOBAL_CONFIG, Hooks, MAP_AGGREGATE_SLOTS, MAP_AGGREGATES, MAP_BIOS, MAP_COUNTERS,
    MAP_DEVICE_FILTER, MAP_DEVICE_SLOTS, MAP_DEVICES, MAP_EVENTS, ProbeConfig, dev_split,
    format::{AggregateSnapshot, ProbeCounters, ProgramStats},
    {Cuts, MAP_CUTS, MAP_REQUESTS, MAP_SLOTS, RequestSlot, RequestState, SLOT_COUNT},
};

use crate::kernel::{KERNEL_REQUIREMENT, OpDecoder, choose_hooks, owner_tracking, probe_config};

static PROBE_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/blkprof"));

#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error(
        "blkprof-trace needs root, or the CAP_BPF and CAP_PERFMON capabilities, to load its eBPF probe: run it with sudo"
    )]
    NotPrivileged,
    /// The reason is in the message, not a source: `{:#}` would print it twice.
    #[error("this kernel is not supported ({KERNEL_REQUIREMENT} is needed): {0}")]
    Kernel(crate::btf::BtfError),
    #[error("loading the eBPF probe failed: {0}")]
    Load(String),
    #[error("attaching to tracepoint {tracepoint} failed: {reason}")]
    Attach { tracepoint: String, reason: String },
    #[error("reading probe map {map} failed: {reason}")]
    Map { map: String, reason: String },
}

impl From<crate::btf::BtfError> for ProbeError {
    fn from(e: crate::btf::BtfError) -> Self {
        ProbeError::Kernel(e)
    }
}

/// Effective capabilities of this process include `CAP_BPF` + `CAP_PERFMON` (or
/// `CAP_SYS_ADMIN`).
pub fn privileged() -> bool {
    const CAP_SYS_ADMIN: u64 = 21;
    const CAP_PERFMON: u64 = 38;
    const CAP_BPF: u64 = 39;
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else {
        return false;
    };
    let cap_eff = crate::privs::ThreadStatus::parse(&status).effective;
    cap_eff & (1 << CAP_SYS_ADMIN) != 0
        || (cap_eff & (1 << CAP_BPF) != 0 && cap_eff & (1 << CAP_PERFMON) != 0)
}

/// Where a tracked request is kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tracked {
    /// Slot index and the request's address.
    Slot(u32, u64),
    /// Overflow map key (the request's address).
    Overflow(u64),
}

/// What the probe does per IO.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ProbeMode {
    /// A record per IO to the ring, and the exact aggregates.
    #[default]
    Records,
    /// The exact aggregates only, from the completion program alone (`--no-records`).
    Aggregates,
    /// Programs that return at once: the cost of being attached (benchmarks only).
    Nop,
    /// Programs that read the clock once each and return (benchmarks only).
    Clock,
}

pub struct ProbeOptions {
    pub mode: ProbeMode,
    pub ring_bytes: u32,
    /// Kernel `dev_t` values to trace; empty = all devices.
    pub devices: Vec<u32>,
    /// Read owners even where they are v1 cgroups' (benchmarks).
    pub owner_always: bool,
    /// `--files`: name the file of each IO's data pages.
    pub files: bool,
    /// Records as half records on a ring per CPU, joined in user space
    /// (docs/design/records-without-shared-state.md); `Records` mode only.
    pub halves: bool,
    /// `--btf`: the kernel's BTF from this file, not /sys/kernel/btf/vmlinux.
    pub btf: Option<std::path::PathBuf>,
}

pub struct Probe {
    ebpf: Ebpf,
    pub decoder: OpDecoder,
    pub config: ProbeConfig,
    /// The submission hook the running kernel offers (the programs loaded follow it).
    pub hooks: Hooks,
    pub mode: ProbeMode,
    /// Whether records carry the cgroup each IO is charged to, and why not.
    pub owner_cgroups: tracer_common::format::OwnerCgroups,
    /// Records come as half records on [`tracer_common::MAP_HALF_RINGS`].
    pub halves: bool,
    /// The half-record rings in use (the first ones of [`tracer_common::MAP_HALF_RINGS`]).
    half_rings_used: usize,
    /// The size of each CPU's large ring in use (`MAP_HALF_RINGS`): the rest of its share of
    /// the budget, or 4096 when the share is all small ring.
    pub large_ring_bytes: u32,
    /// Bytes of each CPU's small ring (`MAP_HOT_RINGS`), which the drain's pace is set by.
    pub hot_ring_bytes: u32,
    /// The size of the lost marks' ring.
    half_lost_bytes: u32,
    /// The programs loaded, (program, tracepoint), submission side first.
    programs: Vec<(&'static str, &'static str)>,
    links: Vec<(String, aya::programs::tp_btf::BtfTracePointLinkId)>,
}

impl Probe {
    pub fn load(opts: &ProbeOptions) -> Result<Probe, ProbeError> {
        if !privileged() {
            return Err(ProbeError::NotPrivileged);
        }
        let memlock = raise_memlock();
        let (btf_path, kbtf) = kernel_btf(opts.btf.as_deref())?;
        crate::kernel::check_minimum(&kbtf)?;
        let hooks = choose_hooks(&kbtf)?;
        let (mut config, decoder) = probe_config(&kbtf, hooks)?;
        // `BLKPROF_HOOKS=getrq-nocas` has a kernel that has it go without (how the host's tests
        // check the programs of kernels before 5.12).
        let no_cas = std::env::var("BLKPROF_HOOKS").is_ok_and(|h| h == "getrq-nocas");
        config.cas = u32::from(!no_cas && crate::kernel::bpf_has_cmpxchg());
        let (mut owner_offsets, owner_cgroups) =
            owner_tracking(&kbtf, tracer_common::cgroup::cgroup2_mount().as_deref());
        if opts.files && opts.mode == ProbeMode::Records {
            crate::kernel::enable_files(&kbtf, &mut config).map_err(|e| {
                ProbeError::Load(format!("--files needs what this kernel lacks: {e}"))
            })?;
        }
        if opts.owner_always {
            owner_offsets = owner_offsets.or_else(|| crate::kernel::owner_offsets(&kbtf).ok());
        }
        if let (Some([blkg, blkcg, cgroup, kn, id]), ProbeMode::Records) =
            (owner_offsets, opts.mode)
        {
            config.owner_cgroup = 1;
            config.bio_blkg = blkg;
            config.blkg_blkcg = blkcg;
            config.blkcg_cgroup = cgroup;
            config.cgroup_kn = kn;
            config.kn_id = id;
        }
        if opts.devices.len() > tracer_common::FILTER_LIST_MAX {
            config.filter_devices = tracer_common::FILTER_MAP;
        } else if !opts.devices.is_empty()
            && let Ok(len) = u32::try_from(opts.devices.len())
        {
            config.filter_devices = tracer_common::FILTER_LIST;
            config.filter_list_len = len;
            config.filter_list[..opts.devices.len()].copy_from_slice(&opts.devices);
        }
        let btf = Btf::parse_file(&btf_path, aya::Endianness::default())
            .map_err(|e| ProbeError::Load(format!("kernel BTF ({}): {e}", btf_path.display())))?;
        let halves = opts.halves && opts.mode == ProbeMode::Records && hooks == Hooks::IoStart;
        let mut loader = EbpfLoader::new();
        loader
            .btf(Some(&btf))
            .map_max_entries(MAP_EVENTS, if halves { 4096 } else { opts.ring_bytes });
        // A ring per CPU (CPUs beyond the rings share them): the ring budget split among the
        // rings in use, each a power of two; the others the smallest.
        let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
        let used = cpus.min(tracer_common::HALF_RINGS);
        // At most HALF_RINGS (8).
        let per_ring = (opts.ring_bytes / u32::try_from(used).unwrap_or(1))
            .next_power_of_two()
            .max(1 << 16);
        // Each CPU's small ring, tried first, stays in its cache (MAP_HOT_RINGS). A budget whose
        // share is no larger than that is all small ring: the large ring is then the least a
        // ring can be, so that a small budget holds what it says (the overload test's 4K).
        let hot_ring = per_ring.min(tracer_common::HOT_RING_BYTES);
        let per_ring = if per_ring > hot_ring { per_ring } else { 4096 };
        config.hot_ring_bytes = hot_ring;
        config.test_skip_completions = test_skip_completions();
        for (i, name) in tracer_common::MAP_HALF_RINGS.iter().enumerate() {
            loader.map_max_entries(name, if halves && i < used { per_ring } else { 4096 });
        }
        for (i, name) in tracer_common::MAP_HOT_RINGS.iter().enumerate() {
            loader.map_max_entries(name, if halves && i < used { hot_ring } else { 4096 });
        }
        // Lost halves (written only while a ring is full: 32-byte marks, or a CPU's batch
        // whole, up to 1 KB): an eighth of the budget, at least a megabyte, room for 32k
        // marks or about 5,000 lost IOs in batches a drain.
        let lost_bytes = if halves {
            (opts.ring_bytes / 8).next_power_of_two().max(1 << 20)
        } else {
            4096
        };
        loader.map_max_entries(tracer_common::MAP_HALF_LOST, lost_bytes);
        // The submitters' table the kernel can use (CAS slots, or a hash map without CAS).
        loader.map_max_entries(
            tracer_common::MAP_BIOS_HASH,
            if config.cas == 0 {
                tracer_common::BIO_SLOT_COUNT
            } else {
                1
            },
        );
        loader.override_global(GLOBAL_CONFIG, &config, true);
        let mut ebpf = loader
            .load(PROBE_OBJECT)
            .map_err(|e| ProbeError::Load(format!("{e:#}{}", memlock.hint(refused(&e)))))?;
        if !opts.devices.is_empty() {
            let mut filter: BpfHashMap<_, u32, u8> = BpfHashMap::try_from(
                ebpf.map_mut(MAP_DEVICE_FILTER)
                    .ok_or_else(|| ProbeError::Load("no device filter map".into()))?,
            )
            .map_err(|e| ProbeError::Load(e.to_string()))?;
            for &dev in &opts.devices {
                filter
                    .insert(dev, 1, 0)
                    .map_err(|e| ProbeError::Load(e.to_string()))?;
            }
        }
        let programs = programs_for(opts.mode, halves, hooks, &config);
        for &(prog, tracepoint) in &programs {
            let p: &mut BtfTracePoint = ebpf
                .program_mut(prog)
                .ok_or_else(|| ProbeError::Load(format!("program {prog} missing from the object")))?
                .try_into()
                .map_err(|e: aya::programs::ProgramError| ProbeError::Load(e.to_string()))?;
            p.load(tracepoint, &btf).map_err(|e| ProbeError::Attach {
                tracepoint: tracepoint.into(),
                reason: format!(
                    "{e:#}{}",
                    if opts.btf.is_some() && !std::path::Path::new(crate::btf::SYS_BTF).exists() {
                        " (with --btf on a kernel that shows no BTF of its own: if it was built \
                         without CONFIG_DEBUG_INFO_BTF, its verifier cannot check BTF tracepoint \
                         programs, and blkprof-trace cannot run there)"
                    } else {
                        ""
                    }
                ),
            })?;
        }
        if halves {
            let p: &mut RawTracePoint = ebpf
                .program_mut(tracer_common::PROGRAM_FLUSH_HALVES)
                .ok_or_else(|| {
                    ProbeError::Load(format!(
                        "program {} missing from the object",
                        tracer_common::PROGRAM_FLUSH_HALVES
                    ))
                })?
                .try_into()
                .map_err(|e: aya::programs::ProgramError| ProbeError::Load(e.to_string()))?;
            p.load().map_err(|e| ProbeError::Load(format!("{e:#}")))?;
        }
        Ok(Probe {
            ebpf,
            decoder,
            config,
            hooks,
            mode: opts.mode,
            halves,
            half_rings_used: used,
            large_ring_bytes: per_ring,
            hot_ring_bytes: hot_ring,
            half_lost_bytes: lost_bytes,
            owner_cgroups,
            programs,
            links: Vec::new(),
        })
    }

    /// Attach in the order that keeps the in-flight counts consistent: completion side first,
    /// submission last.
    pub fn attach(&mut self) -> Result<(), ProbeError> {
        for (prog, tracepoint) in self.programs.iter().rev() {
            let p: &mut BtfTracePoint = self
                .ebpf
                .program_mut(prog)
                .and_then(|p| p.try_into().ok())
                .ok_or_else(|| ProbeError::Load(format!("program {prog} missing")))?;
            let link = p.attach().map_err(|e| ProbeError::Attach {
                tracepoint: (*tracepoint).into(),
                reason: format!("{e:#}"),
            })?;
            self.links.push((prog.to_string(), link));
        }
        Ok(())
    }

    /// Detach, submission side first, so requests in flight can still complete in the probe.
    pub fn detach(&mut self) {
        let mut links = std::mem::take(&mut self.links);
        links.reverse();
        for (prog, link) in links {
            if let Some(p) = self.ebpf.program_mut(&prog) {
                let p: Result<&mut BtfTracePoint, _> = p.try_into();
                if let Ok(p) = p {
                    #[expect(
                        clippy::let_underscore_must_use,
                        reason = "a link that will not detach goes when the process exits and \
                                  its fds close; the daemon is stopping, nothing else to do"
                    )]
                    let _ = p.detach(link);
                }
            }
        }
    }

    /// Write the run's cut (see [`Cuts`]).
    pub fn set_cuts(&mut self, cuts: Cuts) -> Result<(), ProbeError> {
        let err = |e: aya::maps::MapError| ProbeError::Map {
            map: MAP_CUTS.into(),
            reason: e.to_string(),
        };
        let mut arr: Array<_, Cuts> =
            Array::try_from(self.ebpf.map_mut(MAP_CUTS).ok_or_else(|| ProbeError::Map {
                map: MAP_CUTS.into(),
                reason: "missing".into(),
            })?)
            .map_err(err)?;
        arr.set(0, cuts, 0).map_err(err)
    }

    /// Every request the probe tracks now, with where it is kept: (slot index or overflow key,
    /// state). Reads the whole slot table (one syscall per slot: tens of ms), so it is for the
    /// end of a run.
    pub fn tracked(&self) -> Result<Vec<(Tracked, RequestState)>, ProbeError> {
        let err = |map: &str| {
            let map = map.to_string();
            move |e: aya::maps::MapError| ProbeError::Map {
                map: map.clone(),
                reason: e.to_string(),
            }
        };
        let mut out = Vec::new();
        let slots: Array<_, RequestSlot> =
            Array::try_from(self.ebpf.map(MAP_SLOTS).ok_or_else(|| ProbeError::Map {
                map: MAP_SLOTS.into(),
                reason: "missing".into(),
            })?)
            .map_err(err(MAP_SLOTS))?;
        for i in 0..SLOT_COUNT {
            let s = slots.get(&i, 0).map_err(err(MAP_SLOTS))?;
            if s.key != 0 {
                out.push((Tracked::Slot(i, s.key), s.st));
            }
        }
        if let Some(m) = self.ebpf.map(MAP_REQUESTS) {
            let map: BpfHashMap<_, u64, RequestState> =
                BpfHashMap::try_from(m).map_err(err(MAP_REQUESTS))?;
            for item in &map {
                let (k, st) = item.map_err(err(MAP_REQUESTS))?;
                out.push((Tracked::Overflow(k), st));
            }
        }
        Ok(out)
    }

    /// [`Hooks::GetRq`]: the submitters recorded at `block_getrq` in `(after_ns, until_ns]`
    /// that no request took up and nothing overwrote, read once the run is over. Each is a
    /// submitter lost like those overwritten ([`Counter::SubmitterLost`]): above all, an
    /// fsync's empty flush whose completion run the kernel skipped, which no other program
    /// meets, leaves only its entry. 0 on the other path (no such map).
    pub fn submitters_left(&self, after_ns: u64, until_ns: u64) -> Result<u64, ProbeError> {
        if self.hooks != Hooks::GetRq {
            return Ok(0);
        }
        let err = |e: aya::maps::MapError| ProbeError::Map {
            map: MAP_BIOS.into(),
            reason: e.to_string(),
        };
        if self.config.cas == 0 {
            let Some(m) = self.ebpf.map(tracer_common::MAP_BIOS_HASH) else {
                return Ok(0);
            };
            let slots: BpfHashMap<_, u64, BioSlot> = BpfHashMap::try_from(m).map_err(err)?;
            let mut left = 0;
            for s in &slots {
                let (_, s) = s.map_err(err)?;
                if s.ts > after_ns && s.ts <= until_ns {
                    left += 1;
                }
            }
            return Ok(left);
        }
        let Some(m) = self.ebpf.map(MAP_BIOS) else {
            return Ok(0);
        };
        let slots: Array<_, BioSlot> = Array::try_from(m).map_err(err)?;
        let mut left = 0;
        for i in 0..BIO_SLOT_COUNT {
            let s = slots.get(&i, 0).map_err(err)?;
            if s.key > BIO_SLOT_BUSY && s.ts > after_ns && s.ts <= until_ns {
                left += 1;
            }
        }
        Ok(left)
    }

    /// Whether a request found by [`Probe::tracked`] is still tracked with the same state
    /// (not completed, nor replaced by a new request in the same place).
    pub fn still_tracked(&self, at: Tracked, st: &RequestState) -> bool {
        match at {
            Tracked::Slot(i, key) => self
                .ebpf
                .map(MAP_SLOTS)
                .and_then(|m| Array::<_, RequestSlot>::try_from(m).ok())
                .and_then(|a| a.get(&i, 0).ok())
                .is_some_and(|s| s.key == key && s.st.enter_ns == st.enter_ns),
            Tracked::Overflow(key) => self
                .ebpf
                .map(MAP_REQUESTS)
                .and_then(|m| BpfHashMap::<_, u64, RequestState>::try_from(m).ok())
                .and_then(|h| h.get(&key, 0).ok())
                .is_some_and(|s| s.enter_ns == st.enter_ns),
        }
    }

    /// What writes each CPU's batch of halves to its rings (none unless [`Probe::halves`]).
    pub fn take_half_flush(&mut self) -> Result<Option<crate::ringread::BatchFlush>, ProbeError> {
        if !self.halves {
            return Ok(None);
        }
        let name = tracer_common::PROGRAM_FLUSH_HALVES;
        let prog = self
            .ebpf
            .program(name)
            .ok_or_else(|| ProbeError::Load(format!("program {name} missing from the object")))?
            .fd()
            .and_then(|fd| {
                fd.as_fd()
                    .try_clone_to_owned()
                    .map_err(aya::programs::ProgramError::IOError)
            })
            .map_err(|e| ProbeError::Load(format!("{name}: {e}")))?;
        let map_err = |reason: String| ProbeError::Map {
            map: tracer_common::MAP_HALF_BATCH.into(),
            reason,
        };
        let map = self
            .ebpf
            .take_map(tracer_common::MAP_HALF_BATCH)
            .ok_or_else(|| map_err("missing".into()))?;
        let batches = PerCpuArray::try_from(map).map_err(|e| map_err(e.to_string()))?;
        crate::ringread::BatchFlush::new(prog, batches)
            .map(Some)
            .map_err(|e| {
                map_err(format!(
                    "writing the CPUs' batches of halves to the rings: {e}"
                ))
            })
    }

    /// The half records' rings in use (none unless [`Probe::halves`]).
    pub fn take_half_rings(&mut self) -> Result<Vec<crate::ringread::BatchRing>, ProbeError> {
        if !self.halves {
            return Ok(Vec::new());
        }
        let mut rings = Vec::new();
        // The small and the large rings of the CPUs (as many as were sized at load), then the
        // lost marks' ring.
        let used = self.half_rings_used;
        for name in tracer_common::MAP_HOT_RINGS[..used]
            .iter()
            .chain(&tracer_common::MAP_HALF_RINGS[..used])
            .chain([&tracer_common::MAP_HALF_LOST])
        {
            let map = self.ebpf.take_map(name).ok_or_else(|| ProbeError::Map {
                map: (*name).into(),
                reason: "missing".into(),
            })?;
            let aya::maps::Map::RingBuf(data) = map else {
                return Err(ProbeError::Map {
                    map: (*name).into(),
                    reason: "not a ring buffer".into(),
                });
            };
            let size = if *name == tracer_common::MAP_HALF_LOST {
                self.half_lost_bytes
            } else if tracer_common::MAP_HOT_RINGS.contains(name) {
                self.hot_ring_bytes
            } else {
                self.large_ring_bytes
            };
            rings.push(
                crate::ringread::BatchRing::new(data, size as usize).map_err(|e| {
                    ProbeError::Map {
                        map: (*name).into(),
                        reason: e.to_string(),
                    }
                })?,
            );
        }
        Ok(rings)
    }

    pub fn take_ring(&mut self) -> Result<RingBuf<MapData>, ProbeError> {
        let map = self
            .ebpf
            .take_map(MAP_EVENTS)
            .ok_or_else(|| ProbeError::Map {
                map: MAP_EVENTS.into(),
                reason: "missing".into(),
            })?;
        RingBuf::try_from(map).map_err(|e| ProbeError::Map {
            map: MAP_EVENTS.into(),
            reason: e.to_string(),
        })
    }

    /// The ring the probe names files on (`--files`).
    pub fn take_names_ring(&mut self) -> Result<RingBuf<MapData>, ProbeError> {
        let map = self
            .ebpf
            .take_map(tracer_common::MAP_FILE_NAMES)
            .ok_or_else(|| ProbeError::Map {
                map: tracer_common::MAP_FILE_NAMES.into(),
                reason: "missing".into(),
            })?;
        RingBuf::try_from(map).map_err(|e| ProbeError::Map {
            map: tracer_common::MAP_FILE_NAMES.into(),
            reason: e.to_string(),
        })
    }

    pub fn counters(&self) -> Result<ProbeCounters, ProbeError> {
        let err = |e: aya::maps::MapError| ProbeError::Map {
            map: MAP_COUNTERS.into(),
            reason: e.to_string(),
        };
        let arr: PerCpuArray<_, u64> =
            PerCpuArray::try_from(self.ebpf.map(MAP_COUNTERS).ok_or_else(|| ProbeError::Map {
                map: MAP_COUNTERS.into(),
                reason: "missing".into(),
            })?)
            .map_err(err)?;
        let mut sums = [0u64; COUNTER_SLOTS as usize];
        for (i, s) in (0..COUNTER_SLOTS).zip(sums.iter_mut()) {
            let vals = arr.get(&i, 0).map_err(err)?;
            *s = vals.iter().sum();
        }
        let mut programs = Vec::new();
        for &(prog, tracepoint) in &self.programs {
            if let Some(p) = self.ebpf.program(prog) {
                let p: Result<&BtfTracePoint, _> = p.try_into();
                if let Ok(fd) = p.map_err(|_| ()).and_then(|p| p.fd().map_err(|_| ())) {
                    let (run_cnt, run_time_ns, recursion_misses) =
                        prog_stats(fd.as_fd().as_raw_fd());
                    programs.push(ProgramStats {
                        name: tracepoint.to_string(),
                        run_cnt,
                        run_time_ns,
                        recursion_misses,
                    });
                }
            }
        }
        Ok(ProbeCounters {
            ring_drops: sums[Counter::RingDrops as usize],
            request_map_full: sums[Counter::RequestMapFull as usize],
            started_before_attach: sums[Counter::StartedBeforeAttach as usize],
            aggregate_map_full: sums[Counter::AggregateMapFull as usize],
            records_written: 0,
            missed_completions: sums[Counter::MissedCompletion as usize],
            missed_stage: [
                sums[Counter::MissedAfterPartial as usize],
                sums[Counter::MissedIssued as usize],
                sums[Counter::MissedNeverIssued as usize],
            ],
            submitters_lost: sums[Counter::SubmitterLost as usize],
            file_name_drops: sums[Counter::FileNameDrops as usize],
            half_drops: sums[Counter::HalfDrops as usize],
            merge_half_drops: sums[Counter::MergeHalfDrops as usize],
            lost_unnamed: sums[Counter::LostUnnamed as usize],
            programs,
        })
    }

    /// Whether a read of the probe's counters goes through now ([`crate::privs`] asks with
    /// and without `CAP_BPF`).
    pub fn maps_readable(&self) -> bool {
        self.ebpf
            .map(MAP_COUNTERS)
            .and_then(|m| PerCpuArray::<_, u64>::try_from(m).ok())
            .is_some_and(|a| a.get(&0, 0).is_ok())
    }

    /// The exact aggregates so far, of both epoch parities (see [`Cuts::rotation`]).
    pub fn aggregates(&self) -> Result<Vec<AggregateSnapshot>, ProbeError> {
        self.aggregates_of(None)
    }

    /// The aggregates of one epoch parity ([`AGG_EPOCH`] or 0), or of both.
    pub fn aggregates_of(&self, epoch: Option<u32>) -> Result<Vec<AggregateSnapshot>, ProbeError> {
        let err = |e: aya::maps::MapError| ProbeError::Map {
            map: MAP_AGGREGATES.into(),
            reason: e.to_string(),
        };
        let map: PerCpuHashMap<_, AggKey, Aggregate> =
            PerCpuHashMap::try_from(self.ebpf.map(MAP_AGGREGATES).ok_or_else(|| {
                ProbeError::Map {
                    map: MAP_AGGREGATES.into(),
                    reason: "missing".into(),
                }
            })?)
            .map_err(err)?;
        // Sum every CPU's copy of each key, from the direct-mapped slots and the hash map.
        let mut sums: std::collections::BTreeMap<(u32, u32), Aggregate> =
            std::collections::BTreeMap::default();
        let mut add = |k: AggKey, c: &Aggregate| {
            if epoch.is_some_and(|e| k.op & AGG_EPOCH != e) {
                return;
            }
            let v = sums.entry((k.dev, k.op & !AGG_EPOCH)).or_default();
            v.ios += c.ios;
            v.bytes += c.bytes;
            v.total_ns_sum += c.total_ns_sum;
            v.timed += c.timed;
            v.device_ns_sum += c.device_ns_sum;
            v.queue_ns_sum += c.queue_ns_sum;
            for (x, y) in v.size.iter_mut().zip(&c.size) {
                *x += y;
            }
            for (x, y) in [
                (&mut v.queue_latency, &c.queue_latency),
                (&mut v.device_latency, &c.device_latency),
                (&mut v.total_latency, &c.total_latency),
            ] {
                for (x, y) in x.iter_mut().zip(y) {
                    *x += y;
                }
            }
        };
        let slots: PerCpuArray<_, AggregateSlot> =
            PerCpuArray::try_from(self.ebpf.map(MAP_AGGREGATE_SLOTS).ok_or_else(|| {
                ProbeError::Map {
                    map: MAP_AGGREGATE_SLOTS.into(),
                    reason: "missing".into(),
                }
            })?)
            .map_err(err)?;
        for i in 0..AGGREGATE_SLOT_COUNT {
            for c in slots.get(&i, 0).map_err(err)?.iter() {
                if c.tag != 0 {
                    add(AggKey::from_tag(c.tag), &c.agg);
                }
            }
        }
        for item in &map {
            let (k, per_cpu) = item.map_err(err)?;
            for c in per_cpu.iter() {
                add(k, c);
            }
        }
        let mut out = Vec::new();
        for ((dev, kop), v) in sums {
            let k = AggKey { dev, op: kop };
            let (major, minor) = dev_split(k.dev);
            let (op, _) = self
                .decoder
                .decode(k.op & !(AGG_FLUSH_RQ | AGG_NOT_ACCOUNTED));
            out.push(AggregateSnapshot {
                major,
                minor,
                op: Some(op),
                flush_rq: k.op & AGG_FLUSH_RQ != 0,
                not_accounted: k.op & AGG_NOT_ACCOUNTED != 0,
                ios: v.ios,
                bytes: v.bytes,
                total_ns_sum: v.total_ns_sum,
                timed: v.timed,
                device_ns_sum: v.device_ns_sum,
                queue_ns_sum: v.queue_ns_sum,
                size: trimmed(&v.size),
                queue_latency: trimmed(&v.queue_latency),
                device_latency: trimmed(&v.device_latency),
                total_latency: trimmed(&v.total_latency),
            });
        }
        out.sort_by_key(|a| (a.major, a.minor, a.op, a.flush_rq, a.not_accounted));
        Ok(out)
    }

    /// Current in-flight counts per device (for diagnostics).
    pub fn device_states(&self) -> Vec<(u32, DeviceState)> {
        let mut out = Vec::new();
        if let Some(Ok(slots)) = self
            .ebpf
            .map(MAP_DEVICE_SLOTS)
            .map(aya::maps::Array::<_, DeviceSlot>::try_from)
        {
            out.extend(
                slots
                    .iter()
                    .filter_map(Result::ok)
                    .filter_map(|s| Some((u32::try_from(s.tag.checked_sub(1)?).ok()?, s.st))),
            );
        }
        if let Some(Ok(map)) = self
            .ebpf
            .map(MAP_DEVICES)
            .map(BpfHashMap::<_, u32, DeviceState>::try_from)
        {
            out.extend(map.iter().filter_map(Result::ok));
        }
        out
    }
}

/// How the tests have the completion program skip runs, as some kernels do (the e2e test of
/// missed completions); never set in use.
fn test_skip_completions() -> u32 {
    let every = std::env::var("BLKPROF_TEST_SKIP_COMPLETIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    if every != 0 {
        eprintln!(
            "blkprof-trace: BLKPROF_TEST_SKIP_COMPLETIONS={every}: the completion program skips \
             every {every}th run on each CPU for a traced device on purpose (for tests): this \
             trace misses IOs"
        );
    }
    every
}

/// The kernel's BTF, from `--btf` or /sys/kernel/btf/vmlinux: where it was read, and its
/// offsets and enums.
fn kernel_btf(
    given: Option<&std::path::Path>,
) -> Result<(std::path::PathBuf, crate::btf::KernelBtf), ProbeError> {
    let path = given.map_or_else(
        || std::path::PathBuf::from(crate::btf::SYS_BTF),
        std::path::Path::to_path_buf,
    );
    let btf = crate::btf::KernelBtf::from_file(&path).map_err(|e| match e {
        crate::btf::BtfError::Read { .. } if given.is_none() => ProbeError::Load(format!(
            "{e}; where the kernel has BTF but this file is hidden (a container, a hardened \
             /sys), give it as --btf FILE"
        )),
        e => ProbeError::Kernel(e),
    })?;
    Ok((path, btf))
}

/// The programs to load, (program, tracepoint), submission side first: by mode, and on the
/// `block_getrq` path by what the kernel's BPF and tracepoints offer.
fn programs_for(
    mode: ProbeMode,
    halves: bool,
    hooks: Hooks,
    config: &ProbeConfig,
) -> Vec<(&'static str, &'static str)> {
    match mode {
        ProbeMode::Records if halves => tracer_common::PROGRAMS_HALVES.to_vec(),
        ProbeMode::Records if hooks == Hooks::GetRq => tracer_common::programs_getrq(
            config.cas != 0,
            config.rq_arg != 0,
            config.getrq_bio_arg != 0,
        )
        .to_vec(),
        ProbeMode::Records => hooks.programs().to_vec(),
        ProbeMode::Aggregates if config.cas == 0 => {
            tracer_common::PROGRAMS_AGGREGATES_NOCAS.to_vec()
        }
        ProbeMode::Aggregates => tracer_common::PROGRAMS_AGGREGATES.to_vec(),
        ProbeMode::Nop => tracer_common::PROGRAMS_NOP.to_vec(),
        ProbeMode::Clock => tracer_common::PROGRAMS_CLOCK.to_vec(),
    }
}

/// What raising `RLIMIT_MEMLOCK` came to: kernels before 5.11 charge BPF maps to it.
enum Memlock {
    Unlimited,
    /// Not raised to infinity (no `CAP_SYS_RESOURCE`): raised to the hard limit, in bytes.
    Limited(u64),
}

impl Memlock {
    /// Sentences for a load that failed, when the limit, or a seccomp filter (`refused`: the
    /// kernel answered EPERM), may be why.
    fn hint(&self, refused: bool) -> String {
        let mut hint = match self {
            Memlock::Unlimited => String::new(),
            Memlock::Limited(bytes) => format!(
                " (the locked-memory limit is {bytes} bytes and could not be raised: kernels \
                 before 5.11 charge BPF maps to it; run with LimitMEMLOCK=infinity in the unit, \
                 or `ulimit -l unlimited`)"
            ),
        };
        if refused {
            hint.push_str(
                " (bpf() was refused: in a container, the runtime's seccomp profile may allow \
                 it only with CAP_SYS_ADMIN, as Debian 12's podman does; run with \
                 --security-opt seccomp=/usr/share/blkprof/seccomp.json, which allows bpf() \
                 with CAP_BPF and perf_event_open() with CAP_PERFMON: docs/install.md)",
            );
        }
        hint
    }
}

/// Whether the kernel refused a call of the load with EPERM.
fn refused(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(e);
    while let Some(c) = cause {
        if c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.raw_os_error() == Some(libc::EPERM))
        {
            return true;
        }
        cause = c.source();
    }
    false
}

/// Raise `RLIMIT_MEMLOCK` to infinity, or as far as the hard limit allows.
fn raise_memlock() -> Memlock {
    let infinite = libc::rlimit {
        rlim_cur: libc::RLIM_INFINITY,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: a valid rlimit.
    if unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &raw const infinite) } == 0 {
        return Memlock::Unlimited;
    }
    let mut now = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: a valid rlimit to fill.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &raw mut now) } != 0 {
        return Memlock::Limited(0);
    }
    if now.rlim_max == libc::RLIM_INFINITY {
        return Memlock::Unlimited;
    }
    let hard = libc::rlimit {
        rlim_cur: now.rlim_max,
        rlim_max: now.rlim_max,
    };
    // SAFETY: a valid rlimit, within the hard limit.
    unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &raw const hard) };
    Memlock::Limited(now.rlim_max)
}

/// (`run_cnt`, `run_time_ns`, `recursion_misses`) of a loaded program, from `bpf_prog_info`
/// (aya's own UAPI binding; aya 0.14's `ProgramInfo` does not expose these three). `run_cnt` and
/// `run_time_ns` are only counted while `kernel.bpf_stats_enabled` is 1; a kernel whose
/// `bpf_prog_info` ends before a field reports it as 0.
#[expect(
    clippy::cast_possible_truncation,
    reason = "the sizes of bpf_prog_info and InfoAttr, a few hundred bytes, as the syscall's u32s"
)]
fn prog_stats(fd: i32) -> (u64, u64, u64) {
    use aya_obj::generated::bpf_prog_info;
    use std::mem::offset_of;
    #[repr(C)]
    struct InfoAttr {
        bpf_fd: u32,
        info_len: u32,
        info: u64,
    }
    const BPF_OBJ_GET_INFO_BY_FD: libc::c_long = 15;
    // An open fd is never negative.
    let Ok(bpf_fd) = u32::try_from(fd) else {
        return (0, 0, 0);
    };
    // SAFETY: bpf_prog_info is plain old data (integers and pointers as u64).
    let mut info: bpf_prog_info = unsafe { std::mem::zeroed() };
    let mut attr = InfoAttr {
        bpf_fd,
        info_len: std::mem::size_of::<bpf_prog_info>() as u32,
        info: (&raw mut info) as u64,
    };
    // SAFETY: attr and info outlive the call; sizes are passed.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_OBJ_GET_INFO_BY_FD,
            &raw mut attr,
            std::mem::size_of::<InfoAttr>() as u32,
        )
    };
    if rc != 0 {
        return (0, 0, 0);
    }
    // The kernel fills what it knows and says how much.
    let has = |end: usize| attr.info_len as usize >= end;
    let get = |off: usize, v: u64| if has(off + 8) { v } else { 0 };
    (
        get(offset_of!(bpf_prog_info, run_cnt), info.run_cnt),
        get(offset_of!(bpf_prog_info, run_time_ns), info.run_time_ns),
        get(
            offset_of!(bpf_prog_info, recursion_misses),
            info.recursion_misses,
        ),
    )
}

/// A histogram without its trailing empty buckets.
fn trimmed(h: &[u64]) -> Vec<u64> {
    let n = h.iter().rposition(|&c| c != 0).map_or(0, |i| i + 1);
    h[..n].to_vec()
}
