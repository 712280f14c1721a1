//! The kernel<->user ABI: map names, the per-IO ring record, the load-time config and
//! the in-kernel aggregates. Everything is `#[repr(C)]`, widest fields first, no `bool`.

/// Ring buffer carrying one [`IoEvent`] per completed IO.
pub const MAP_EVENTS: &str = "EVENTS";
/// Per-request state, keyed by the kernel's `struct request *`.
pub const MAP_REQUESTS: &str = "REQUESTS";
/// Per-device in-flight counters, keyed by kernel `dev_t`.
pub const MAP_DEVICES: &str = "DEVICES";
/// Direct-mapped per-device in-flight counts ([`DeviceSlot`]); devices whose slot is taken
/// are in [`MAP_DEVICES`].
pub const MAP_DEVICE_SLOTS: &str = "DEVICE_SLOTS";
/// Exact per-(device, op) aggregates, kept even when ring records are dropped.
pub const MAP_AGGREGATES: &str = "AGGREGATES";
/// Per-CPU counters indexed by [`Counter`]; aggregates are per-CPU too (summed by user space).
pub const MAP_COUNTERS: &str = "COUNTERS";
/// Devices to trace (key `dev_t`), used when [`ProbeConfig::filter_devices`] is 1.
pub const MAP_DEVICE_FILTER: &str = "DEVICE_FILTER";
/// Direct-mapped request states ([`RequestSlot`]); requests whose slot is taken are in
/// [`MAP_REQUESTS`].
pub const MAP_SLOTS: &str = "SLOTS";
pub const SLOT_COUNT: u32 = 1 << 16;
/// The run's cut ([`Cuts`], one entry), written by user space while the probe runs.
pub const MAP_CUTS: &str = "CUTS";
/// Name of the global holding the [`ProbeConfig`].
pub const GLOBAL_CONFIG: &str = "CONFIG";

/// Program names (the eBPF function names) and their tracepoints, submission side first, on
/// kernels with the `block_io_start` tracepoint (Linux 6.5 and newer).
pub const PROGRAMS: [(&str, &str); 5] = [
    ("blkprof_io_start", "block_io_start"),
    ("blkprof_rq_issue", "block_rq_issue"),
    ("blkprof_rq_requeue", "block_rq_requeue"),
    ("blkprof_rq_merge", "block_rq_merge"),
    ("blkprof_rq_complete", "block_rq_complete"),
];

/// The programs on kernels without `block_io_start` (Linux 6.1 to 6.4): `block_getrq`, in the
/// submitter's task for every request `blk_mq_submit_bio` makes, records the submitter under
/// the bio's address ([`MAP_BIOS`]), and the first request event that meets the request adopts
/// it through `rq->bio` (docs/design/kernel-6.1-fallback.md).
pub const PROGRAMS_GETRQ: [(&str, &str); 6] = [
    ("blkprof_getrq", "block_getrq"),
    ("blkprof_insert_fb", "block_rq_insert"),
    ("blkprof_issue_fb", "block_rq_issue"),
    ("blkprof_rq_requeue", "block_rq_requeue"),
    ("blkprof_merge_fb", "block_rq_merge"),
    ("blkprof_complete_fb", "block_rq_complete"),
];

/// The programs of the `block_getrq` path for what the kernel has: [`PROGRAMS_GETRQ`] where
/// BPF has compare-and-exchange (5.12) and the tracepoints take the request (bio) first; else
/// the same programs compiled without the instruction (tracking requests and submitters in
/// hash maps), reading the request (`rq_after_queue`) and the bio (`bio_after_queue`) after
/// the queue where the prototypes put it there (before 5.11; [`ProbeConfig::rq_arg`]).
pub fn programs_getrq(
    cas: bool,
    rq_after_queue: bool,
    bio_after_queue: bool,
) -> [(&'static str, &'static str); 6] {
    if cas && !rq_after_queue && !bio_after_queue {
        return PROGRAMS_GETRQ;
    }
    let q = |first: &'static str, after: &'static str| if rq_after_queue { after } else { first };
    [
        (
            if bio_after_queue {
                "blkprof_getrq_nocas_q"
            } else {
                "blkprof_getrq_nocas"
            },
            "block_getrq",
        ),
        (
            q("blkprof_insert_nocas", "blkprof_insert_nocas_q"),
            "block_rq_insert",
        ),
        (
            q("blkprof_issue_nocas", "blkprof_issue_nocas_q"),
            "block_rq_issue",
        ),
        (
            q("blkprof_rq_requeue", "blkprof_requeue_q"),
            "block_rq_requeue",
        ),
        (
            q("blkprof_merge_nocas", "blkprof_merge_nocas_q"),
            "block_rq_merge",
        ),
        ("blkprof_complete_nocas", "block_rq_complete"),
    ]
}

/// `--no-records`: the completion alone, counted into the aggregates with the kernel's own
/// stamps; no per-IO record, no request tracked from its submission.
pub const PROGRAMS_AGGREGATES: [(&str, &str); 1] = [("blkprof_complete_agg", "block_rq_complete")];
/// [`PROGRAMS_AGGREGATES`] without compare-and-exchange (see [`programs_getrq`]).
pub const PROGRAMS_AGGREGATES_NOCAS: [(&str, &str); 1] =
    [("blkprof_complete_agg_nocas", "block_rq_complete")];

/// The half-record programs (docs/design/records-without-shared-state.md; 6.5+, and devices
/// whose kernel stamps every request's start): each writes what it knows to its CPU's ring.
pub const PROGRAMS_HALVES: [(&str, &str); 5] = [
    ("blkprof_start_half", "block_io_start"),
    ("blkprof_issue_half", "block_rq_issue"),
    ("blkprof_requeue_half", "block_rq_requeue"),
    ("blkprof_merge_half", "block_rq_merge"),
    ("blkprof_complete_half", "block_rq_complete"),
];

/// The ring of [`HALF_LOST`] marks, shared by all CPUs (written only when a ring is full).
pub const MAP_HALF_LOST: &str = "HALFLOST";

/// The rings of the half programs: CPU `c` writes to ring `c % HALF_RINGS`.
pub const HALF_RINGS: usize = 8;
pub const MAP_HALF_RINGS: [&str; HALF_RINGS] = [
    "HALVES0", "HALVES1", "HALVES2", "HALVES3", "HALVES4", "HALVES5", "HALVES6", "HALVES7",
];

/// The small ring of each CPU that the half programs try first: small enough that its lines
/// are still in the CPU's cache when the ring comes round to them again (a half written into a
/// line last touched a large ring ago waits for the line from memory). A half that does not
/// fit spills into the CPU's ring of [`MAP_HALF_RINGS`], which holds the rest of the budget.
pub const MAP_HOT_RINGS: [&str; HALF_RINGS] = [
    "HOT0", "HOT1", "HOT2", "HOT3", "HOT4", "HOT5", "HOT6", "HOT7",
];

/// Bytes of each ring of [`MAP_HOT_RINGS`] (at most: a smaller ring budget makes them
/// smaller). Measured (`BENCHMARKS.md`): the programs cost 372-430 ns per IO at 40k IOPS with
/// rings of this size against 571-588 with rings of 8 MB.
pub const HOT_RING_BYTES: u32 = 128 << 10;

/// Each CPU's batch of halves ([`HalfBatch`]), gathered before one ring write.
pub const MAP_HALF_BATCH: &str = "HALFBATCH";

/// The program that writes a CPU's batch to its ring when the daemon runs it on that CPU
/// (`BPF_PROG_TEST_RUN` with `BPF_F_TEST_RUN_ON_CPU`) before each drain. Never attached.
pub const PROGRAM_FLUSH_HALVES: &str = "blkprof_flush_halves";

/// Bytes of halves a [`HalfBatch`] holds: 11 to 32 halves, one ring write.
pub const HALF_BATCH_BYTES: usize = 1024;

/// What the halves of a batch would be counted as if the batch were lost, by class: a start
/// half ([`Counter::SubmitterLost`]), an issue or requeue half ([`Counter::HalfDrops`], named),
/// a partial or off-device end half ([`Counter::HalfDrops`], not named), a merge half
/// ([`Counter::MergeHalfDrops`]), a last end half ([`Counter::RingDrops`]).
pub const BATCH_LOSS_CLASSES: usize = 5;

/// A CPU's halves waiting for one ring write (`BENCHMARKS.md`: a ring reservation per half costs
/// about 80 ns at 40k IOPS, a store into this batch a fraction of it). A program that finds `busy`
/// set (it interrupted another program of the CPU between its loads and stores of the batch) writes
/// its half to the ring itself. A batch goes to the CPU's small ring (else its large one) when the
/// next half does not fit, or when the daemon runs [`PROGRAM_FLUSH_HALVES`] on the CPU; if neither
/// ring has room its halves are counted lost by class and the batch goes whole to
/// [`MAP_HALF_LOST`], where the join takes each half as its lost mark.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct HalfBatch {
    pub busy: u32,
    /// Bytes of halves in `buf`.
    pub len: u32,
    /// The earliest instant of the halves in `buf` (not always the first's: a program that
    /// stamped its half and was interrupted adds it after the interrupting programs' halves):
    /// the daemon sweeps no further while the batch waits, and writes it to the rings itself
    /// once it is [`HALF_BATCH_STALE_NS`] old.
    pub first_ns: u64,
    /// Halves in `buf` by loss class ([`BATCH_LOSS_CLASSES`]), and padding.
    pub lost: [u32; 6],
    pub buf: [u8; HALF_BATCH_BYTES],
}
const _: () = assert!(core::mem::size_of::<HalfBatch>() == 40 + HALF_BATCH_BYTES);

/// How old a CPU's batch may grow before the daemon has it written to the rings (an IPI to
/// the CPU): a CPU with IO to do fills and writes its batch far sooner (every 0.3 ms at 40k
/// IOPS), one gone quiet has its last halves written within a drain or two of this age. The
/// IPI waits for its CPU: a batch goes stale mostly on a virtual CPU its host has put off
/// for a while, and the daemon spins until it runs again (3-69 ms per IPI measured on a
/// 2-vCPU VM with batches 10 ms old, `BENCHMARKS.md`). At 100 ms a CPU put off for less is
/// left to write its batch itself when it runs again.
pub const HALF_BATCH_STALE_NS: u64 = 100_000_000;

/// Programs that return at once, on the tracepoints the probe uses (6.5+): the cost of being
/// attached, which `cargo xtask bench` measures the probe against.
pub const PROGRAMS_NOP: [(&str, &str); 3] = [
    ("blkprof_nop_start", "block_io_start"),
    ("blkprof_nop_issue", "block_rq_issue"),
    ("blkprof_nop_complete", "block_rq_complete"),
];

/// Programs that read the clock once each, on the same tracepoints (`--attach-only=clock`):
/// the least a record per IO costs, each program's own instant.
pub const PROGRAMS_CLOCK: [(&str, &str); 3] = [
    ("blkprof_clock_start", "block_io_start"),
    ("blkprof_clock_issue", "block_rq_issue"),
    ("blkprof_clock_complete", "block_rq_complete"),
];

/// How the probe sees a request's submission.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hooks {
    /// `block_io_start` (Linux 6.5+): the request at its accounting start, in the submitter.
    IoStart,
    /// `block_getrq` plus adoption (Linux 6.1-6.4, or forced for tests).
    GetRq,
}

impl Hooks {
    pub fn programs(self) -> &'static [(&'static str, &'static str)] {
        match self {
            Hooks::IoStart => &PROGRAMS,
            Hooks::GetRq => &PROGRAMS_GETRQ,
        }
    }

    /// The submission tracepoint's name, as the trace header records it.
    pub fn name(self) -> &'static str {
        match self {
            Hooks::IoStart => "block_io_start",
            Hooks::GetRq => "block_getrq",
        }
    }
}

/// Submitters of new requests by bio address, direct-mapped ([`BioSlot`]), between
/// `block_getrq` and the request's first event ([`Hooks::GetRq`] only).
pub const MAP_BIOS: &str = "BIOS";
/// [`MAP_BIOS`] as a hash map, on kernels without BPF compare-and-exchange (before 5.12).
pub const MAP_BIOS_HASH: &str = "BIOS_HASH";
pub const BIO_SLOT_COUNT: u32 = 1 << 14;
/// [`BioSlot::key`] while a program fills the slot.
pub const BIO_SLOT_BUSY: u64 = 1;

/// A new request's submitter, recorded at `block_getrq` under its first bio. The slot holds
/// one count of its device's `os_inflight` until a request adopts it or it is overwritten.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BioSlot {
    /// The bio's address; 0 when free, [`BIO_SLOT_BUSY`] while being filled.
    pub key: u64,
    pub ts: u64,
    pub cgroup: u64,
    pub pid: u32,
    pub dev: u32,
    pub comm: [u8; 16],
}
const _: () = assert!(core::mem::size_of::<BioSlot>() == 48);

/// Slots of the per-CPU counter array.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counter {
    /// A completed IO whose ring record could not be reserved (ring full).
    RingDrops = 0,
    /// A request that could not be tracked because the request map was full.
    RequestMapFull = 1,
    /// A completion of a request whose submission was not seen (started before attach).
    StartedBeforeAttach = 2,
    /// A request whose aggregate slot could not be created (aggregate map full).
    AggregateMapFull = 3,
    /// A request whose completion the probe never saw: its `struct request` was reused for a
    /// new submission while still tracked. The kernel ran the completion tracepoints but the
    /// programs did not run for it (observed at about 1 in 30,000 completions on Linux 6.18
    /// with no `recursion_misses` recorded); counted so that no loss is silent. Only those
    /// that may have completed within the run: the others are [`Counter::MissedOutsideRun`].
    MissedCompletion = 5,
    /// Of the missed completions: the stale request had been seen completing (a partial
    /// completion or the data part of a flush sequence) but never closed...
    MissedAfterPartial = 6,
    /// ...had been issued to the device and never seen completing...
    MissedIssued = 7,
    /// ...had never been issued.
    MissedNeverIssued = 8,
    /// [`Hooks::GetRq`]: a submitter recorded at `block_getrq` that no request adopted before
    /// another bio took its slot (its request, if it lives, shows no submitter), or that could
    /// not be recorded because another CPU was filling the slot. The tracer adds those left
    /// untaken at the run's end (`Probe::submitters_left`).
    SubmitterLost = 9,
    /// A file met for the first time whose name could not be reserved on the names ring (ring
    /// full): its IOs name the inode only.
    FileNameDrops = 10,
    /// Half records ([`PROGRAMS_HALVES`]): an issue, requeue or partial-completion half lost
    /// to a full ring (its record lacks that instant or those bytes). A lost start half counts
    /// as [`Counter::SubmitterLost`], a lost last end half as [`Counter::RingDrops`].
    HalfDrops = 11,
    /// Half records: a merge half lost to a full ring. The merged request looks unclosed to
    /// the join, as one whose completion was missed, and is told apart by this count.
    MergeHalfDrops = 12,
    /// Half records: a half lost with [`MAP_HALF_LOST`] full too, so not named to the join (a
    /// lost last end half then cannot be told from a missed completion).
    LostUnnamed = 13,
    /// The in-kernel paths: a missed completion ([`Counter::MissedCompletion`]'s finding) that
    /// came outside the run ([`Cuts`]): the new request at the address came before the run's
    /// start, or the old one was last seen after its end. Not the run's loss; not reported.
    MissedOutsideRun = 14,
}
pub const COUNTER_SLOTS: u32 = 16;

/// Kernel struct offsets and flag values, read from the running kernel's BTF at load
/// time so that no kernel's layout is baked into the object.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProbeConfig {
    /// `struct request` members.
    pub rq_q: u32,
    pub rq_sector: u32,
    pub rq_data_len: u32,
    pub rq_cmd_flags: u32,
    pub rq_rq_flags: u32,
    pub rq_start_time_ns: u32,
    /// `struct request::io_start_time_ns`: the kernel's issue stamp, kept when the queue
    /// collects statistics (`QUEUE_FLAG_STATS`), else 0.
    pub rq_io_start_time_ns: u32,
    pub rq_bio: u32,
    /// `struct request::mq_hctx` and `struct blk_mq_hw_ctx::queue_num`: the hardware queue.
    pub rq_mq_hctx: u32,
    pub hctx_queue_num: u32,
    /// `struct request_queue::disk`.
    pub q_disk: u32,
    /// `struct gendisk::major` and `first_minor`.
    pub disk_major: u32,
    pub disk_first_minor: u32,
    /// `RQF_IO_STAT` and `RQF_FLUSH_SEQ` masks (`enum rqf_flags`).
    pub rqf_io_stat: u32,
    pub rqf_flush_seq: u32,
    /// `REQ_OP_FLUSH` and `REQ_OP_MASK`.
    pub req_op_flush: u32,
    pub req_op_mask: u32,
    /// 0: trace every device; [`FILTER_LIST`]: only the `filter_list_len` devices in
    /// `filter_list`; [`FILTER_MAP`]: only devices in [`MAP_DEVICE_FILTER`].
    pub filter_devices: u32,
    pub filter_list_len: u32,
    pub filter_list: [u32; FILTER_LIST_MAX],
    /// [`Hooks::GetRq`] only: `struct bio::bi_next`, `bio::bi_bdev`, `block_device::bd_disk`.
    pub bio_next: u32,
    pub bio_bdev: u32,
    pub bdev_disk: u32,
    /// `struct task_struct::comm`: the submitter's command, loaded directly (16 bytes, NUL
    /// padded by the kernel) instead of through `bpf_get_current_comm`'s string copy.
    pub task_comm: u32,
    /// Nonzero: each record carries the cgroup that owns its IO as the block layer charges
    /// it, through `request::bio`, `bio::bi_blkg`, `blkcg_gq::blkcg`, the blkcg's css
    /// (`blkcg::css` + `cgroup_subsys_state::cgroup`), `cgroup::kn` and `kernfs_node::id`.
    /// Set only where the io controller is on the unified (v2) hierarchy, so that the id is a
    /// v2 cgroup's, as the submitter's is.
    pub owner_cgroup: u32,
    pub bio_blkg: u32,
    pub blkg_blkcg: u32,
    pub blkcg_cgroup: u32,
    pub cgroup_kn: u32,
    pub kn_id: u32,
    /// Nonzero: each record names the file its data pages belong to (`IoEvent::file_*`),
    /// through `request::bio`, `bio::bi_io_vec`, `bio_vec::bv_page`, `page::mapping`,
    /// `address_space::host`, then the inode's `i_ino`, `i_mode`, `i_generation` and
    /// `i_sb->s_dev`; a file met for the first time is named on [`MAP_FILE_NAMES`] by walking
    /// its first dentry (`inode::i_dentry`, `dentry::d_u` (its `d_alias`), `dentry::d_name`'s
    /// `qstr::name`, `dentry::d_parent`).
    pub files: u32,
    pub bio_io_vec: u32,
    pub bvec_page: u32,
    pub page_mapping: u32,
    pub mapping_host: u32,
    pub inode_ino: u32,
    pub inode_mode: u32,
    pub inode_generation: u32,
    pub inode_sb: u32,
    pub sb_dev: u32,
    pub inode_dentry: u32,
    pub dentry_alias: u32,
    pub dentry_name: u32,
    pub dentry_parent: u32,
    /// Bytes of each CPU's small ring as loaded ([`MAP_HOT_RINGS`], at most
    /// [`HOT_RING_BYTES`]): a half-record program that finds its small ring within two halves
    /// of this goes to the large ring.
    pub hot_ring_bytes: u32,
    /// Kernels without `request_queue::disk` (before 5.15 or so): `request::rq_disk`, the
    /// request's disk read directly. 0 where the queue names its disk (`rq_q`, `q_disk`).
    pub rq_disk: u32,
    /// Kernels without `bio::bi_bdev` (before 5.12): `bio::bi_disk`. 0 where the bio names its
    /// block device (`bio_bdev`, `bdev_disk`).
    pub bio_disk: u32,
    /// Which argument of `block_rq_insert`, `_issue`, `_merge` and `_requeue` is the request: 1
    /// where they still take the queue first (before 5.11, and 5.10 stable kernels before
    /// 5.10.137), else 0. Read from their BTF prototypes; it chooses the programs loaded
    /// ([`programs_getrq`]), which read their argument at a fixed place.
    pub rq_arg: u32,
    /// Which argument of `block_getrq` is the bio: 1 where it takes the queue first (before
    /// 5.11), else 0. As `rq_arg`, it chooses the program.
    pub getrq_bio_arg: u32,
    /// Nonzero where the kernel's BPF has atomic compare-and-exchange (5.12): requests and
    /// devices are tracked in direct-mapped slots claimed with it, the hash maps behind them
    /// taking the rest. 0: the hash maps alone, whose insert and delete decide ownership.
    pub cas: u32,
    /// Nonzero where the kernel has `bpf_get_current_task_btf` (5.11): the submitter's command
    /// is two loads from the task. 0: `bpf_get_current_comm`. The verifier drops the branch not
    /// taken (CONFIG is read-only), so a kernel never sees a helper it lacks.
    pub task_btf: u32,
    /// For tests only: nonzero N has every Nth run of a record path's completion program on a
    /// CPU for a traced device's request return at once, as a kernel that skips runs does
    /// (`BLKPROF_TEST_SKIP_COMPLETIONS`).
    pub test_skip_completions: u32,
}
const _: () = assert!(core::mem::size_of::<ProbeConfig>() == 4 * (31 + 6 + 16 + 6));

/// `IoEvent::file_dev` when the IO's data pages belong to no file: direct IO into process
/// memory (or swap).
pub const FILE_DEV_ANON: u32 = u32::MAX;
/// `IoEvent::file_dev` when they are the block device's own page cache: file system metadata
/// and journal (through buffer heads), or buffered IO on the device node.
pub const FILE_DEV_DEVICE: u32 = u32::MAX - 1;
/// Ring of [`FileName`]s: files named as they are first met.
pub const MAP_FILE_NAMES: &str = "FILE_NAMES";
/// The files already named (LRU: one evicted is named again when met again).
pub const MAP_FILES_SEEN: &str = "FILES_SEEN";
/// Path components a [`FileName`] holds, innermost first, and bytes per component.
pub const FILE_NAME_DEPTH: usize = 16;
pub const FILE_NAME_LEN: usize = 64;

/// A file as the probe tells them apart: the inode number and generation on a file system.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct FileKey {
    pub ino: u64,
    /// The file system's `s_dev` (major << 20 | minor).
    pub dev: u32,
    pub generation: u32,
}
const _: () = assert!(core::mem::size_of::<FileKey>() == 16);

/// The name of a file, read from its first dentry when the probe first met it: the components
/// from the file up to its file system's root, innermost first (the root's own is "/").
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct FileName {
    pub key: FileKey,
    /// Components read; [`FILE_NAME_DEPTH`] with `complete` 0 when the path is deeper.
    pub depth: u32,
    /// 1 when the walk reached the root.
    pub complete: u32,
    /// NUL-terminated, cut at [`FILE_NAME_LEN`] - 1 bytes.
    pub names: [[u8; FILE_NAME_LEN]; FILE_NAME_DEPTH],
}
const _: () = assert!(core::mem::size_of::<FileName>() == 24 + FILE_NAME_LEN * FILE_NAME_DEPTH);

/// Device filters of up to this many devices are compared inline (no map lookup per IO).
pub const FILTER_LIST_MAX: usize = 8;
pub const FILTER_LIST: u32 = 2;
pub const FILTER_MAP: u32 = 1;

/// Kind of record (which kernel event closed the IO).
pub const KIND_IO: u16 = 0;
/// The block layer's own flush request (`flush_rq`), counted by the kernel in
/// `blk_account_io_flush`; submitted by whoever triggered the flush machinery.
pub const KIND_FLUSH_RQ: u16 = 1;

/// `IoEvent::flags` bits.
pub const EV_STARTED_BEFORE_ATTACH: u16 = 1 << 0;
pub const EV_NEVER_ISSUED: u16 = 1 << 1;
/// The kernel did not account the request in /proc/diskstats (no `RQF_IO_STAT`: the device's
/// `queue/iostats` is 0, or a driver passthrough command).
pub const EV_NOT_ACCOUNTED: u16 = 1 << 2;
/// Completed outside the run's cut ([`Cuts`]): not aggregated; user space tallies it against
/// the kernel's counters read at the cut and does not store it.
pub const EV_OUTSIDE_CUT: u16 = 1 << 3;

/// The instants that delimit a run: an IO belongs to it (is aggregated) when it completes in
/// `(start_after_ns, end_at_ns]` (`CLOCK_MONOTONIC`). User space writes each instant ahead of
/// time, then reads /proc/diskstats just after it, so that the kernel's counters and the exact
/// aggregates describe the same IOs. All zero (the map's initial value): nothing belongs yet.
///
/// `rotation` cuts the run between two trace files the same way, without stopping it: an IO
/// is aggregated under epoch parity `rotation & 1` ([`AGG_EPOCH`]) when it completes after
/// `rotation & !1`, else under the other parity. Each rotation moves the instant ahead and flips
/// the parity, so the parity of the file that ends stops changing at its instant and user space
/// reads it, frozen, after it (see [`Cuts::epoch_of`]). One word, so that a program never sees
/// the instant of one rotation with the parity of another.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cuts {
    pub start_after_ns: u64,
    pub end_at_ns: u64,
    pub rotation: u64,
}
const _: () = assert!(core::mem::size_of::<Cuts>() == 24);

impl Cuts {
    /// [`AGG_EPOCH`] or 0: the epoch parity an IO completing at `complete_ns` is aggregated
    /// under.
    #[inline(always)]
    #[expect(
        clippy::inline_always,
        reason = "the probe's programs run it for every IO: inlined into them, as the probe's own \
                  per-IO helpers are, rather than a BPF-to-BPF call"
    )]
    pub const fn epoch_of(rotation: u64, complete_ns: u64) -> u32 {
        let after = (rotation & 1) as u32;
        let parity = if complete_ns > rotation & !1 {
            after
        } else {
            after ^ 1
        };
        parity * AGG_EPOCH
    }

    /// The rotation word for an instant (rounded down to an even ns) and the parity of the IOs
    /// that complete after it.
    pub const fn rotation_at(at_ns: u64, parity_after: u32) -> u64 {
        (at_ns & !1) | (parity_after & 1) as u64
    }
}

/// A slot of [`MAP_SLOTS`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RequestSlot {
    /// The `struct request *` owning the slot; 0 when free.
    pub key: u64,
    pub st: RequestState,
}
const _: () = assert!(core::mem::size_of::<RequestSlot>() == 8 + 96);

/// One completed IO, as the probe writes it to the ring buffer.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IoEvent {
    /// When the request entered the OS queue (`rq->start_time_ns`, `CLOCK_MONOTONIC`).
    pub enter_ns: u64,
    /// When it was (last) issued to the driver; 0 if never issued.
    pub issue_ns: u64,
    /// When the device completed it.
    pub complete_ns: u64,
    /// First sector (512-byte units).
    pub sector: u64,
    /// Kernel `dev_t` of the whole disk: major << 20 | minor.
    pub dev: u32,
    /// Bytes completed.
    pub bytes: u32,
    /// Raw `blk_opf_t` (`rq->cmd_flags`); decoded in user space with the kernel's BTF.
    pub cmd_flags: u32,
    /// Process (tgid) that submitted the request, 0 if unknown.
    pub pid: u32,
    /// Requests issued to the device and not completed, at issue (this one included).
    pub dev_inflight: u32,
    /// Requests in the OS (queued or issued) and not completed, at issue (this one included).
    pub os_inflight: u32,
    /// `blk_status_t` at completion (0 = ok).
    pub error: i32,
    pub requeues: u16,
    pub kind: u16,
    pub flags: u16,
    /// The blk-mq hardware queue's index + 1 (`rq->mq_hctx->queue_num`); 0 if unknown.
    pub hw_queue: u16,
    /// The file system (`s_dev`) of `file_ino`; [`FILE_DEV_ANON`], [`FILE_DEV_DEVICE`], or 0
    /// with no data pages (flush, discard) or not traced.
    pub file_dev: u32,
    /// Command of the submitting task, NUL-padded.
    pub comm: [u8; 16],
    /// The submitting task's cgroup v2 id at submission (0 if unknown).
    pub cgroup: u64,
    /// The cgroup v2 id the block layer charges the IO to (the bio's blkcg): the submitter's
    /// for its own IO, the cgroup that dirtied the pages for writeback where the kernel tracks
    /// it. 0 if unknown or not traced ([`ProbeConfig::owner_cgroup`]).
    pub owner_cgroup: u64,
    /// The inode of the file the IO's first data page belongs to (0 if none, or not traced:
    /// [`ProbeConfig::files`]); see `file_dev`.
    pub file_ino: u64,
}
const _: () = assert!(core::mem::size_of::<IoEvent>() == 112);

// ---------------------------------------------------------------------------------------------
// Half records (docs/design/records-without-shared-state.md): each program of a request writes
// what it alone knows to the ring of the CPU it runs on, and user space joins the halves by
// the request's address, replaying them in time order (`tracer_common::join`). Every half
// begins with a [`HalfHead`]; `half` says which it is.
// ---------------------------------------------------------------------------------------------

/// [`StartHalf`]: the request entered the OS (`block_io_start`).
pub const HALF_START: u32 = 1;
/// [`IssueHalf`]: issued to the driver (`block_rq_issue`), again after a requeue.
pub const HALF_ISSUE: u32 = 2;
/// [`EndHalf`]: (part of) the request completed (`block_rq_complete`).
pub const HALF_END: u32 = 3;
/// [`MarkHalf`]: taken back from the driver to be issued again (`block_rq_requeue`).
pub const HALF_REQUEUE: u32 = 4;
/// [`MarkHalf`]: merged into another request and freed without completing (`block_rq_merge`).
pub const HALF_MERGE: u32 = 5;
/// Or'ed into a lost half's kind: a [`MarkHalf`] on [`MAP_HALF_LOST`] naming the request and
/// instant of a half lost to a full ring, so that the join still replays the event (a start
/// without its submitter, an issue, a requeue; a merge or a last end closes the request without
/// a record, its loss a ring drop and not a missed completion).
pub const HALF_LOST: u32 = 0x100;

/// [`EndHalf::end`]: the last part; the request is done.
pub const END_LAST: u16 = 0;
/// [`EndHalf::end`]: a part; the request goes on with the rest.
pub const END_PART: u16 = 1;
/// [`EndHalf::end`]: the data part of a flush sequence left the device; the kernel completes
/// (and accounts) the request when the sequence ends, with another [`EndHalf`].
pub const END_OFF_DEVICE: u16 = 2;

/// What every half begins with: which half, and the request it belongs to.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HalfHead {
    /// `HALF_*`.
    pub half: u32,
    /// Kernel `dev_t` of the whole disk: major << 20 | minor.
    pub dev: u32,
    /// The request's address.
    pub key: u64,
    /// The kernel's start stamp of the request (`rq->start_time_ns`), the record's start. In a
    /// start half not yet stamped for this request (it may hold an earlier request's).
    pub start_ns: u64,
}

/// The submitter, written when the request enters the OS.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StartHalf {
    pub head: HalfHead,
    /// The submitting task's cgroup v2 id.
    pub cgroup: u64,
    /// Command of the submitting task, NUL-padded.
    pub comm: [u8; 16],
    /// Process (tgid) that submitted the request.
    pub pid: u32,
    /// `EV_*` bits known at the start (the low 16), and [`START_AT_ISSUE`].
    pub flags: u32,
    /// When the program ran: the instant the request counts as in the OS from, as the
    /// in-kernel counts did. (The kernel's start stamp can be much earlier: taken from the
    /// submitter's plug, which caches the clock until the task sleeps.)
    pub at_ns: u64,
}
const _: () = assert!(core::mem::size_of::<StartHalf>() == 64);

/// [`StartHalf::flags`]: written by the issue program, for the block layer's own flush
/// request, which no start event sees; it comes again if the request is issued again after a
/// requeue (the same request, not a new one at its address).
pub const START_AT_ISSUE: u32 = 1 << 16;

/// The instant of an issue to the driver (the kernel's stamp, `rq->io_start_time_ns`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IssueHalf {
    pub head: HalfHead,
    pub issue_ns: u64,
}
const _: () = assert!(core::mem::size_of::<IssueHalf>() == 32);

/// A requeue or a merge, and when.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MarkHalf {
    pub head: HalfHead,
    pub at_ns: u64,
}
const _: () = assert!(core::mem::size_of::<MarkHalf>() == 32);

/// A completion: everything of the record the completing program knows.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EndHalf {
    pub head: HalfHead,
    pub complete_ns: u64,
    /// The kernel's issue stamp at completion; 0 if the queue keeps none.
    pub issue_ns: u64,
    /// First sector (512-byte units).
    pub sector: u64,
    /// Bytes of this part.
    pub bytes: u32,
    /// Raw `blk_opf_t`.
    pub cmd_flags: u32,
    /// `blk_status_t` (0 = ok).
    pub error: i32,
    /// `KIND_*`.
    pub kind: u16,
    /// `EV_*` bits.
    pub flags: u16,
    /// `END_*`.
    pub end: u16,
    /// The blk-mq hardware queue's index + 1; 0 if unknown.
    pub hw_queue: u16,
    /// As [`IoEvent::file_dev`].
    pub file_dev: u32,
    pub owner_cgroup: u64,
    pub file_ino: u64,
}
const _: () = assert!(core::mem::size_of::<EndHalf>() == 88);

/// The in-kernel histograms are log-linear: 4 buckets per power of two, so that a value read
/// back from its bucket is off by at most a quarter, as with the metrics' default buckets.
/// Bucket `i` counts the values in `(loglin_lower(i), loglin_lower(i + 1)]` (bucket 0: 0 and
/// 1), the way a Prometheus bucket's `le` bound counts: [`loglin_le_bucket`].
pub const HIST_SUB_BITS: u32 = 2;
/// Buckets of request sizes in bytes: the last starts at 7 GiB.
pub const SIZE_BUCKETS: usize = 128;
/// Buckets of latencies in ns: the last starts at 7 x 2^38 ns (32 minutes).
pub const LATENCY_BUCKETS: usize = 160;

/// The log-linear bucket of `v`, unclamped: `v` itself below 4; else, with `m` the highest
/// set bit, `4 (m - 1)` plus the two bits below it.
#[inline(always)]
#[expect(
    clippy::inline_always,
    reason = "the probe's programs run it for every IO: inlined into them, as the probe's own \
              per-IO helpers are, rather than a BPF-to-BPF call"
)]
#[expect(
    clippy::cast_possible_truncation,
    reason = "a bucket index: `v` below 4, else at most 4 * 62 + 3 = 251"
)]
#[expect(
    clippy::manual_ilog2,
    reason = "`ilog2` checks for 0 and panics; `v` is at least 4 here, and the probe's programs \
              have no panic path"
)]
pub const fn loglin_bucket(v: u64) -> usize {
    if v < 4 {
        return v as usize;
    }
    let m = 63 - v.leading_zeros();
    (((m - 1) << HIST_SUB_BITS) as u64 + ((v >> (m - HIST_SUB_BITS)) & 3)) as usize
}

/// The bucket counting `v` in the probe's histograms: `(loglin_lower(i), loglin_lower(i + 1)]`
/// holds it, so that a power-of-two size falls on its bucket's upper bound.
#[inline(always)]
#[expect(
    clippy::inline_always,
    reason = "the probe's programs run it for every IO: inlined into them, as the probe's own \
              per-IO helpers are, rather than a BPF-to-BPF call"
)]
pub const fn loglin_le_bucket(v: u64) -> usize {
    loglin_bucket(v.saturating_sub(1))
}

/// The lower end of [`loglin_bucket`] `i` (which holds `[loglin_lower(i), loglin_lower(i + 1))`).
pub const fn loglin_lower(i: usize) -> u64 {
    if i < 4 {
        return i as u64;
    }
    (4 + (i as u64 & 3)) << ((i >> HIST_SUB_BITS) - 1)
}

/// Key of [`MAP_AGGREGATES`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct AggKey {
    pub dev: u32,
    /// `cmd_flags & REQ_OP_MASK`, plus [`AGG_FLUSH_RQ`] for the block layer's flush requests
    /// and [`AGG_NOT_ACCOUNTED`] for requests the kernel does not account.
    pub op: u32,
}
const _: () = assert!(core::mem::size_of::<AggKey>() == 8);
pub const AGG_FLUSH_RQ: u32 = 1 << 16;
/// Requests the kernel did not account ([`EV_NOT_ACCOUNTED`]): kept apart so that the
/// accounted ones still compare exactly with /proc/diskstats.
pub const AGG_NOT_ACCOUNTED: u32 = 1 << 17;
/// The epoch parity of the aggregate ([`Cuts::rotation`]): user space sums both parities, and
/// reads one alone at a rotation.
pub const AGG_EPOCH: u32 = 1 << 18;

/// Per-CPU aggregates direct-mapped by [`aggregate_slot_index`] ([`AggregateSlot`]); keys
/// whose slot is taken on a CPU are in [`MAP_AGGREGATES`].
pub const MAP_AGGREGATE_SLOTS: &str = "AGGREGATE_SLOTS";
pub const AGGREGATE_SLOT_COUNT: u32 = 64;

/// A slot of [`MAP_AGGREGATE_SLOTS`].
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AggregateSlot {
    /// [`AggKey::tag`] of the key owning the slot on this CPU; 0 while free.
    pub tag: u64,
    pub agg: Aggregate,
}
const _: () =
    assert!(core::mem::size_of::<AggregateSlot>() == 8 + core::mem::size_of::<Aggregate>());

impl AggKey {
    /// A nonzero number naming the key: (dev << 32 | op) + 1.
    #[inline(always)]
    #[expect(
        clippy::inline_always,
        reason = "the probe's programs run it for every IO: inlined into them, as the probe's own \
                  per-IO helpers are, rather than a BPF-to-BPF call"
    )]
    pub const fn tag(&self) -> u64 {
        ((self.dev as u64) << 32 | self.op as u64) + 1
    }

    #[expect(
        clippy::cast_possible_truncation,
        reason = "the tag's low 32 bits are the op, its high 32 bits the device"
    )]
    pub const fn from_tag(tag: u64) -> AggKey {
        let k = tag - 1;
        AggKey {
            dev: (k >> 32) as u32,
            op: k as u32,
        }
    }
}

/// Slot of a key in [`MAP_AGGREGATE_SLOTS`] (Fibonacci hashing of its tag).
#[inline(always)]
#[expect(
    clippy::inline_always,
    reason = "the probe's programs run it for every IO: inlined into them, as the probe's own \
              per-IO helpers are, rather than a BPF-to-BPF call"
)]
pub const fn aggregate_slot_index(key: &AggKey) -> u32 {
    (key.tag().wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58) as u32 & (AGGREGATE_SLOT_COUNT - 1)
}

/// Exact in-kernel aggregates for one (device, op).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Aggregate {
    pub ios: u64,
    pub bytes: u64,
    /// Sum of (complete - enter) in ns, for the time-weighted queue size.
    pub total_ns_sum: u64,
    /// IOs whose submission time is known (the latency histograms' count; the total and
    /// queue latency need it).
    pub timed: u64,
    /// Sums of the device and queue latencies in ns, over the IOs in their histograms.
    pub device_ns_sum: u64,
    pub queue_ns_sum: u64,
    /// Request sizes in bytes, [`loglin_le_bucket`]s.
    pub size: [u64; SIZE_BUCKETS],
    /// Queue latency (submission to issue) in ns; IOs with both stamps only.
    pub queue_latency: [u64; LATENCY_BUCKETS],
    /// Device latency (issue to completion) in ns; IOs seen issued only.
    pub device_latency: [u64; LATENCY_BUCKETS],
    /// Total latency (submission to completion) in ns.
    pub total_latency: [u64; LATENCY_BUCKETS],
}
const _: () =
    assert!(core::mem::size_of::<Aggregate>() == 8 * (6 + SIZE_BUCKETS + 3 * LATENCY_BUCKETS));
impl Default for Aggregate {
    fn default() -> Self {
        Self {
            ios: 0,
            bytes: 0,
            total_ns_sum: 0,
            timed: 0,
            device_ns_sum: 0,
            queue_ns_sum: 0,
            size: [0; SIZE_BUCKETS],
            queue_latency: [0; LATENCY_BUCKETS],
            device_latency: [0; LATENCY_BUCKETS],
            total_latency: [0; LATENCY_BUCKETS],
        }
    }
}

/// Per-device in-flight counters.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceState {
    pub os_inflight: u64,
    pub dev_inflight: u64,
}
const _: () = assert!(core::mem::size_of::<DeviceState>() == 16);

/// A slot of [`MAP_DEVICE_SLOTS`]: a device's counters, direct-mapped by
/// [`device_slot_index`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceSlot {
    /// dev + 1 of the device owning the slot; 0 while free.
    pub tag: u64,
    pub st: DeviceState,
}
const _: () = assert!(core::mem::size_of::<DeviceSlot>() == 24);

pub const DEVICE_SLOT_COUNT: u32 = 256;

/// Slot of a device (major << 20 | minor) in [`MAP_DEVICE_SLOTS`] (Fibonacci hashing).
#[inline(always)]
#[expect(
    clippy::inline_always,
    reason = "the probe's programs run it for every IO: inlined into them, as the probe's own \
              per-IO helpers are, rather than a BPF-to-BPF call"
)]
pub const fn device_slot_index(dev: u32) -> u32 {
    ((dev as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as u32 & (DEVICE_SLOT_COUNT - 1)
}

/// Per-request state from submission to completion.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RequestState {
    pub enter_ns: u64,
    /// First sector, captured at issue (the kernel advances `__sector` as bytes complete).
    pub sector: u64,
    pub issue_ns: u64,
    pub complete_ns: u64,
    pub dev: u32,
    pub bytes_done: u32,
    pub pid: u32,
    pub dev_inflight: u32,
    pub os_inflight: u32,
    pub error: i32,
    pub requeues: u16,
    pub flags: u16,
    /// 1 while issued to the device (counted in `dev_inflight`).
    pub issued: u8,
    /// 1 while counted in the device's `os_inflight`.
    pub in_os: u8,
    /// Explicit padding, so that the struct has no implicit padding bytes.
    _pad: [u8; 2],
    pub comm: [u8; 16],
    pub cgroup: u64,
    /// The kernel's start stamp (`rq->start_time_ns`) at the last issue: a request found
    /// with another has been freed and made anew at the same address.
    pub issued_stamp: u64,
}
const _: () = assert!(core::mem::size_of::<RequestState>() == 96);

/// Kernel `dev_t` (major << 20 | minor) to (major, minor).
pub const fn dev_split(dev: u32) -> (u32, u32) {
    (dev >> 20, dev & 0xfffff)
}
pub const fn dev_join(major: u32, minor: u32) -> u32 {
    (major << 20) | (minor & 0xfffff)
}

#[cfg(feature = "user")]
mod pod {
    // Every type here is `#[repr(C)]` and `Copy`, of integers and arrays of integers (any bit
    // pattern is a value), with no implicit padding: the `const` assertions above check that
    // each size is the sum of its fields'.
    // SAFETY: u32s and an array of u32s, no padding (size asserted).
    unsafe impl aya::Pod for super::ProbeConfig {}
    // SAFETY: integers and a byte array, no padding (size asserted).
    unsafe impl aya::Pod for super::IoEvent {}
    // SAFETY: two u32s (size asserted).
    unsafe impl aya::Pod for super::AggKey {}
    // SAFETY: u64s and arrays of u64s (size asserted).
    unsafe impl aya::Pod for super::Aggregate {}
    // SAFETY: a u64 and an `Aggregate` (size asserted).
    unsafe impl aya::Pod for super::AggregateSlot {}
    // SAFETY: two u64s (size asserted).
    unsafe impl aya::Pod for super::DeviceState {}
    // SAFETY: a u64 and a `DeviceState` (size asserted).
    unsafe impl aya::Pod for super::DeviceSlot {}
    // SAFETY: integers and byte arrays, the padding an explicit field (size asserted).
    unsafe impl aya::Pod for super::RequestState {}
    // SAFETY: a u64 and a `RequestState` (size asserted).
    unsafe impl aya::Pod for super::RequestSlot {}
    // SAFETY: three u64s (size asserted).
    unsafe impl aya::Pod for super::Cuts {}
    // SAFETY: integers and a byte array, no padding (size asserted).
    unsafe impl aya::Pod for super::HalfBatch {}
    // SAFETY: integers and a byte array, no padding (size asserted).
    unsafe impl aya::Pod for super::BioSlot {}
    // SAFETY: a u64 and two u32s (size asserted).
    unsafe impl aya::Pod for super::FileKey {}
    // SAFETY: a `FileKey`, two u32s and arrays of bytes, no padding (size asserted).
    unsafe impl aya::Pod for super::FileName {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loglin_buckets_are_contiguous_and_a_quarter_wide() {
        for v in 0..4u8 {
            assert_eq!(loglin_bucket(u64::from(v)), usize::from(v));
        }
        assert_eq!(loglin_bucket(4), 4);
        assert_eq!(loglin_bucket(7), 7);
        assert_eq!(loglin_bucket(8), 8);
        assert_eq!(loglin_bucket(10), 9);
        assert_eq!(loglin_bucket(4096), 44);
        assert_eq!(loglin_bucket(u64::MAX), 251);
        for i in 0..251 {
            let (lo, hi) = (loglin_lower(i), loglin_lower(i + 1));
            assert!(lo < hi, "bucket {i}");
            assert_eq!(loglin_bucket(lo), i);
            assert_eq!(loglin_bucket(hi - 1), i);
            // Width at most a quarter of the lower bound (above the exact ones).
            if lo >= 4 {
                assert!((hi - lo) * 4 <= lo, "bucket {i}: {lo}..{hi}");
            }
        }
        assert_eq!(loglin_le_bucket(4096), 43);
        assert_eq!(loglin_lower(44), 4096);
        assert_eq!(loglin_le_bucket(4097), 44);
        assert_eq!(loglin_le_bucket(0), 0);
        assert_eq!(loglin_le_bucket(1), 0);
        assert_eq!(loglin_lower(LATENCY_BUCKETS - 1), 7 << 38);
        assert_eq!(loglin_lower(SIZE_BUCKETS - 1), 7 << 30);
    }

    #[test]
    fn rotations_flip_the_epoch_at_their_instant() {
        // Before any rotation (the map's zeros) every IO is epoch 0.
        assert_eq!(Cuts::epoch_of(0, 1), 0);
        assert_eq!(Cuts::epoch_of(0, u64::MAX), 0);
        // The first rotation at 1,000: up to it epoch 0, after it epoch 1.
        let r1 = Cuts::rotation_at(1_000, 1);
        assert_eq!(Cuts::epoch_of(r1, 999), 0);
        assert_eq!(Cuts::epoch_of(r1, 1_000), 0);
        assert_eq!(Cuts::epoch_of(r1, 1_001), AGG_EPOCH);
        // The second at 2,001 (rounded down to 2,000): 1 up to it, 0 after.
        let r2 = Cuts::rotation_at(2_001, 0);
        assert_eq!(r2 & !1, 2_000);
        assert_eq!(Cuts::epoch_of(r2, 2_000), AGG_EPOCH);
        assert_eq!(Cuts::epoch_of(r2, 2_001), 0);
    }
}
