//! File naming: the file of a request's first data page, and its path, sent once per file on
//! the `FILE_NAMES` ring.

use tracer_common::{
    Counter, FILE_DEV_ANON, FILE_DEV_DEVICE, FILE_NAME_DEPTH, FILE_NAME_LEN, FileKey, FileName,
    ProbeConfig,
};

use crate::kernel::{bits_of, cfg_u32, load};
use crate::maps::{FILE_NAMES, FILES_SEEN, SCRATCH_COMPLETE, bump};

const S_IFMT: u16 = 0o170_000;
const S_IFBLK: u16 = 0o060_000;

/// The file of the request's first data page, as (`s_dev`, inode), or a [`FILE_DEV_ANON`] /
/// [`FILE_DEV_DEVICE`] marker; (0, 0) when off or without data pages. A file met for the
/// first time (or again after the LRU forgot it) is named on `FILE_NAMES`.
#[inline(always)]
pub(crate) fn file_of(cfg: &ProbeConfig, rq: *const u8) -> (u32, u64) {
    if cfg_u32(&cfg.files) == 0 {
        return (0, 0);
    }
    // NULL links end the chain before a load faults (see `kernel::owner_cgroup`).
    let bio: *const u8 = load(rq, cfg_u32(&cfg.rq_bio));
    if bio.is_null() {
        return (0, 0);
    }
    let bvec: *const u8 = load(bio, cfg_u32(&cfg.bio_io_vec));
    if bvec.is_null() {
        return (0, 0);
    }
    let page: *const u8 = load(bvec, cfg_u32(&cfg.bvec_page));
    if page.is_null() {
        return (0, 0);
    }
    let mapping: *const u8 = load(page, cfg_u32(&cfg.page_mapping));
    let bits = bits_of(mapping, SCRATCH_COMPLETE);
    if bits == 0 {
        return (0, 0);
    }
    // PAGE_MAPPING_ANON / MOVABLE / KSM: not a page-cache page.
    if bits & 3 != 0 {
        return (FILE_DEV_ANON, 0);
    }
    let inode: *const u8 = load(mapping, cfg_u32(&cfg.mapping_host));
    if inode.is_null() {
        return (0, 0);
    }
    let ino: u64 = load(inode, cfg_u32(&cfg.inode_ino));
    let mode: u16 = load(inode, cfg_u32(&cfg.inode_mode));
    if mode & S_IFMT == S_IFBLK {
        return (FILE_DEV_DEVICE, 0);
    }
    let sb: *const u8 = load(inode, cfg_u32(&cfg.inode_sb));
    if sb.is_null() {
        return (0, 0);
    }
    let key = FileKey {
        ino,
        dev: load(sb, cfg_u32(&cfg.sb_dev)),
        generation: load(inode, cfg_u32(&cfg.inode_generation)),
    };
    // SAFETY: FILES_SEEN's value is not read, only whether the key is there, so a concurrent update
    // or eviction cannot be observed half done.
    if unsafe { FILES_SEEN.get(&key) }.is_none() {
        #[expect(
            clippy::let_underscore_must_use,
            reason = "a failed insert only names the file again when it is next met"
        )]
        let _ = FILES_SEEN.insert(&key, &1, 0);
        name_file(cfg, key, bits_of(inode, SCRATCH_COMPLETE));
    }
    (key.dev, ino)
}

/// Read a kernel word at a plain address (0 if it faults).
#[inline(always)]
fn read_word(addr: u64) -> u64 {
    // SAFETY: `bpf_probe_read_kernel` checks the source address and fails (0 here) on a fault; the
    // destination is its own local.
    unsafe { aya_ebpf::helpers::bpf_probe_read_kernel(addr as *const u64) }.unwrap_or(0)
}

/// Name a file: its first dentry's name and its parents' up to the root, on `FILE_NAMES` (a
/// full ring loses the name, counted; its IOs still name the inode).
#[inline(never)]
#[expect(
    clippy::cast_possible_truncation,
    reason = "FILE_NAME_LEN and FILE_NAME_DEPTH are small constants"
)]
fn name_file(cfg: &ProbeConfig, key: FileKey, inode: u64) {
    let Some(mut entry) = FILE_NAMES.reserve::<FileName>(0) else {
        bump(Counter::FileNameDrops);
        return;
    };
    let ev = entry.as_mut_ptr();
    // SAFETY: `ev` points to the FileName reserved on the ring, this program's alone until it is
    // submitted; every field is written before the submit.
    unsafe {
        core::ptr::write_volatile(&raw mut (*ev).key, key);
        core::ptr::write_volatile(&raw mut (*ev).depth, 0);
        core::ptr::write_volatile(&raw mut (*ev).complete, 0);
    }
    let first = read_word(inode + u64::from(cfg_u32(&cfg.inode_dentry)));
    let mut d = first.wrapping_sub(u64::from(cfg_u32(&cfg.dentry_alias)));
    let mut depth = 0u32;
    let mut complete = 0u32;
    if first != 0 {
        for i in 0..FILE_NAME_DEPTH {
            let name = read_word(d + u64::from(cfg_u32(&cfg.dentry_name)));
            // SAFETY: the destination is component i of the reserved record, FILE_NAME_LEN
            // bytes; the helper NUL-terminates and fails on a bad source (an empty name).
            unsafe {
                let dst = (&raw mut (*ev).names).cast::<[u8; FILE_NAME_LEN]>().add(i);
                if aya_ebpf::helpers::generated::bpf_probe_read_kernel_str(
                    dst.cast(),
                    FILE_NAME_LEN as u32,
                    name as *const core::ffi::c_void,
                ) < 0
                {
                    core::ptr::write_volatile(dst.cast::<u8>(), 0);
                }
            }
            depth = i as u32 + 1;
            let parent = read_word(d + u64::from(cfg_u32(&cfg.dentry_parent)));
            if parent == d || parent == 0 {
                complete = 1;
                break;
            }
            d = parent;
        }
    }
    // SAFETY: `ev` as above, not submitted yet.
    unsafe {
        core::ptr::write_volatile(&raw mut (*ev).depth, depth);
        core::ptr::write_volatile(&raw mut (*ev).complete, complete);
    }
    entry.submit(0);
}
