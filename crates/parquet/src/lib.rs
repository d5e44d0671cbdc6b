//! # fetcher-parquet
//!
//! The Parquet result format: the engine's [`TableFormat`] port, one file per
//! `(config, table)`, typed from the datasource's catalog ([`ColumnType`]) and written in
//! bounded memory. The engine stays free of Arrow: it hands each table's rows to a
//! [`ParquetEncoder`] on the step's task and streams the bytes it gets back into a
//! sealed part (docs/results.md, "Parquet results").
//!
//! ## Module map
//!
//! | item | what it does |
//! |---|---|
//! | [`ParquetFormat`] | the port: settings (row-group size) and encoder factory |
//! | [`arrow_field`] | the Arrow/Parquet type of a catalog type (docs/parquet.md) |
//! | `convert` | a column of [`Value`]s into an Arrow array, value by value |
//! | `text` | the NDJSON texts of dates, times, decimals and UUIDs, parsed back exactly |
//!
//! ## Error policy
//!
//! A value its column's type cannot hold (a MySQL zero date in a `DATE` column, SQLite
//! text in an `INTEGER` column, PostgreSQL `NaN` in a `numeric(p, s)`) fails the table
//! with `validation` / [`msg::VALUE_NOT_REPRESENTABLE`], followed by `: column
//! '<table>.<column>'` (the names, never the value): deterministic, so not retried,
//! and never a silent change (NDJSON carries every value). A failure of the Parquet
//! writer itself is `internal` / [`msg::SERIALIZE_FAILED`], its text kept as the hidden
//! cause. No value ever appears in an error.
//!
//! ## Determinism
//!
//! The same rows give the same bytes: the writer's metadata holds no time stamps or
//! random ids (`created_by` names the writer's version), and row groups are cut by size
//! at the same rows every time.

mod convert;
mod text;

use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::extension::{Json, Uuid};
use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
use fetcher_engine::error::msg;
use fetcher_engine::ports::{TableEncoder, TableFormat};
use fetcher_engine::{Category, ColumnType, Columns, EngineError, Result, Row, Value};
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;

/// The Parquet format with its settings.
#[derive(Debug, Clone)]
pub struct ParquetFormat {
    row_group_bytes: usize,
}

impl ParquetFormat {
    /// Row groups are cut when the writer's buffered row group holds this much memory:
    /// each running step holds at most one such group (README, "Benchmarks", has the
    /// peak RSS this gives).
    pub const DEFAULT_ROW_GROUP_BYTES: usize = 4 * 1024 * 1024;

    pub fn new() -> Self {
        ParquetFormat {
            row_group_bytes: Self::DEFAULT_ROW_GROUP_BYTES,
        }
    }

    /// A smaller or larger row-group cut (tests use tiny ones).
    pub fn with_row_group_bytes(bytes: usize) -> Self {
        ParquetFormat {
            row_group_bytes: bytes.max(1),
        }
    }
}

impl Default for ParquetFormat {
    fn default() -> Self {
        Self::new()
    }
}

impl TableFormat for ParquetFormat {
    fn format(&self) -> fetcher_engine::StoredFormat {
        fetcher_engine::StoredFormat::Parquet
    }

    fn encoder(&self, table: &str, columns: &Arc<Columns>) -> Result<Box<dyn TableEncoder>> {
        Ok(Box::new(
            ParquetEncoder::new(columns, self.row_group_bytes)?.in_table(table),
        ))
    }
}

/// The Arrow field of a catalog type: what the column is in the Parquet file
/// (docs/parquet.md has the table). Every column is nullable.
pub fn arrow_field(name: &str, ty: ColumnType) -> Field {
    let data_type = match ty {
        ColumnType::Bool => DataType::Boolean,
        ColumnType::Int8 => DataType::Int8,
        ColumnType::Int16 => DataType::Int16,
        ColumnType::Int32 => DataType::Int32,
        ColumnType::Int64 => DataType::Int64,
        ColumnType::UInt8 => DataType::UInt8,
        ColumnType::UInt16 => DataType::UInt16,
        ColumnType::UInt32 => DataType::UInt32,
        ColumnType::UInt64 => DataType::UInt64,
        ColumnType::Float32 => DataType::Float32,
        ColumnType::Float64 => DataType::Float64,
        ColumnType::Decimal { precision, scale } if precision <= 38 => {
            DataType::Decimal128(precision, scale as i8)
        }
        ColumnType::Decimal { precision, scale } => DataType::Decimal256(precision, scale as i8),
        ColumnType::Bytes => DataType::Binary,
        ColumnType::Uuid => DataType::FixedSizeBinary(16),
        ColumnType::Date => DataType::Date32,
        ColumnType::Time => DataType::Time64(TimeUnit::Microsecond),
        ColumnType::Timestamp => DataType::Timestamp(TimeUnit::Microsecond, None),
        ColumnType::TimestampTz => DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
        ColumnType::Text | ColumnType::Json | ColumnType::Unknown => DataType::Utf8,
    };
    let field = Field::new(name, data_type, true);
    match ty {
        ColumnType::Uuid => field.with_extension_type(Uuid),
        ColumnType::Json => field.with_extension_type(Json::default()),
        _ => field,
    }
}

fn not_representable() -> EngineError {
    EngineError::new(Category::Validation, msg::VALUE_NOT_REPRESENTABLE)
}

/// [`not_representable`] naming where: `…: column 'orders.total'` (the caller's own
/// names; the value never appears).
fn not_representable_in(table: &str, column: &str) -> EngineError {
    let at = if table.is_empty() {
        column.to_owned()
    } else {
        format!("{table}.{column}")
    };
    EngineError::new(
        Category::Validation,
        format!("{}: column '{at}'", msg::VALUE_NOT_REPRESENTABLE),
    )
}

fn writer_failed(e: impl std::error::Error + Send + Sync + 'static) -> EngineError {
    EngineError::wrap(Category::Internal, msg::SERIALIZE_FAILED, e)
}

/// One table's Parquet file being written.
pub struct ParquetEncoder {
    schema: SchemaRef,
    /// Per Parquet column: its catalog type and the row position it is read from
    /// (repeated column names are written once, the first, as NDJSON does).
    columns: Vec<(ColumnType, usize)>,
    /// The table, for errors.
    table: String,
    writer: ArrowWriter<Vec<u8>>,
    row_group_bytes: usize,
}

impl ParquetEncoder {
    pub fn new(columns: &Columns, row_group_bytes: usize) -> Result<Self> {
        let mut fields = Vec::with_capacity(columns.len());
        let mut plan = Vec::with_capacity(columns.len());
        for (i, (name, ty)) in columns.names().iter().zip(columns.types()).enumerate() {
            if columns.names()[..i].contains(name) {
                continue;
            }
            fields.push(arrow_field(name, *ty));
            plan.push((*ty, i));
        }
        let schema: SchemaRef = Arc::new(Schema::new(fields));
        let props = WriterProperties::builder()
            .set_compression(Compression::SNAPPY)
            .build();
        let writer =
            ArrowWriter::try_new(Vec::new(), schema.clone(), Some(props)).map_err(writer_failed)?;
        Ok(ParquetEncoder {
            schema,
            columns: plan,
            table: String::new(),
            writer,
            row_group_bytes,
        })
    }

    /// The encoder of table `table`, named in its errors.
    pub fn in_table(mut self, table: &str) -> Self {
        self.table = table.to_owned();
        self
    }

    /// Moves what the writer has finished into `out`, so its buffer stays small. The
    /// writer counts positions itself; taking bytes out of its sink does not disturb it.
    fn drain(&mut self, out: &mut Vec<u8>) {
        let inner = self.writer.inner_mut();
        out.extend_from_slice(inner);
        inner.clear();
    }
}

impl TableEncoder for ParquetEncoder {
    fn push(&mut self, rows: &[Row], out: &mut Vec<u8>) -> Result<()> {
        if rows.is_empty() {
            return Ok(());
        }
        let arrays = self
            .columns
            .iter()
            .zip(self.schema.fields())
            .map(|((ty, at), field)| {
                let values = rows
                    .iter()
                    .map(|r| r.values().get(*at).unwrap_or(&Value::Null));
                convert::array(*ty, field.data_type(), values, rows.len()).map_err(|e| {
                    match e.category() {
                        Category::Validation => not_representable_in(&self.table, field.name()),
                        _ => e,
                    }
                })
            })
            .collect::<Result<Vec<ArrayRef>>>()?;
        let batch = if arrays.is_empty() {
            // A table read with no columns still has its rows.
            let options = arrow_array::RecordBatchOptions::new().with_row_count(Some(rows.len()));
            RecordBatch::try_new_with_options(self.schema.clone(), arrays, &options)
        } else {
            RecordBatch::try_new(self.schema.clone(), arrays)
        }
        .map_err(writer_failed)?;
        self.writer.write(&batch).map_err(writer_failed)?;
        // The writer's own size cut (`max_row_group_bytes`) counts encoded pages only, so
        // a row group of dictionary-encoded columns grows past it: cut on what the
        // buffered row group actually holds in memory.
        if self.writer.memory_size() >= self.row_group_bytes {
            self.writer.flush().map_err(writer_failed)?;
        }
        self.drain(out);
        Ok(())
    }

    fn finish(mut self: Box<Self>, out: &mut Vec<u8>) -> Result<()> {
        self.writer.finish().map_err(writer_failed)?;
        self.drain(out);
        Ok(())
    }
}

#[cfg(test)]
mod tests;
