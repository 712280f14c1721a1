//! A minimal reader of the kernel's BTF (`/sys/kernel/btf/vmlinux`, or a file for that kernel
//! given with `--btf`): just enough to find struct member offsets, enum values and the
//! arguments of the block layer's tracepoints, so the probe needs no compiled-in kernel layout.

use std::collections::HashMap;

#[derive(Debug, thiserror::Error)]
pub enum BtfError {
    #[error("cannot read {path}: {source} (the kernel needs CONFIG_DEBUG_INFO_BTF=y)")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("BTF is malformed: {0}")]
    Malformed(&'static str),
    #[error("kernel BTF has no struct {0}")]
    NoStruct(String),
    #[error("kernel BTF: struct {0} has no member {1}")]
    NoMember(String, String),
    #[error("kernel BTF has no enumerator {0}")]
    NoEnumerator(String),
    #[error("the kernel has no tracepoint {0}")]
    NoTracepoint(String),
    #[error("tracepoint {0} has no `struct {1} *` argument in its BTF prototype")]
    NoArgument(String, String),
    #[error("{0}")]
    Unsupported(String),
}

/// Where the kernel publishes its own BTF.
pub const SYS_BTF: &str = "/sys/kernel/btf/vmlinux";

const KIND_INT: u32 = 1;
const KIND_PTR: u32 = 2;
const KIND_ARRAY: u32 = 3;
const KIND_VOLATILE: u32 = 9;
const KIND_CONST: u32 = 10;
const KIND_RESTRICT: u32 = 11;
const KIND_TYPE_TAG: u32 = 18;
const KIND_STRUCT: u32 = 4;
const KIND_TYPEDEF: u32 = 8;
const KIND_UNION: u32 = 5;
const KIND_ENUM: u32 = 6;
const KIND_FUNC_PROTO: u32 = 13;
const KIND_VAR: u32 = 14;
const KIND_DATASEC: u32 = 15;
const KIND_DECL_TAG: u32 = 17;
const KIND_ENUM64: u32 = 19;

/// Per type id (from 1), the members of a struct or union: (name, type id, bit offset).
type Members = Vec<(String, u32, u32)>;

/// A struct's members, with those of its anonymous members at their offsets (bounded
/// depth: a malformed file cannot loop).
fn flatten(
    all: &[Option<Members>],
    id: u32,
    base: u32,
    depth: u32,
    out: &mut HashMap<String, u32>,
) {
    let Some(Some(members)) = all.get(id as usize) else {
        return;
    };
    for (name, tid, off) in members {
        if name.is_empty() {
            if depth < 8 {
                flatten(all, *tid, base + off, depth + 1, out);
            }
        } else {
            out.entry(name.clone()).or_insert(base + off);
        }
    }
}

pub struct KernelBtf {
    /// struct name -> member name -> bit offset; the members of anonymous struct and union
    /// members are listed as the struct's own (C reaches them that way: `page->mapping`).
    structs: HashMap<String, HashMap<String, u32>>,
    enumerators: HashMap<String, i64>,
    /// Typedef name -> the type id it names (`btf_trace_NAME` -> pointer to its prototype).
    typedefs: HashMap<String, u32>,
    /// Per type id, what a tracepoint's arguments are followed through: pointers, qualifiers
    /// and typedefs to their type; a function prototype to its parameters; a struct to its name.
    links: Vec<Link>,
}

/// A type as far as [`KernelBtf::tracepoint_arg`] follows it.
#[derive(Clone, Debug)]
enum Link {
    Other,
    /// A pointer to a type.
    Ptr(u32),
    /// Typedef, `const`, `volatile`, `restrict`, type tag: the type it qualifies or names.
    To(u32),
    /// `struct NAME`, or a forward declaration of one.
    Struct(String),
    /// A function prototype's parameter types.
    Proto(Vec<u32>),
}

impl KernelBtf {
    pub fn from_sys() -> Result<KernelBtf, BtfError> {
        Self::from_file(std::path::Path::new(SYS_BTF))
    }

    /// The BTF of the running kernel from a file: the kernel's own, or one published for it
    /// (`--btf`, for kernels that do not expose theirs).
    pub fn from_file(path: &std::path::Path) -> Result<KernelBtf, BtfError> {
        let data = std::fs::read(path).map_err(|source| BtfError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse(&data)
    }

    pub fn parse(data: &[u8]) -> Result<KernelBtf, BtfError> {
        let u16_at = |o: usize| data.get(o..o + 2).map(|b| u16::from_le_bytes([b[0], b[1]]));
        let u32_at = |o: usize| {
            data.get(o..o + 4)
                .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        };
        if u16_at(0) != Some(0xeb9f) {
            return Err(BtfError::Malformed(
                "bad magic (big-endian BTF is not supported)",
            ));
        }
        let short = BtfError::Malformed("short header");
        let hdr_len = u32_at(4).ok_or(BtfError::Malformed("short header"))? as usize;
        let type_off = u32_at(8).ok_or(BtfError::Malformed("short header"))? as usize;
        let type_len = u32_at(12).ok_or(BtfError::Malformed("short header"))? as usize;
        let str_off = u32_at(16).ok_or(short)? as usize;
        let str_len = u32_at(20).ok_or(BtfError::Malformed("short header"))? as usize;
        let types = data
            .get(hdr_len + type_off..hdr_len + type_off + type_len)
            .ok_or(BtfError::Malformed("type section out of bounds"))?;
        let strings = data
            .get(hdr_len + str_off..hdr_len + str_off + str_len)
            .ok_or(BtfError::Malformed("string section out of bounds"))?;
        let name = |off: u32| -> &str {
            let s = strings.get(off as usize..).unwrap_or(&[]);
            let n = s.iter().position(|&c| c == 0).unwrap_or(s.len());
            std::str::from_utf8(&s[..n]).unwrap_or("")
        };
        let t32 = |o: usize| {
            types
                .get(o..o + 4)
                .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        };
        let mut aggregates: Vec<Option<Members>> = vec![None];
        let mut named: Vec<(String, u32)> = Vec::new();
        let mut enumerators = HashMap::new();
        let mut typedefs = HashMap::new();
        let mut links = vec![Link::Other];
        let mut pos = 0usize;
        while pos + 12 <= types.len() {
            let name_off = t32(pos).ok_or(BtfError::Malformed("short type"))?;
            let info = t32(pos + 4).ok_or(BtfError::Malformed("short type"))?;
            let kind = (info >> 24) & 0x1f;
            let vlen = (info & 0xffff) as usize;
            let kind_flag = info >> 31;
            // `size` for some kinds, `type` for the referring ones.
            let size_type = t32(pos + 8).ok_or(BtfError::Malformed("short type"))?;
            pos += 12;
            let id = u32::try_from(aggregates.len())
                .map_err(|_| BtfError::Malformed("more types than 32-bit ids"))?;
            aggregates.push(None);
            links.push(match kind {
                KIND_PTR => Link::Ptr(size_type),
                KIND_TYPEDEF | KIND_VOLATILE | KIND_CONST | KIND_RESTRICT | KIND_TYPE_TAG => {
                    Link::To(size_type)
                }
                // A forward declaration (kind 7) of a struct, when its flag is clear.
                KIND_STRUCT | 7 if kind_flag == 0 || kind == KIND_STRUCT => {
                    Link::Struct(name(name_off).to_string())
                }
                KIND_FUNC_PROTO => Link::Proto(
                    (0..vlen)
                        .map(|i| t32(pos + i * 8 + 4).ok_or(BtfError::Malformed("short param")))
                        .collect::<Result<_, _>>()?,
                ),
                _ => Link::Other,
            });
            match kind {
                KIND_INT | KIND_VAR | KIND_DECL_TAG => pos += 4,
                KIND_ARRAY => pos += 12,
                KIND_STRUCT | KIND_UNION => {
                    let sname = name(name_off);
                    let mut members = Vec::with_capacity(vlen);
                    for i in 0..vlen {
                        let m = pos + i * 12;
                        let mname = t32(m).ok_or(BtfError::Malformed("short member"))?;
                        let mtype = t32(m + 4).ok_or(BtfError::Malformed("short member"))?;
                        let off = t32(m + 8).ok_or(BtfError::Malformed("short member"))?;
                        let bit_off = if kind_flag != 0 { off & 0xff_ffff } else { off };
                        members.push((name(mname).to_string(), mtype, bit_off));
                    }
                    pos += vlen * 12;
                    if kind == KIND_STRUCT && !sname.is_empty() {
                        named.push((sname.to_string(), id));
                    }
                    aggregates[id as usize] = Some(members);
                }
                KIND_ENUM => {
                    for i in 0..vlen {
                        let e = pos + i * 8;
                        let ename = t32(e).ok_or(BtfError::Malformed("short enum"))?;
                        let val = t32(e + 4).ok_or(BtfError::Malformed("short enum"))?;
                        let val = if kind_flag != 0 {
                            i64::from(val.cast_signed())
                        } else {
                            i64::from(val)
                        };
                        enumerators.insert(name(ename).to_string(), val);
                    }
                    pos += vlen * 8;
                }
                KIND_ENUM64 => {
                    for i in 0..vlen {
                        let e = pos + i * 12;
                        let ename = t32(e).ok_or(BtfError::Malformed("short enum64"))?;
                        let lo = t32(e + 4).ok_or(BtfError::Malformed("short enum64"))?;
                        let hi = t32(e + 8).ok_or(BtfError::Malformed("short enum64"))?;
                        enumerators.insert(
                            name(ename).to_string(),
                            ((u64::from(hi) << 32) | u64::from(lo)).cast_signed(),
                        );
                    }
                    pos += vlen * 12;
                }
                KIND_TYPEDEF => {
                    typedefs.insert(name(name_off).to_string(), size_type);
                }
                KIND_FUNC_PROTO => pos += vlen * 8,
                KIND_DATASEC => pos += vlen * 12,
                _ => {}
            }
        }
        let mut structs = HashMap::new();
        for (sname, id) in named {
            structs.entry(sname).or_insert_with(|| {
                let mut m = HashMap::new();
                flatten(&aggregates, id, 0, 0, &mut m);
                m
            });
        }
        Ok(KernelBtf {
            structs,
            enumerators,
            typedefs,
            links,
        })
    }

    /// Follow pointers, qualifiers and typedefs from `id` (bounded: a malformed file cannot
    /// loop): how many pointers were passed, and where it ends.
    fn resolve(&self, mut id: u32) -> (u32, &Link) {
        let mut pointers = 0;
        for _ in 0..32 {
            match self.links.get(id as usize) {
                Some(Link::Ptr(next)) => {
                    pointers += 1;
                    id = *next;
                }
                Some(Link::To(next)) => id = *next,
                Some(end) => return (pointers, end),
                None => break,
            }
        }
        (pointers, &Link::Other)
    }

    /// Which argument of tracepoint `name` is its `struct STRUCT *`, counted as a `tp_btf`
    /// program's context counts them (the prototype's first parameter, the tracepoint's
    /// private `void *`, is not an argument). The block layer's request tracepoints took the
    /// queue first before Linux 5.11 (and in some 5.10 stable and distribution kernels after
    /// it): read from the prototype, never inferred from a version.
    pub fn tracepoint_arg(&self, name: &str, strukt: &str) -> Result<u32, BtfError> {
        let typedef = format!("btf_trace_{name}");
        let &id = self
            .typedefs
            .get(&typedef)
            .ok_or_else(|| BtfError::NoTracepoint(name.into()))?;
        let (_, Link::Proto(params)) = self.resolve(id) else {
            return Err(BtfError::Malformed(
                "a btf_trace_ typedef is not a prototype",
            ));
        };
        params
            .iter()
            .skip(1)
            .position(|&p| matches!(self.resolve(p), (1, Link::Struct(s)) if s == strukt))
            .and_then(|i| u32::try_from(i).ok())
            .ok_or_else(|| BtfError::NoArgument(name.into(), strukt.into()))
    }

    /// Byte offset of `member` in `struct name` (not for bitfields).
    pub fn member_offset(&self, name: &str, member: &str) -> Result<u32, BtfError> {
        let s = self
            .structs
            .get(name)
            .ok_or_else(|| BtfError::NoStruct(name.into()))?;
        let bits = s
            .get(member)
            .ok_or_else(|| BtfError::NoMember(name.into(), member.into()))?;
        Ok(bits / 8)
    }

    /// Whether the kernel has the tracepoint (BTF names each one's prototype
    /// `btf_trace_NAME`, which is what `tp_btf` programs attach by).
    pub fn has_tracepoint(&self, name: &str) -> bool {
        self.typedefs.contains_key(&format!("btf_trace_{name}"))
    }

    pub fn enumerator(&self, name: &str) -> Result<i64, BtfError> {
        self.enumerators
            .get(name)
            .copied()
            .ok_or_else(|| BtfError::NoEnumerator(name.into()))
    }

    /// An enumerator the kernel keeps in 32 bits (a request's op, in `cmd_flags`).
    pub fn enumerator_u32(&self, name: &str) -> Result<u32, BtfError> {
        u32::try_from(self.enumerator(name)?)
            .map_err(|_| BtfError::Malformed("an op enumerator beyond 32 bits"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A BTF blob of the given types (kind, name, vlen, size or type, extra words), from id 1.
    fn blob(types: &[(u32, &str, u32, u32, &[u32])]) -> Vec<u8> {
        let mut strings = vec![0u8];
        let mut body = Vec::new();
        for &(kind, name, vlen, size_type, extra) in types {
            let off = if name.is_empty() {
                0
            } else {
                let o = u32::try_from(strings.len()).unwrap();
                strings.extend_from_slice(name.as_bytes());
                strings.push(0);
                o
            };
            for w in [off, (kind << 24) | vlen, size_type].iter().chain(extra) {
                body.extend_from_slice(&w.to_le_bytes());
            }
        }
        let mut out = Vec::new();
        out.extend_from_slice(&0xeb9fu16.to_le_bytes());
        out.extend_from_slice(&[1, 0]);
        let (b, n) = (
            u32::try_from(body.len()).unwrap(),
            u32::try_from(strings.len()).unwrap(),
        );
        for w in [24, 0, b, b, n] {
            out.extend_from_slice(&w.to_le_bytes());
        }
        out.extend(body);
        out.extend(strings);
        out
    }

    #[test]
    fn the_request_argument_is_read_from_each_prototype() {
        // 5.10 before 5.10.137: (void *, struct request_queue *, struct request *); after, and
        // from 5.11: (void *, struct request *). block_getrq: (void *, q, bio, int) in 5.10,
        // (void *, bio) from 5.11. A `const` and a typedef on the way are followed.
        let btf = KernelBtf::parse(&blob(&[
            (KIND_STRUCT, "request", 0, 0, &[]),              // 1
            (KIND_STRUCT, "request_queue", 0, 0, &[]),        // 2
            (KIND_PTR, "", 0, 1, &[]),                        // 3: struct request *
            (KIND_PTR, "", 0, 2, &[]),                        // 4: struct request_queue *
            (KIND_PTR, "", 0, 0, &[]),                        // 5: void *
            (KIND_FUNC_PROTO, "", 3, 0, &[0, 5, 0, 4, 0, 3]), // 6: old
            (KIND_PTR, "", 0, 6, &[]),
            (KIND_TYPEDEF, "btf_trace_block_rq_issue", 0, 7, &[]), // 8
            (KIND_FUNC_PROTO, "", 2, 0, &[0, 5, 0, 3]),            // 9: new
            (KIND_PTR, "", 0, 9, &[]),
            (KIND_TYPEDEF, "btf_trace_block_rq_insert", 0, 10, &[]), // 11
            (KIND_STRUCT, "bio", 0, 0, &[]),                         // 12
            (KIND_CONST, "", 0, 12, &[]),                            // 13: const struct bio
            (KIND_PTR, "", 0, 13, &[]),                              // 14
            (KIND_INT, "int", 0, 4, &[32]),                          // 15
            (KIND_FUNC_PROTO, "", 4, 0, &[0, 5, 0, 4, 0, 14, 0, 15]), // 16
            (KIND_PTR, "", 0, 16, &[]),
            (KIND_TYPEDEF, "btf_trace_block_getrq", 0, 17, &[]),
        ]))
        .expect("well formed");
        assert_eq!(btf.tracepoint_arg("block_rq_issue", "request").unwrap(), 1);
        assert_eq!(btf.tracepoint_arg("block_rq_insert", "request").unwrap(), 0);
        assert_eq!(btf.tracepoint_arg("block_getrq", "bio").unwrap(), 1);
        assert!(matches!(
            btf.tracepoint_arg("block_getrq", "request"),
            Err(BtfError::NoArgument(..))
        ));
        assert!(matches!(
            btf.tracepoint_arg("block_io_start", "request"),
            Err(BtfError::NoTracepoint(_))
        ));
    }

    #[test]
    fn a_prototype_that_loops_is_an_error_not_a_hang() {
        let btf = KernelBtf::parse(&blob(&[
            (KIND_TYPEDEF, "btf_trace_block_rq_issue", 0, 2, &[]),
            (KIND_CONST, "", 0, 1, &[]),
        ]))
        .expect("well formed");
        assert!(btf.tracepoint_arg("block_rq_issue", "request").is_err());
    }

    #[test]
    fn running_kernel_has_what_the_probe_needs() {
        let btf = KernelBtf::from_sys().expect("this machine's kernel publishes its BTF");
        // Field offsets are nonzero except for the first member; q is first-ish.
        assert!(btf.member_offset("request", "cmd_flags").is_ok());
        assert!(btf.member_offset("request", "__sector").unwrap() > 0);
        assert_eq!(btf.enumerator("REQ_OP_READ").unwrap(), 0);
        assert_eq!(btf.enumerator("REQ_OP_WRITE").unwrap(), 1);
        assert!(btf.has_tracepoint("block_rq_issue"));
        assert!(btf.has_tracepoint("block_getrq"));
        assert!(!btf.has_tracepoint("block_no_such_event"));
        for tp in [
            "block_rq_issue",
            "block_rq_insert",
            "block_rq_complete",
            "block_io_start",
        ] {
            assert_eq!(btf.tracepoint_arg(tp, "request").unwrap(), 0, "{tp}");
        }
        assert_eq!(btf.tracepoint_arg("block_getrq", "bio").unwrap(), 0);
        // Members of anonymous unions and structs, as C names them.
        assert!(btf.member_offset("page", "mapping").unwrap() > 0);
        assert!(btf.member_offset("folio", "mapping").unwrap() > 0);
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(KernelBtf::parse(b"nope").is_err());
        assert!(
            KernelBtf::parse(&[0x9f, 0xeb, 1, 0, 24, 0, 0, 0, 0, 0, 0, 0, 255, 255, 0, 0]).is_err()
        );
    }
}
