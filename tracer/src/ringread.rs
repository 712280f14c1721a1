//! Reading a BPF ring buffer a batch at a time: the producer position read once and the
//! consumer position written once per drain. aya's `RingBuf` publishes the consumer position
//! after every record, a store to the line that every reservation of the probe reads, so each
//! record moved that line between the CPUs twice. The layout is the kernel's
//! (`kernel/bpf/ringbuf.c`): a consumer page, a producer page, then the data pages mapped twice
//! in a row so that a record wrapping around the end reads as one slice; each record an 8-byte
//! header (its length, a busy bit while the producer writes it, a discard bit) and its data,
//! rounded up to 8 bytes.

use std::os::fd::{AsFd as _, AsRawFd, RawFd};
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

use aya::maps::MapData;

const BUSY: u32 = 1 << 31;
const DISCARD: u32 = 1 << 30;
const HDR: usize = 8;

struct Mapping {
    ptr: *mut libc::c_void,
    len: usize,
}

impl Mapping {
    fn new(fd: i32, len: usize, prot: i32, offset: usize) -> std::io::Result<Mapping> {
        // SAFETY: a fresh shared mapping of the map's fd; checked below.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                prot,
                libc::MAP_SHARED,
                fd,
                libc::off_t::try_from(offset).map_err(std::io::Error::other)?,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Mapping { ptr, len })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmapping what `new` mapped.
        unsafe { libc::munmap(self.ptr, self.len) };
    }
}

pub struct BatchRing {
    /// Keeps the map (and its fd) alive.
    map: MapData,
    consumer: Mapping,
    /// The producer page, then the data pages twice.
    producer: Mapping,
    mask: usize,
    page: usize,
    /// Where the next drain reads from.
    pos: usize,
    /// The consumer position last given to the producer: records from here to `pos` are
    /// drained and held.
    released: usize,
}

// SAFETY: the mappings are owned and used through &mut self only.
unsafe impl Send for BatchRing {}

/// The map's fd, to poll for the probe's wakeups.
impl AsRawFd for BatchRing {
    fn as_raw_fd(&self) -> RawFd {
        self.map.fd().as_fd().as_raw_fd()
    }
}

impl BatchRing {
    /// Map the ring buffer `map` of `byte_size` data bytes (a power of two, as the kernel
    /// requires of a ring).
    pub fn new(map: MapData, byte_size: usize) -> std::io::Result<BatchRing> {
        if !byte_size.is_power_of_two() {
            return Err(std::io::Error::other(format!(
                "ring of {byte_size} bytes: not a power of two"
            )));
        }
        // SAFETY: sysconf has no preconditions.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
            .map_err(std::io::Error::other)?;
        let fd = map.fd().as_fd().as_raw_fd();
        let consumer = Mapping::new(fd, page, libc::PROT_READ | libc::PROT_WRITE, 0)?;
        let producer = Mapping::new(fd, page + 2 * byte_size, libc::PROT_READ, page)?;
        // SAFETY: the consumer page starts with the consumer position, an aligned usize.
        let pos = unsafe { &*consumer.ptr.cast::<AtomicUsize>() }.load(Ordering::Acquire);
        Ok(BatchRing {
            map,
            consumer,
            producer,
            mask: byte_size - 1,
            page,
            pos,
            released: pos,
        })
    }

    /// Hand every committed record to `f`; the ring bytes consumed (headers and discarded
    /// records included).
    pub fn drain(&mut self, f: impl FnMut(&[u8])) -> u64 {
        let n = self.drain_held(f);
        self.release();
        n
    }

    /// [`BatchRing::drain`] without giving the records' space back to the producer: they stay
    /// where they are, unchanged, until [`BatchRing::release`] (or the ring's drop).
    pub fn drain_held(&mut self, mut f: impl FnMut(&[u8])) -> u64 {
        // SAFETY: the producer page starts with the producer position, an aligned usize.
        let prod = unsafe { &*self.producer.ptr.cast::<AtomicUsize>() }.load(Ordering::Acquire);
        // SAFETY: the data pages follow the producer page, mapped twice over.
        let data = unsafe {
            std::slice::from_raw_parts(
                self.producer.ptr.cast::<u8>().add(self.page),
                2 * (self.mask + 1),
            )
        };
        let start = self.pos;
        self.pos = walk(data, self.mask, start, prod, &mut f);
        self.pos.wrapping_sub(start) as u64
    }

    /// Give the space of every record drained so far back to the producer.
    pub fn release(&mut self) {
        if self.pos != self.released {
            // SAFETY: as in `new`.
            unsafe { &*self.consumer.ptr.cast::<AtomicUsize>() }.store(self.pos, Ordering::Release);
            self.released = self.pos;
        }
    }
}

/// Walk the records of `data` (a ring's data pages mapped twice in a row, 8-byte aligned) from
/// position `pos` up to `prod`: each committed record's data to `f`, discarded ones skipped,
/// stopping at one the producer is still writing. Returns the position reached.
fn walk(data: &[u8], mask: usize, mut pos: usize, prod: usize, f: &mut impl FnMut(&[u8])) -> usize {
    while pos != prod {
        let off = pos & mask;
        let Some(h) = data.get(off..off + HDR) else {
            break;
        };
        // The producer commits a record by clearing the busy bit with a fully ordered
        // exchange: an acquire load of the header pairs with it.
        #[expect(
            clippy::cast_ptr_alignment,
            reason = "the ring's data pages are page-aligned and records 8-byte aligned in them"
        )]
        // SAFETY: `h` is 8 bytes at an 8-byte aligned offset of `data`.
        let hdr = unsafe { &*h.as_ptr().cast::<AtomicU32>() }.load(Ordering::Acquire);
        if hdr & BUSY != 0 {
            break;
        }
        let len = (hdr & !(BUSY | DISCARD)) as usize;
        let step = (len + HDR).next_multiple_of(8);
        // A length beyond what the producer has published cannot come from the kernel: stop
        // rather than read past it.
        if step > prod.wrapping_sub(pos) {
            break;
        }
        if hdr & DISCARD == 0
            && let Some(rec) = data.get(off + HDR..off + HDR + len)
        {
            f(rec);
        }
        pos = pos.wrapping_add(step);
    }
    pos
}

/// Each CPU's batch of halves (`tracer_common::HalfBatch`), written to its rings on demand:
/// the probe's programs write a batch when it is full, and the daemon has a CPU's written
/// when it has waited 10 ms (and every one at the run's cuts), sweeping no further than the
/// earliest half of a batch still waiting. The program that does it ([`tracer_common::PROGRAM_FLUSH_HALVES`]) is never attached: it is run on
/// each CPU by `BPF_PROG_TEST_RUN` with `BPF_F_TEST_RUN_ON_CPU` (an IPI to that CPU).
pub struct BatchFlush {
    prog: std::os::fd::OwnedFd,
    batches: aya::maps::PerCpuArray<MapData, tracer_common::HalfBatch>,
}

/// `union bpf_attr`'s `test` member, up to `cpu` (the kernel takes a shorter attr as zeros).
#[repr(C)]
#[derive(Default)]
struct TestRunAttr {
    prog_fd: u32,
    retval: u32,
    data_size_in: u32,
    data_size_out: u32,
    data_in: u64,
    data_out: u64,
    repeat: u32,
    duration: u32,
    ctx_size_in: u32,
    ctx_size_out: u32,
    ctx_in: u64,
    ctx_out: u64,
    flags: u32,
    cpu: u32,
}

const BPF_PROG_TEST_RUN: libc::c_long = 10;
const BPF_F_TEST_RUN_ON_CPU: u32 = 1;

impl BatchFlush {
    pub fn new(
        prog: std::os::fd::OwnedFd,
        batches: aya::maps::PerCpuArray<MapData, tracer_common::HalfBatch>,
    ) -> std::io::Result<BatchFlush> {
        let cpus = aya::util::online_cpus()
            .map_err(|(path, e)| std::io::Error::new(e.kind(), format!("reading {path}: {e}")))?;
        let f = BatchFlush { prog, batches };
        // The mechanism itself, on the first online CPU: an empty batch, nothing written.
        f.run_on(cpus.first().copied().unwrap_or(0))?;
        Ok(f)
    }

    /// Run the flush program on `cpu`: its return value (1: a program of that CPU was inside
    /// the batch).
    fn run_on(&self, cpu: u32) -> std::io::Result<u32> {
        let mut attr = TestRunAttr {
            prog_fd: u32::try_from(self.prog.as_raw_fd()).map_err(std::io::Error::other)?,
            flags: BPF_F_TEST_RUN_ON_CPU,
            cpu,
            ..TestRunAttr::default()
        };
        // SAFETY: the bpf syscall reads and writes `attr`, whose layout is the kernel's
        // `test` member of `union bpf_attr` up to `cpu`, for the size given.
        let r = unsafe {
            libc::syscall(
                libc::SYS_bpf,
                BPF_PROG_TEST_RUN,
                &raw mut attr,
                size_of::<TestRunAttr>(),
            )
        };
        if r < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(attr.retval)
    }

    /// Have every CPU's batch whose earliest half is before `stale_before_ns` written to its
    /// rings (`u64::MAX`: every batch), before a drain of the rings. Returns how far a sweep
    /// after that drain may go: below the earliest instant of every batch still waiting, or
    /// None if a batch could not be written (a program of its CPU was inside it at every
    /// try), when halves of any instant may still be missing. A CPU the run cannot reach
    /// (taken offline with halves in its batch) is left out: those halves are lost.
    pub fn settle(&mut self, stale_before_ns: u64) -> Option<u64> {
        let batches = self.batches.get(&0, 0).ok()?;
        let mut limit = u64::MAX;
        let mut stale = Vec::new();
        // By CPU number (the values are the possible CPUs', in order).
        for (cpu, b) in (0u32..).zip(batches.iter()) {
            // A read racing the CPU's programs sees at worst an earlier instant, or an empty
            // batch whose halves came after the caller's clock read.
            if b.len == 0 {
                continue;
            }
            if b.first_ns < stale_before_ns {
                stale.push(cpu);
            } else {
                limit = limit.min(b.first_ns);
            }
        }
        for attempt in 0..8 {
            // Ok(1): a program of the CPU held the batch; an error: the CPU is offline.
            stale.retain(|&cpu| matches!(self.run_on(cpu), Ok(1)));
            if stale.is_empty() {
                return Some(limit);
            }
            if attempt < 7 {
                // A program holds a batch for well under a microsecond.
                std::thread::sleep(std::time::Duration::from_micros(50 << attempt));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::{BUSY, DISCARD, walk};

    /// A ring of `size` data bytes as user space maps it (twice in a row), 8-byte aligned.
    struct Ring {
        words: Vec<u64>,
        size: usize,
    }

    impl Ring {
        fn new(size: usize) -> Ring {
            Ring {
                words: vec![0; 2 * size / 8],
                size,
            }
        }
        fn bytes(&self) -> &[u8] {
            // SAFETY: the u64s' bytes.
            unsafe { std::slice::from_raw_parts(self.words.as_ptr().cast::<u8>(), self.size * 2) }
        }
        /// Write a record at `pos` (header flags `flags`), in both copies; the next position.
        fn put(&mut self, pos: usize, data: &[u8], flags: u32) -> usize {
            let size = self.size;
            // SAFETY: the u64s' bytes, written through one pointer.
            let b = unsafe {
                std::slice::from_raw_parts_mut(self.words.as_mut_ptr().cast::<u8>(), size * 2)
            };
            let mut rec = (u32::try_from(data.len()).unwrap() | flags)
                .to_ne_bytes()
                .to_vec();
            rec.extend_from_slice(&[0; 4]);
            rec.extend_from_slice(data);
            for (i, byte) in rec.iter().enumerate() {
                let at = (pos + i) % size;
                b[at] = *byte;
                b[at + size] = *byte;
            }
            pos + (data.len() + 8).next_multiple_of(8)
        }
    }

    fn read(r: &Ring, from: usize, prod: usize) -> (Vec<Vec<u8>>, usize) {
        let mut got = Vec::new();
        let pos = walk(r.bytes(), r.size - 1, from, prod, &mut |d: &[u8]| {
            got.push(d.to_vec());
        });
        (got, pos)
    }

    #[test]
    fn records_wrapping_around_the_end_read_whole_and_positions_keep_counting() {
        let mut r = Ring::new(128);
        // Start near the end, at a position that has gone round the ring twice (72 bytes of
        // records from 104: the second wraps).
        let start = 2 * 128 + 104;
        let mut pos = r.put(start, b"abc", 0);
        pos = r.put(pos, b"0123456789abcdef", 0);
        pos = r.put(pos, b"xyz", DISCARD);
        pos = r.put(pos, b"!", 0);
        let (got, reached) = read(&r, start, pos);
        assert_eq!(
            got,
            vec![b"abc".to_vec(), b"0123456789abcdef".to_vec(), b"!".to_vec()]
        );
        assert_eq!(reached, pos);
    }

    #[test]
    fn a_record_still_being_written_stops_the_walk_until_it_is_committed() {
        let mut r = Ring::new(128);
        let p1 = r.put(0, b"first", 0);
        let p2 = r.put(p1, b"second", BUSY);
        let p3 = r.put(p2, b"third", 0);
        let (got, reached) = read(&r, 0, p3);
        assert_eq!(got, vec![b"first".to_vec()]);
        assert_eq!(reached, p1);
        r.put(p1, b"second", 0);
        let (got, reached) = read(&r, reached, p3);
        assert_eq!(got, vec![b"second".to_vec(), b"third".to_vec()]);
        assert_eq!(reached, p3);
    }

    #[test]
    fn a_length_past_the_producer_stops_the_walk() {
        let mut r = Ring::new(64);
        let p1 = r.put(0, b"ok", 0);
        // A header claiming 40 bytes where the producer published 16.
        let _ = r.put(p1, &[7; 40], 0);
        let (got, reached) = read(&r, 0, p1 + 16);
        assert_eq!(got, vec![b"ok".to_vec()]);
        assert_eq!(reached, p1);
    }
}
