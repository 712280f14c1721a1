//! The protobuf encoding of the Perfetto export: the field numbers of the messages it writes
//! (Perfetto's protos/perfetto/trace/, Apache License 2.0, Copyright The Android Open Source
//! Project), the wire format's fields, and string interning.

use std::collections::HashMap;

use crate::export::varint;

// Field numbers (perfetto.protos.*).
pub(super) const TRACE_PACKET: u32 = 1; // Trace.packet
pub(super) const P_TIMESTAMP: u32 = 8;
pub(super) const P_SEQ_ID: u32 = 10;
pub(super) const P_TRACK_EVENT: u32 = 11;
pub(super) const P_INTERNED: u32 = 12;
pub(super) const P_SEQ_FLAGS: u32 = 13;
pub(super) const P_TRACK_DESCRIPTOR: u32 = 60;
pub(super) const TE_DEBUG: u32 = 4;
pub(super) const TE_TYPE: u32 = 9;
pub(super) const TE_NAME_IID: u32 = 10;
pub(super) const TE_TRACK_UUID: u32 = 11;
pub(super) const TE_DOUBLE_COUNTER: u32 = 44;
pub(super) const DA_NAME_IID: u32 = 1;
pub(super) const DA_UINT: u32 = 3;
pub(super) const DA_STRING_IID: u32 = 17;
pub(super) const ID_EVENT_NAMES: u32 = 2;
pub(super) const ID_ANNOTATION_NAMES: u32 = 3;
pub(super) const ID_STRING_VALUES: u32 = 29;
pub(super) const TD_UUID: u32 = 1;
pub(super) const TD_NAME: u32 = 2;
pub(super) const TD_PARENT: u32 = 5;
pub(super) const TD_COUNTER: u32 = 8;
pub(super) const TD_ORDER_RANK: u32 = 12;
pub(super) const TD_MERGE_BEHAVIOR: u32 = 15;
pub(super) const TD_MERGE_KEY: u32 = 16;
pub(super) const CD_UNIT: u32 = 3;
pub(super) const CD_UNIT_NAME: u32 = 6;
pub(super) const SLICE_BEGIN: u64 = 1;
pub(super) const SLICE_END: u64 = 2;
pub(super) const INSTANT: u64 = 3;
pub(super) const COUNTER: u64 = 4;
pub(super) const SEQ_CLEARED: u64 = 1;
pub(super) const SEQ_NEEDS: u64 = 2;
pub(super) const MERGE_BY_KEY: u64 = 3;
pub(super) const UNIT_COUNT: u64 = 2;
/// The one packet sequence this writer uses.
pub(super) const SEQ_ID: u64 = 1;

pub(super) fn field_varint(b: &mut Vec<u8>, field: u32, v: u64) {
    varint(u64::from(field) << 3, b);
    varint(v, b);
}

pub(super) fn field_bytes(b: &mut Vec<u8>, field: u32, v: &[u8]) {
    varint(u64::from(field) << 3 | 2, b);
    varint(v.len() as u64, b);
    b.extend_from_slice(v);
}

pub(super) fn field_double(b: &mut Vec<u8>, field: u32, v: f64) {
    varint(u64::from(field) << 3 | 1, b);
    b.extend_from_slice(&v.to_le_bytes());
}

/// A message built in `scratch`, then written as a field of `b`.
pub(super) fn field_msg(
    b: &mut Vec<u8>,
    field: u32,
    scratch: &mut Vec<u8>,
    f: impl FnOnce(&mut Vec<u8>),
) {
    scratch.clear();
    f(scratch);
    field_bytes(b, field, scratch);
}

/// Strings given ids as they are first met (iid 1, 2, ...).
#[derive(Default)]
pub(super) struct Interner {
    ids: HashMap<String, u64>,
}

impl Interner {
    /// The iid, and whether the string is new (to be emitted in this packet's interned data).
    pub(super) fn get(&mut self, s: &str) -> (u64, bool) {
        if let Some(&id) = self.ids.get(s) {
            return (id, false);
        }
        let id = self.ids.len() as u64 + 1;
        self.ids.insert(s.to_string(), id);
        (id, true)
    }
}
