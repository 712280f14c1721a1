//! Per-device counts of requests in flight (in the OS and on the device), direct-mapped by a
//! hash of the device, or in the hash map when another device holds the slot.

use core::intrinsics::{AtomicOrdering, atomic_cxchg};

use tracer_common::{DeviceSlot, DeviceState};

use crate::kernel::{cfg_u32, config};
use crate::maps::{BPF_NOEXIST, DEVICE_SLOTS, DEVICES};

#[inline(always)]
fn device_slot(dev: u32) -> Option<*mut DeviceSlot> {
    DEVICE_SLOTS.get_ptr_mut(tracer_common::device_slot_index(dev))
}

/// The device's in-flight counts, if it has any yet.
#[inline(always)]
pub(crate) fn device_state(dev: u32) -> Option<*mut DeviceState> {
    let tag = u64::from(dev) + 1;
    if let Some(slot) = device_slot(dev) {
        // SAFETY: `slot` is a value of DEVICE_SLOTS (see `maps`); its tag is read volatile, as
        // other CPUs claim free slots with a CAS.
        match unsafe { core::ptr::read_volatile(&raw const (*slot).tag) } {
            // SAFETY: as above; only the field's address is taken.
            t if t == tag => return Some(unsafe { &raw mut (*slot).st }),
            // A free slot: the device has no counts yet, as it claims its slot first. Not
            // without compare-and-exchange, where no slot is ever claimed (the verifier
            // resolves the read-only flag).
            0 if cfg_u32(&config().cas) != 0 => return None,
            _ => {}
        }
    }
    DEVICES.get_ptr_mut(&dev)
}

/// The device's in-flight counts, created at zero when first seen: its slot if free, else
/// the hash map.
#[inline(always)]
pub(crate) fn device<const CAS: bool>(dev: u32) -> Option<*mut DeviceState> {
    if let Some(p) = device_state(dev) {
        return Some(p);
    }
    let tag = u64::from(dev) + 1;
    if CAS && let Some(slot) = device_slot(dev) {
        // SAFETY: `slot` is a value of DEVICE_SLOTS (see `maps`); the CAS makes one device the
        // owner of a free slot.
        let (old, won) = unsafe {
            atomic_cxchg::<u64, { AtomicOrdering::AcqRel }, { AtomicOrdering::Relaxed }>(
                &raw mut (*slot).tag,
                0,
                tag,
            )
        };
        if won || old == tag {
            // SAFETY: as above; only the field's address is taken.
            return Some(unsafe { &raw mut (*slot).st });
        }
    }
    #[expect(
        clippy::let_underscore_must_use,
        reason = "fails only when another CPU has just created it, which is as good"
    )]
    let _ = DEVICES.insert(&dev, &DeviceState::default(), BPF_NOEXIST);
    DEVICES.get_ptr_mut(&dev)
}
