//! What the probe needs to know about the running kernel, read from its BTF: struct offsets
//! and the values of request ops and flags. Also translates the kernel's `blk_opf_t` into
//! blkprof's own stable op and flag encoding.

use tracer_common::{
    Hooks, ProbeConfig,
    op::{Op, flags},
};

use crate::btf::{BtfError, KernelBtf};

/// Kernels that work: BTF, and either the `block_io_start` tracepoint (Linux 6.5) or
/// `block_getrq` (the fallback, for Linux 5.10 to 6.4; docs/design/kernel-5.10.md). The
/// request flags are an enum in BTF from Linux 6.11 (`__RQF_*`); before, `#define`s with fixed
/// bits.
pub const KERNEL_REQUIREMENT: &str =
    "Linux 5.10 or newer with CONFIG_DEBUG_INFO_BTF=y (the block layer's tracepoints in BTF)";

/// `RQF_IO_STAT` and `RQF_FLUSH_SEQ` on kernels whose request flags are `#define`s (before
/// 6.11): bits 13 and 4 in 5.10.223, 6.1.20, 6.1.158 and 6.6.63, and in the lines 6.11-rc1 removed
/// (docs/design/kernel-6.1-fallback.md §3). A wrong bit would show as IOs the kernel did not
/// account, or accounted ones missing, in the run's exact check against /proc/diskstats.
const RQF_IO_STAT_BIT_DEFINE: u32 = 13;
const RQF_FLUSH_SEQ_BIT_DEFINE: u32 = 4;

/// Refuse a kernel below what the probe needs, saying what is missing: the BPF ring buffer
/// (5.8) and `tp_btf` programs (5.5). Both are asked of the kernel's BTF (its `enum
/// bpf_map_type` and `enum bpf_attach_type`), not of its version.
pub fn check_minimum(btf: &KernelBtf) -> Result<(), BtfError> {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let release = release.trim();
    for (enumerator, what, since) in [
        (
            "BPF_TRACE_RAW_TP",
            "BTF tracepoint programs (tp_btf)",
            "5.5",
        ),
        ("BPF_MAP_TYPE_RINGBUF", "BPF ring buffer", "5.8"),
    ] {
        if btf.enumerator(enumerator).is_err() {
            return Err(BtfError::Unsupported(format!(
                "kernel {release} has no {what} (Linux {since} has it; blkprof-trace is tested \
                 from 5.10)"
            )));
        }
    }
    Ok(())
}

/// Which submission hook the running kernel offers. `BLKPROF_HOOKS=getrq` forces the
/// fallback on a kernel that has both (how the fallback is tested on newer kernels).
pub fn choose_hooks(btf: &KernelBtf) -> Result<Hooks, BtfError> {
    let forced = std::env::var("BLKPROF_HOOKS").ok();
    let hooks = match forced.as_deref() {
        Some("getrq" | "getrq-nocas") => Hooks::GetRq,
        Some("io_start") => Hooks::IoStart,
        _ if btf.has_tracepoint("block_io_start") => Hooks::IoStart,
        _ => Hooks::GetRq,
    };
    if !btf.has_tracepoint(hooks.name()) {
        return Err(BtfError::NoTracepoint(hooks.name().into()));
    }
    Ok(hooks)
}

#[derive(Clone, Debug)]
pub struct OpDecoder {
    op_mask: u32,
    ops: Vec<(u32, Op)>,
    flag_bits: Vec<(u32, u16)>,
}

impl OpDecoder {
    pub fn decode(&self, cmd_flags: u32) -> (Op, u16) {
        let code = cmd_flags & self.op_mask;
        let op = self
            .ops
            .iter()
            .find(|(c, _)| *c == code)
            .map_or(Op::Other, |(_, op)| *op);
        let mut fl = 0;
        for &(mask, bit) in &self.flag_bits {
            if cmd_flags & mask != 0 {
                fl |= bit;
            }
        }
        (op, fl)
    }
}

pub fn probe_config(btf: &KernelBtf, hooks: Hooks) -> Result<(ProbeConfig, OpDecoder), BtfError> {
    let (rqf_io_stat, rqf_flush_seq) = match (
        btf.enumerator("__RQF_IO_STAT"),
        btf.enumerator("__RQF_FLUSH_SEQ"),
    ) {
        (Ok(io_stat), Ok(flush_seq)) => (1u32 << io_stat, 1u32 << flush_seq),
        (Err(_), Err(_)) => (
            1u32 << RQF_IO_STAT_BIT_DEFINE,
            1u32 << RQF_FLUSH_SEQ_BIT_DEFINE,
        ),
        (Err(e), _) | (_, Err(e)) => return Err(e),
    };
    // Only the fallback reads bios. A bio names its disk through its block device from 5.12,
    // directly before (`bi_disk`).
    let getrq = hooks == Hooks::GetRq;
    let bio_disk = if getrq && btf.member_offset("bio", "bi_bdev").is_err() {
        btf.member_offset("bio", "bi_disk")?
    } else {
        0
    };
    let bio = |s: &str, m: &str| {
        if getrq && bio_disk == 0 {
            btf.member_offset(s, m)
        } else {
            Ok(0)
        }
    };
    // A request names its disk through its queue from about 5.15 (`request_queue::disk`);
    // before, directly (`request::rq_disk`, removed in 6.0).
    let rq_disk = match btf.member_offset("request_queue", "disk") {
        Ok(_) => 0,
        Err(_) => btf.member_offset("request", "rq_disk")?,
    };
    let q_disk = if rq_disk == 0 {
        btf.member_offset("request_queue", "disk")?
    } else {
        0
    };
    let op_bits = btf.enumerator("__REQ_FAILFAST_DEV")?; // == REQ_OP_BITS
    let op_mask = (1u32 << op_bits) - 1;
    let cfg = ProbeConfig {
        rq_q: btf.member_offset("request", "q")?,
        rq_sector: btf.member_offset("request", "__sector")?,
        rq_data_len: btf.member_offset("request", "__data_len")?,
        rq_cmd_flags: btf.member_offset("request", "cmd_flags")?,
        rq_rq_flags: btf.member_offset("request", "rq_flags")?,
        rq_start_time_ns: btf.member_offset("request", "start_time_ns")?,
        rq_io_start_time_ns: btf.member_offset("request", "io_start_time_ns")?,
        rq_bio: btf.member_offset("request", "bio")?,
        rq_mq_hctx: btf.member_offset("request", "mq_hctx")?,
        hctx_queue_num: btf.member_offset("blk_mq_hw_ctx", "queue_num")?,
        q_disk,
        disk_major: btf.member_offset("gendisk", "major")?,
        disk_first_minor: btf.member_offset("gendisk", "first_minor")?,
        rqf_io_stat,
        rqf_flush_seq,
        req_op_flush: btf.enumerator_u32("REQ_OP_FLUSH")?,
        req_op_mask: op_mask,
        bio_next: if getrq {
            btf.member_offset("bio", "bi_next")?
        } else {
            0
        },
        bio_bdev: bio("bio", "bi_bdev")?,
        bdev_disk: bio("block_device", "bd_disk")?,
        task_comm: btf.member_offset("task_struct", "comm")?,
        rq_disk,
        bio_disk,
        rq_arg: request_arg(btf, hooks)?,
        getrq_bio_arg: if getrq {
            match btf.tracepoint_arg("block_getrq", "bio")? {
                a @ 0..=1 => a,
                a => {
                    return Err(BtfError::Unsupported(format!(
                        "the bio is argument {a} of block_getrq (the probe reads the first two)"
                    )));
                }
            }
        } else {
            0
        },
        task_btf: u32::from(btf.enumerator("BPF_FUNC_get_current_task_btf").is_ok()),
        // Set by the caller, which may load a program to ask ([`bpf_has_cmpxchg`]).
        cas: 0,
        // Filters, owner cgroups and files: set by the caller when asked for.
        ..ProbeConfig::default()
    };
    let mut ops = Vec::new();
    for (name, op) in [
        ("REQ_OP_READ", Op::Read),
        ("REQ_OP_WRITE", Op::Write),
        ("REQ_OP_FLUSH", Op::Flush),
        ("REQ_OP_DISCARD", Op::Discard),
        ("REQ_OP_SECURE_ERASE", Op::SecureErase),
        ("REQ_OP_WRITE_ZEROES", Op::WriteZeroes),
        ("REQ_OP_ZONE_APPEND", Op::ZoneAppend),
        ("REQ_OP_ZONE_OPEN", Op::ZoneMgmt),
        ("REQ_OP_ZONE_CLOSE", Op::ZoneMgmt),
        ("REQ_OP_ZONE_FINISH", Op::ZoneMgmt),
        ("REQ_OP_ZONE_RESET", Op::ZoneMgmt),
        ("REQ_OP_ZONE_RESET_ALL", Op::ZoneMgmt),
        ("REQ_OP_DRV_IN", Op::DrvIn),
        ("REQ_OP_DRV_OUT", Op::DrvOut),
    ] {
        // Ops a kernel lacks are simply not decoded (they become "other").
        if let Ok(v) = btf.enumerator_u32(name) {
            ops.push((v, op));
        }
    }
    let mut flag_bits = Vec::new();
    for (name, bitv) in [
        ("__REQ_SYNC", flags::SYNC),
        ("__REQ_META", flags::META),
        ("__REQ_FUA", flags::FUA),
        ("__REQ_PREFLUSH", flags::PREFLUSH),
        ("__REQ_RAHEAD", flags::RAHEAD),
        ("__REQ_PRIO", flags::PRIO),
        ("__REQ_NOMERGE", flags::NOMERGE),
        ("__REQ_IDLE", flags::IDLE),
        ("__REQ_BACKGROUND", flags::BACKGROUND),
    ] {
        if let Ok(v) = btf.enumerator(name) {
            flag_bits.push((1u32 << v, bitv));
        }
    }
    Ok((
        cfg,
        OpDecoder {
            op_mask,
            ops,
            flag_bits,
        },
    ))
}

/// Whether the kernel's BPF has atomic compare-and-exchange (`BPF_CMPXCHG`, 5.12): asked by
/// loading a six-instruction program that uses it on its stack. A kernel without it refuses
/// the instruction (`BPF_STX uses reserved fields`); one that loads it has it.
pub fn bpf_has_cmpxchg() -> bool {
    #[repr(C)]
    struct ProgLoad {
        prog_type: u32,
        insn_cnt: u32,
        insns: u64,
        license: u64,
        log_level: u32,
        log_size: u32,
        log_buf: u64,
        kern_version: u32,
        prog_flags: u32,
    }
    // (code, dst | src << 4, off, imm)
    let insns: [(u8, u8, i16, i32); 6] = [
        (0xb7, 0x00, 0, 0),     // r0 = 0
        (0x7b, 0x0a, -8, 0),    // *(u64 *)(r10 - 8) = r0
        (0xb7, 0x01, 0, 1),     // r1 = 1
        (0xdb, 0x1a, -8, 0xf1), // r0 = cmpxchg((u64 *)(r10 - 8), r0, r1)
        (0xb7, 0x00, 0, 0),     // r0 = 0
        (0x95, 0x00, 0, 0),     // exit
    ];
    let mut code = Vec::with_capacity(insns.len() * 8);
    for (op, regs, off, imm) in insns {
        code.push(op);
        code.push(regs);
        code.extend_from_slice(&off.to_le_bytes());
        code.extend_from_slice(&imm.to_le_bytes());
    }
    let license = b"GPL\0";
    let attr = ProgLoad {
        prog_type: 1, // BPF_PROG_TYPE_SOCKET_FILTER
        insn_cnt: 6,
        insns: code.as_ptr() as u64,
        license: license.as_ptr() as u64,
        log_level: 0,
        log_size: 0,
        log_buf: 0,
        kern_version: 0,
        prog_flags: 0,
    };
    // SAFETY: BPF_PROG_LOAD (5) with an attribute block of the size given, whose pointers
    // outlive the call.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            5,
            &raw const attr,
            std::mem::size_of::<ProgLoad>(),
        )
    };
    if fd < 0 {
        return false;
    }
    #[expect(
        clippy::cast_possible_truncation,
        reason = "a file descriptor the kernel returned fits an int"
    )]
    // SAFETY: the descriptor was just returned to this process and is not used elsewhere.
    unsafe {
        libc::close(fd as i32)
    };
    true
}

/// Which argument of the request tracepoints the programs attach to is the request
/// ([`ProbeConfig::rq_arg`]): one position for all of them, as every kernel has it (all took
/// the queue first before 5.11; none since), and the completion's always first.
fn request_arg(btf: &KernelBtf, hooks: Hooks) -> Result<u32, BtfError> {
    let mut tracepoints = vec!["block_rq_issue", "block_rq_merge", "block_rq_requeue"];
    if hooks == Hooks::GetRq {
        tracepoints.push("block_rq_insert");
    }
    let arg = btf.tracepoint_arg("block_rq_issue", "request")?;
    if arg != 0 && hooks == Hooks::IoStart {
        return Err(BtfError::Unsupported(
            "block_io_start beside request tracepoints that take the queue first: no kernel \
             has both"
                .into(),
        ));
    }
    for tp in tracepoints {
        let a = btf.tracepoint_arg(tp, "request")?;
        if a != arg || a > 1 {
            return Err(BtfError::Unsupported(format!(
                "the request is argument {a} of {tp} but {arg} of block_rq_issue"
            )));
        }
    }
    for tp in ["block_rq_complete"]
        .into_iter()
        .chain((hooks == Hooks::IoStart).then_some("block_io_start"))
    {
        let a = btf.tracepoint_arg(tp, "request")?;
        if a != 0 {
            return Err(BtfError::Unsupported(format!(
                "the request is argument {a} of {tp}, not the first"
            )));
        }
    }
    Ok(arg)
}

/// The offsets [`ProbeConfig::owner_cgroup`] follows: `bio::bi_blkg`, `blkcg_gq::blkcg`,
/// the blkcg's css cgroup, `cgroup::kn`, `kernfs_node::id`.
pub fn owner_offsets(btf: &KernelBtf) -> Result<[u32; 5], BtfError> {
    Ok([
        btf.member_offset("bio", "bi_blkg")?,
        btf.member_offset("blkcg_gq", "blkcg")?,
        btf.member_offset("blkcg", "css")? + btf.member_offset("cgroup_subsys_state", "cgroup")?,
        btf.member_offset("cgroup", "kn")?,
        btf.member_offset("kernfs_node", "id")?,
    ])
}

/// Turn on [`ProbeConfig::files`]: the offsets from the running kernel's BTF (members of
/// anonymous unions, such as `page::mapping`, included).
pub fn enable_files(btf: &KernelBtf, cfg: &mut ProbeConfig) -> Result<(), BtfError> {
    cfg.bio_io_vec = btf.member_offset("bio", "bi_io_vec")?;
    cfg.bvec_page = btf.member_offset("bio_vec", "bv_page")?;
    cfg.page_mapping = btf.member_offset("page", "mapping")?;
    cfg.mapping_host = btf.member_offset("address_space", "host")?;
    cfg.inode_ino = btf.member_offset("inode", "i_ino")?;
    cfg.inode_mode = btf.member_offset("inode", "i_mode")?;
    cfg.inode_generation = btf.member_offset("inode", "i_generation")?;
    cfg.inode_sb = btf.member_offset("inode", "i_sb")?;
    cfg.sb_dev = btf.member_offset("super_block", "s_dev")?;
    cfg.inode_dentry = btf.member_offset("inode", "i_dentry")?;
    // `d_alias` is a member of the union `d_u`: at the union's own offset.
    cfg.dentry_alias = btf.member_offset("dentry", "d_u")?;
    cfg.dentry_name = btf.member_offset("dentry", "d_name")? + btf.member_offset("qstr", "name")?;
    cfg.dentry_parent = btf.member_offset("dentry", "d_parent")?;
    cfg.files = 1;
    Ok(())
}

/// Whether records can carry the cgroup that owns each IO ([`ProbeConfig::owner_cgroup`]),
/// as decided at start-up and stored in the trace's header.
pub fn owner_tracking(
    btf: &KernelBtf,
    cgroup2_root: Option<&std::path::Path>,
) -> (Option<[u32; 5]>, tracer_common::format::OwnerCgroups) {
    use tracer_common::format::OwnerCgroups;
    let untracked = |reason: String| {
        (
            None,
            OwnerCgroups {
                tracked: false,
                writeback: false,
                reason,
            },
        )
    };
    let Ok(offsets) = owner_offsets(btf) else {
        return untracked("the kernel has no block cgroups (CONFIG_BLK_CGROUP)".into());
    };
    let Some(root) = cgroup2_root else {
        return untracked("no cgroup v2 (unified) hierarchy is mounted".into());
    };
    let controllers = std::fs::read_to_string(root.join("cgroup.controllers")).unwrap_or_default();
    let on_v2 = |c: &str| controllers.split_whitespace().any(|x| x == c);
    if !on_v2("io") {
        return untracked(format!(
            "the io controller is not on the unified hierarchy ({} lists: {}); it is bound to a cgroup v1 hierarchy, whose cgroups the records' v2 ids cannot name",
            root.join("cgroup.controllers").display(),
            if controllers.trim().is_empty() {
                "none"
            } else {
                controllers.trim()
            }
        ));
    }
    let writeback = on_v2("memory");
    (
        Some(offsets),
        OwnerCgroups {
            tracked: true,
            writeback,
            reason: if writeback {
                String::new()
            } else {
                "the memory controller is not on the unified hierarchy: the kernel charges written-back pages to the root cgroup, not to the one that dirtied them".into()
            },
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A BTF blob of named enums, each (name, [(enumerator, value)]).
    fn enums(list: &[(&str, &[(&str, u32)])]) -> Vec<u8> {
        let mut strings = vec![0u8];
        let mut name = |n: &str| {
            let o = u32::try_from(strings.len()).unwrap();
            strings.extend_from_slice(n.as_bytes());
            strings.push(0);
            o
        };
        let mut body = Vec::new();
        for (enum_name, values) in list {
            let vlen = u32::try_from(values.len()).unwrap();
            let words = [name(enum_name), (6 << 24) | vlen, 4];
            body.extend(words.iter().flat_map(|w| w.to_le_bytes()));
            for (n, v) in *values {
                body.extend(name(n).to_le_bytes());
                body.extend(v.to_le_bytes());
            }
        }
        let mut out = vec![0x9f, 0xeb, 1, 0];
        let (b, n) = (
            u32::try_from(body.len()).unwrap(),
            u32::try_from(strings.len()).unwrap(),
        );
        let lens = [24, 0, b, b, n];
        out.extend(lens.iter().flat_map(|w| w.to_le_bytes()));
        out.extend(body);
        out.extend(strings);
        out
    }

    #[test]
    fn a_kernel_below_5_8_is_refused_with_what_it_lacks() {
        // 5.4: BTF tracepoints, no ring buffer.
        let btf = KernelBtf::parse(&enums(&[
            ("bpf_map_type", &[("BPF_MAP_TYPE_HASH", 1)]),
            ("bpf_attach_type", &[("BPF_TRACE_RAW_TP", 23)]),
        ]))
        .expect("well formed");
        let e = check_minimum(&btf).expect_err("refused").to_string();
        assert!(e.contains("no BPF ring buffer (Linux 5.8 has it"), "{e}");
        // 4.19: neither.
        let btf = KernelBtf::parse(&enums(&[("bpf_map_type", &[("BPF_MAP_TYPE_HASH", 1)])]))
            .expect("well formed");
        let e = check_minimum(&btf).expect_err("refused").to_string();
        assert!(
            e.contains("no BTF tracepoint programs (tp_btf) (Linux 5.5"),
            "{e}"
        );
        check_minimum(&KernelBtf::from_sys().expect("this machine's BTF")).expect("supported");
    }

    #[test]
    fn decodes_the_running_kernels_flags() {
        let btf = KernelBtf::from_sys().expect("this machine's kernel publishes its BTF");
        let (cfg, dec) = probe_config(&btf, Hooks::GetRq).expect("this kernel is supported");
        assert!(cfg.bio_bdev > 0 && cfg.bdev_disk > 0);
        // A 6.x kernel: the queue names the disk, the bio its block device, the helper exists.
        assert_eq!(
            (cfg.rq_disk, cfg.bio_disk, cfg.rq_arg, cfg.getrq_bio_arg),
            (0, 0, 0, 0)
        );
        assert_eq!(cfg.task_btf, 1);
        assert_eq!(cfg.req_op_mask, 0xff);
        let sync = 1u32 << btf.enumerator("__REQ_SYNC").unwrap();
        let fua = 1u32 << btf.enumerator("__REQ_FUA").unwrap();
        assert_eq!(
            dec.decode(1 | sync | fua),
            (Op::Write, flags::SYNC | flags::FUA)
        );
        assert_eq!(dec.decode(3).0, Op::Discard);
        assert_eq!(dec.decode(0xfe).0, Op::Other);
    }
}
