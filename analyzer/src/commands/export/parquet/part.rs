//! One Parquet file being written: its batch of rows, the row group being built (a chunk
//! writer per column: ours, `delta.rs` and `dict.rs`), the footer, the rename into place.

use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_schema::SchemaRef;
use parquet::arrow::{ArrowSchemaConverter, add_encoded_arrow_schema_to_metadata};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;

use super::batch::{Batch, Keys, Values};
use super::delta::DeltaColumn;
use super::dict::DictColumn;
use super::{DEFAULT_ROW_GROUP_ROWS, RUN_META_KEY, RunMeta};
use crate::export::ExportError;

/// A numeric column's chunk being written (`delta.rs`: `DELTA_BINARY_PACKED` pages of our own,
/// their statistics found in the same pass).
enum NumColumn {
    I64(DeltaColumn<i64>),
    I32(DeltaColumn<i32>),
}

/// The row group being written: a chunk writer per numeric column and per dictionary one, in
/// the batch's order of each.
struct Group {
    /// With their positions in the schema.
    numeric: Vec<(usize, NumColumn)>,
    dict: Vec<(usize, DictColumn)>,
    rows: usize,
}

/// One Parquet file being written: under a `.part` name until complete.
pub(super) struct Part {
    #[expect(
        clippy::struct_field_names,
        reason = "the `.part` file's path, beside `path`, the finished file's"
    )]
    pub(super) part_path: PathBuf,
    path: PathBuf,
    file: SerializedFileWriter<BufWriter<File>>,
    group: Option<Group>,
    row_group_rows: usize,
    pub(super) batch: Batch,
    /// The numeric columns' chunk buffers (in their order), kept from row group to row group.
    chunk_bufs: Vec<Vec<u8>>,
    pub(super) rows: u64,
    /// The UTC day (days since the epoch) of a partitioned file; for flushing days gone by.
    pub(super) day: i64,
    pub(super) flushed: bool,
}

pub(super) fn part_name(p: &Path) -> PathBuf {
    let mut s = p.as_os_str().to_owned();
    s.push(".part");
    PathBuf::from(s)
}

impl Part {
    pub(super) fn create(
        path: PathBuf,
        schema: &SchemaRef,
        props: WriterProperties,
    ) -> Result<Part, ExportError> {
        let part_path = part_name(&path);
        if let Some(dir) = part_path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| {
                ExportError::Output(format!("cannot create {}: {e}", dir.display()))
            })?;
        }
        let file = File::create(&part_path).map_err(|e| {
            ExportError::Output(format!("cannot write {}: {e}", part_path.display()))
        })?;
        let perr = |e| ExportError::Parquet {
            path: part_path.clone(),
            source: e,
        };
        // As the Arrow writer sets a file up: the Parquet schema of the Arrow one, and the
        // Arrow schema in the metadata (readers get the dictionary and time zone types back).
        let mut props = props;
        let parquet_schema = ArrowSchemaConverter::new()
            .with_coerce_types(props.coerce_types())
            .convert(schema)
            .map_err(perr)?;
        add_encoded_arrow_schema_to_metadata(schema, &mut props);
        let row_group_rows = props
            .max_row_group_row_count()
            .unwrap_or(DEFAULT_ROW_GROUP_ROWS);
        let file = SerializedFileWriter::new(
            BufWriter::with_capacity(1 << 20, file),
            parquet_schema.root_schema_ptr(),
            Arc::new(props),
        )
        .map_err(perr)?;
        Ok(Part {
            part_path,
            path,
            file,
            group: None,
            row_group_rows: row_group_rows.max(1),
            batch: Batch::new(),
            chunk_bufs: Vec::new(),
            rows: 0,
            day: 0,
            flushed: false,
        })
    }

    fn perr(&self) -> impl Fn(parquet::errors::ParquetError) -> ExportError + use<> {
        let path = self.part_path.clone();
        move |e| ExportError::Parquet {
            path: path.clone(),
            source: e,
        }
    }

    /// Write the batch's rows into the row group (and the row group, when full, into the
    /// file), and empty the batch.
    pub(super) fn write_batch(&mut self, keys: &Keys) -> Result<(), ExportError> {
        if self.batch.len() == 0 {
            return Ok(());
        }
        // Out of `self` while its rows are written (a row group may end mid-batch).
        let mut batch = std::mem::take(&mut self.batch);
        let result = self.write_columns(keys, &batch);
        batch.clear();
        self.batch = batch;
        result
    }

    fn write_columns(&mut self, keys: &Keys, batch: &Batch) -> Result<(), ExportError> {
        let n = batch.len();
        let perr = self.perr();
        let sources: Vec<Vec<&str>> = batch.dicts.iter().map(|d| d.values(keys)).collect();
        let mut done = 0;
        while done < n {
            if self.group.is_none() {
                self.group = Some(self.new_group(batch).map_err(&perr)?);
            }
            let g = self.group.as_mut().expect("a group");
            let take = (n - done).min(self.row_group_rows - g.rows);
            let range = done..done + take;
            for (col, (_, w)) in batch.nums.iter().zip(&mut g.numeric) {
                let valid = col.validity().map(|v| &v[range.clone()]);
                match (w, &col.values) {
                    (NumColumn::I64(w), Values::I64(v)) => w.write(&v[range.clone()], valid),
                    (NumColumn::I32(w), Values::I32(v)) => w.write(&v[range.clone()], valid),
                    _ => Err(parquet::errors::ParquetError::General(
                        "a numeric column of another type".into(),
                    )),
                }
                .map_err(&perr)?;
            }
            for ((col, source), (_, w)) in batch.dicts.iter().zip(&sources).zip(&mut g.dict) {
                w.write(&col.keys[range.clone()], source).map_err(&perr)?;
            }
            g.rows += take;
            done += take;
            if g.rows == self.row_group_rows {
                self.finish_group()?;
            }
        }
        Ok(())
    }

    /// A row group's chunk writers, for the columns of `batch`.
    fn new_group(&mut self, batch: &Batch) -> parquet::errors::Result<Group> {
        let descr = self.file.schema_descr();
        let props = self.file.properties().clone();
        let numeric = batch
            .nums
            .iter()
            .enumerate()
            .map(|(j, col)| {
                let d = descr.column(col.column);
                let codec = props.compression(d.path());
                // Each column its own (sized for it).
                let buf = self
                    .chunk_bufs
                    .get_mut(j)
                    .map(std::mem::take)
                    .unwrap_or_default();
                Ok((
                    col.column,
                    match col.values {
                        Values::I64(_) => NumColumn::I64(DeltaColumn::new(d, codec, buf)?),
                        Values::I32(_) => NumColumn::I32(DeltaColumn::new(d, codec, buf)?),
                    },
                ))
            })
            .collect::<parquet::errors::Result<_>>()?;
        let dict = batch
            .dicts
            .iter()
            .map(|col| (col.column, DictColumn::new(descr.column(col.column))))
            .collect();
        Ok(Group {
            numeric,
            dict,
            rows: 0,
        })
    }

    /// Write the row group being built, if any, into the file.
    pub(super) fn finish_group(&mut self) -> Result<(), ExportError> {
        let Some(g) = self.group.take() else {
            return Ok(());
        };
        let perr = self.perr();
        let mut rg = self.file.next_row_group().map_err(&perr)?;
        // The chunks in schema order: the batch's numeric and dictionary columns interleave.
        let mut chunks: Vec<(usize, Chunk)> = g
            .numeric
            .into_iter()
            .map(|(i, w)| (i, Chunk::Num(w)))
            .chain(g.dict.into_iter().map(|(i, w)| (i, Chunk::Dict(w))))
            .collect();
        chunks.sort_by_key(|c| c.0);
        let mut j = 0;
        for (_, chunk) in chunks {
            match chunk {
                Chunk::Dict(d) => {
                    let (bytes, close) = d.finish().map_err(&perr)?;
                    rg.append_column(&bytes, close).map_err(&perr)?;
                }
                Chunk::Num(w) => {
                    let (bytes, close) = match w {
                        NumColumn::I64(w) => w.finish(),
                        NumColumn::I32(w) => w.finish(),
                    }
                    .map_err(&perr)?;
                    rg.append_column(&bytes, close).map_err(&perr)?;
                    // The chunk's memory for the next row group's (page faults and regrowth
                    // copies were 5% of the time).
                    if let Ok(b) = bytes.try_into_mut() {
                        if self.chunk_bufs.len() <= j {
                            self.chunk_bufs.resize_with(j + 1, Vec::new);
                        }
                        self.chunk_bufs[j] = b.into();
                    }
                    j += 1;
                }
            }
        }
        rg.close().map_err(&perr)?;
        Ok(())
    }

    /// Write what is buffered, the metadata, the footer; rename into place.
    pub(super) fn finish(mut self, keys: &Keys, meta: &RunMeta) -> Result<PathBuf, ExportError> {
        self.write_batch(keys)?;
        self.finish_group()?;
        let meta = RunMeta {
            rows: self.rows,
            ..meta.clone()
        };
        self.file.append_key_value_metadata(KeyValue::new(
            RUN_META_KEY.to_string(),
            serde_json::to_string(&meta).map_err(|e| ExportError::Output(e.to_string()))?,
        ));
        let perr = self.perr();
        let mut out = self.file.into_inner().map_err(perr)?;
        std::io::Write::flush(&mut out)?;
        drop(out);
        std::fs::rename(&self.part_path, &self.path).map_err(|e| {
            ExportError::Output(format!(
                "cannot rename {} to {}: {e}",
                self.part_path.display(),
                self.path.display()
            ))
        })?;
        Ok(self.path)
    }
}

/// A finished row group's column chunk writer, numeric or dictionary.
enum Chunk {
    Num(NumColumn),
    Dict(DictColumn),
}
