//! What the probe needs to know about the running kernel, read from its BTF: struct offsets
//! and the values of request ops and flags. Also translates the kernel's `blk_opf_t` into
//! blkprof's own stable op and flag encoding.

use tracer_common::{
    Hooks, ProbeConfig,
    op::{Op, flags},
};

use crate::btf::{BtfError, KernelBtf};

/// Kernels that work: BTF, and either the `block_io_start` tracepoint (Linux 6.5) or
/// `block_getrq` with `bio::bi_bdev` (the fallback, for Linux 6.1 to 6.4). The request
/// flags are an enum in BTF from Linux 6.11 (`__RQF_*`); before, `#define`s with fixed bits.
pub const KERNEL_REQUIREMENT: &str =
    "Linux 6.1 or newer with CONFIG_DEBUG_INFO_BTF=y (the block layer's tracepoints in BTF)";

/// `RQF_IO_STAT` and `RQF_FLUSH_SEQ` on kernels whose request flags are `#define`s (before
/// 6.11): bits 13 and 4 in 6.1.20, 6.1.158 and 6.6.63, and in the lines 6.11-rc1 removed
/// (docs/design/kernel-6.1-fallback.md §3). A wrong bit would show as IOs the kernel did not
/// account, or accounted ones missing, in the run's exact check against /proc/diskstats.
const RQF_IO_STAT_BIT_DEFINE: u32 = 13;
const RQF_FLUSH_SEQ_BIT_DEFINE: u32 = 4;

/// Which submission hook the running kernel offers. `BLKPROF_HOOKS=getrq` forces the
/// fallback on a kernel that has both (how the fallback is tested on newer kernels).
pub fn choose_hooks(btf: &KernelBtf) -> Result<Hooks, BtfError> {
    let forced = std::env::var("BLKPROF_HOOKS").ok();
    let hooks = match forced.as_deref() {
        Some("getrq") => Hooks::GetRq,
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
    // Only the fallback reads bios.
    let bio = |s: &str, m: &str| match hooks {
        Hooks::GetRq => btf.member_offset(s, m),
        Hooks::IoStart => Ok(0),
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
        q_disk: btf.member_offset("request_queue", "disk")?,
        disk_major: btf.member_offset("gendisk", "major")?,
        disk_first_minor: btf.member_offset("gendisk", "first_minor")?,
        rqf_io_stat,
        rqf_flush_seq,
        req_op_flush: btf.enumerator_u32("REQ_OP_FLUSH")?,
        req_op_mask: op_mask,
        bio_next: bio("bio", "bi_next")?,
        bio_bdev: bio("bio", "bi_bdev")?,
        bdev_disk: bio("block_device", "bd_disk")?,
        task_comm: btf.member_offset("task_struct", "comm")?,
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

    #[test]
    fn decodes_the_running_kernels_flags() {
        let Ok(btf) = KernelBtf::from_sys() else {
            return;
        };
        let (cfg, dec) = probe_config(&btf, Hooks::GetRq).expect("this kernel is supported");
        assert!(cfg.bio_bdev > 0 && cfg.bdev_disk > 0);
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
