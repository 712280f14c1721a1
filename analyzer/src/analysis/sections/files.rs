//! files: which files each device's IO reads and writes (traces of `blkprof-trace --files`,
//! format version 5): the file of each IO's first data page, as the tracer named it while the
//! run was live. IO on pages of no file (direct IO) and on the block device's own page cache
//! (file system metadata, journal) is told apart. Files are grouped into kinds by name: a
//! Cassandra SSTable component by its suffix (`Data.db`, `Index.db`), others by extension.

use std::collections::HashMap;
use std::io::Write;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tracer_common::format::IoRecord;
use tracer_common::op::StatGroup;
use tracer_common::{FILE_DEV_ANON, FILE_DEV_DEVICE};

use super::{Names, Section, SectionDef};
use crate::analysis::labels::{DEVICE, DEVICE_FILE, DIRECT, DIRECT_FILE, UnnamedFile};
use crate::analysis::series::Options;

pub(super) const DEF: SectionDef = SectionDef {
    name: "files",
    new,
    text,
    html,
};

/// Files listed per device; the rest are summed in one line.
const TOP: usize = 10;

/// The kind of the files the trace did not name.
const UNNAMED: &str = "(unnamed file)";

#[derive(Serialize, Deserialize, Default)]
#[serde(default)]
struct Model {
    devices: Vec<DeviceModel>,
}

#[derive(Serialize, Deserialize, Default)]
#[serde(default)]
struct DeviceModel {
    name: String,
    /// The top files by bytes, then (when there are more) `path` "(N others)". IO of no file
    /// and the device's own page cache are rows too, named by their kind in parentheses.
    files: Vec<Row>,
    /// Every IO with data pages by kind of file, by bytes.
    kinds: Vec<KindRow>,
}

#[derive(Serialize, Deserialize, Default)]
#[serde(default)]
struct Row {
    path: String,
    kind: String,
    ios: u64,
    bytes: u64,
    read_bytes: u64,
    write_bytes: u64,
    pct_bytes: f64,
}

#[derive(Serialize, Deserialize, Default)]
#[serde(default)]
struct KindRow {
    kind: String,
    files: u64,
    ios: u64,
    bytes: u64,
    read_bytes: u64,
    write_bytes: u64,
    pct_bytes: f64,
}

#[derive(Default, Clone, Copy)]
struct Tally {
    ios: u64,
    read_bytes: u64,
    write_bytes: u64,
    other_bytes: u64,
}

impl Tally {
    fn bytes(&self) -> u64 {
        self.read_bytes + self.write_bytes + self.other_bytes
    }
    fn add(&mut self, o: &Tally) {
        self.ios += o.ios;
        self.read_bytes += o.read_bytes;
        self.write_bytes += o.write_bytes;
        self.other_bytes += o.other_bytes;
    }
}

#[derive(Default)]
struct Files {
    /// Per (device, file system, inode, file id): an inode number reused by another file is
    /// another file id.
    tallies: HashMap<(u32, u32, u64, u32), Tally>,
    /// The trace names files.
    on: bool,
}

fn new(_: &Options, header: &tracer_common::format::TraceHeader) -> Box<dyn Section> {
    Box::new(Files {
        on: header.files,
        ..Files::default()
    })
}

impl Section for Files {
    fn chunk(&mut self, records: &[IoRecord]) {
        if !self.on {
            return;
        }
        let mut last: Option<((u32, u32, u64, u32), Tally)> = None;
        for r in records {
            // No data pages (flushes, discards): no file.
            if r.file_dev == 0 {
                continue;
            }
            let key = (r.dev, r.file_dev, r.file_ino, r.file_id);
            // Consecutive records mostly share a file: tally locally until it changes.
            let t = match &mut last {
                Some((k, t)) if *k == key => t,
                _ => {
                    if let Some((k, t)) = last.take() {
                        self.tallies.entry(k).or_default().add(&t);
                    }
                    &mut last.insert((key, Tally::default())).1
                }
            };
            t.ios += 1;
            let b = u64::from(r.bytes);
            match r.stat_group() {
                StatGroup::Read => t.read_bytes += b,
                StatGroup::Write => t.write_bytes += b,
                _ => t.other_bytes += b,
            }
        }
        if let Some((k, t)) = last {
            self.tallies.entry(k).or_default().add(&t);
        }
    }

    fn finish(self: Box<Self>, cx: &Names) -> Value {
        if !self.on || self.tallies.is_empty() {
            return Value::Null;
        }
        let mut per_dev: HashMap<u32, Vec<(String, String, Tally)>> = HashMap::new();
        for ((dev, fdev, ino, id), t) in self.tallies {
            let (path, kind) = match fdev {
                FILE_DEV_ANON => (DIRECT_FILE.to_string(), DIRECT.to_string()),
                FILE_DEV_DEVICE => (DEVICE_FILE.to_string(), DEVICE.to_string()),
                _ => match (cx.file)(id).and_then(|f| f.2) {
                    Some(p) => {
                        let k = kind_of(&p);
                        (p, k)
                    }
                    None => (
                        UnnamedFile { dev: fdev, ino }.to_string(),
                        UNNAMED.to_string(),
                    ),
                },
            };
            per_dev.entry(dev).or_default().push((path, kind, t));
        }
        let pct = |a: u64, b: u64| {
            if b == 0 {
                0.0
            } else {
                a as f64 * 100.0 / b as f64
            }
        };
        let mut devices: Vec<DeviceModel> = per_dev
            .into_iter()
            .map(|(dev, mut list)| {
                let total: u64 = list.iter().map(|x| x.2.bytes()).sum();
                list.sort_by(|a, b| b.2.bytes().cmp(&a.2.bytes()).then(a.0.cmp(&b.0)));
                let mut kinds: HashMap<&str, (u64, Tally)> = HashMap::new();
                for (_, k, t) in &list {
                    let e = kinds.entry(k.as_str()).or_default();
                    // Direct IO and the device's page cache are not files.
                    if k != DIRECT && k != DEVICE {
                        e.0 += 1;
                    }
                    e.1.add(t);
                }
                let mut kinds: Vec<KindRow> = kinds
                    .into_iter()
                    .map(|(kind, (files, t))| KindRow {
                        kind: kind.to_string(),
                        files,
                        ios: t.ios,
                        bytes: t.bytes(),
                        read_bytes: t.read_bytes,
                        write_bytes: t.write_bytes,
                        pct_bytes: pct(t.bytes(), total),
                    })
                    .collect();
                kinds.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.kind.cmp(&b.kind)));
                let row = |path: String, kind: String, t: &Tally| Row {
                    path,
                    kind,
                    ios: t.ios,
                    bytes: t.bytes(),
                    read_bytes: t.read_bytes,
                    write_bytes: t.write_bytes,
                    pct_bytes: pct(t.bytes(), total),
                };
                let n = list.len();
                let mut files = Vec::new();
                let mut rest = Tally::default();
                for (i, (path, kind, t)) in list.into_iter().enumerate() {
                    if i < TOP || n == TOP + 1 {
                        files.push(row(path, kind, &t));
                    } else {
                        rest.add(&t);
                    }
                }
                if rest.ios > 0 {
                    files.push(row(format!("({} others)", n - TOP), String::new(), &rest));
                }
                DeviceModel {
                    name: (cx.device)(dev),
                    files,
                    kinds,
                }
            })
            .collect();
        devices.sort_by(|a, b| a.name.cmp(&b.name));
        serde_json::to_value(Model { devices }).unwrap_or(Value::Null)
    }
}

/// A file's kind by its name: a Cassandra SSTable component by what follows its
/// `<version>-<generation>-<format>-` prefix (`nb-1-big-Data.db` is `Data.db`, `nb-1-big-TOC.txt`
/// is `TOC.txt`), else its extension (`.log`), else "(no extension)".
fn kind_of(path: &str) -> String {
    let name = path.rsplit('/').next().unwrap_or(path);
    if let Some((_, component)) = crate::analysis::classes::sstable_split(name) {
        return component.to_string();
    }
    match name.rsplit_once('.') {
        Some((stem, ext)) if !stem.is_empty() && !ext.is_empty() => format!(".{ext}"),
        _ => "(no extension)".to_string(),
    }
}

fn model(v: &Value) -> Option<Model> {
    Model::deserialize(v).ok().filter(|m| !m.devices.is_empty())
}

fn text(v: &Value, out: &mut dyn Write) -> std::io::Result<()> {
    let Some(m) = model(v) else { return Ok(()) };
    let bytes = crate::report::format::bytes;
    writeln!(out, "\nfiles (of each IO's first data page; top by bytes):")?;
    for d in &m.devices {
        for f in &d.files {
            writeln!(
                out,
                "  {:<12} {:<60} {:>10} IOs  {:>10} {:>5.1}%  read {:>10}  written {:>10}",
                d.name,
                f.path,
                tracer_common::coverage::thousands(f.ios),
                bytes(f.bytes),
                f.pct_bytes,
                bytes(f.read_bytes),
                bytes(f.write_bytes),
            )?;
        }
    }
    writeln!(out, "file kinds:")?;
    for d in &m.devices {
        for k in &d.kinds {
            let files = if k.files == 0 {
                String::new()
            } else {
                format!("{} files", tracer_common::coverage::thousands(k.files))
            };
            writeln!(
                out,
                "  {:<12} {:<24} {:>14} {:>10} IOs  {:>10} {:>5.1}%  read {:>10}  written {:>10}",
                d.name,
                k.kind,
                files,
                tracer_common::coverage::thousands(k.ios),
                bytes(k.bytes),
                k.pct_bytes,
                bytes(k.read_bytes),
                bytes(k.write_bytes),
            )?;
        }
    }
    Ok(())
}

#[derive(askama::Template)]
#[template(path = "sections/files.html")]
struct Html<'a> {
    m: &'a Model,
}

fn html(v: &Value, h: &mut String) -> std::fmt::Result {
    let Some(m) = model(v) else { return Ok(()) };
    super::render_html(&Html { m: &m }, h)
}

#[cfg(test)]
mod tests {
    use super::kind_of;

    #[test]
    fn kinds_by_name() {
        assert_eq!(
            kind_of("/var/lib/cassandra/data/ks/t-1/nb-12-big-Data.db"),
            "Data.db"
        );
        assert_eq!(
            kind_of("/d/nb-3-big-CompressionInfo.db"),
            "CompressionInfo.db"
        );
        assert_eq!(kind_of("/c/CommitLog-7-1700000000.log"), ".log");
        assert_eq!(kind_of("/x/manifest.db"), ".db");
        assert_eq!(kind_of("/d/nb-81-big-TOC.txt"), "TOC.txt");
        assert_eq!(
            kind_of("/d/da-3gzv_0xl5_1a2b-bti-Partitions.db"),
            "Partitions.db"
        );
        assert_eq!(kind_of("/d/my-file-name.txt"), ".txt");
        assert_eq!(kind_of("/x/README"), "(no extension)");
        assert_eq!(kind_of("/x/.hidden"), "(no extension)");
    }
}
