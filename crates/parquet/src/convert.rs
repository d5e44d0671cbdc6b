//! A column of [`Value`]s (as the connectors produce them for NDJSON, docs/encodings.md)
//! into the Arrow array of its catalog type. Every conversion is exact or refused: a
//! value the type cannot hold fails with [`not_representable`].

use std::sync::Arc;

use arrow_array::ArrayRef;
use arrow_array::builder::*;
use arrow_array::types::*;
use arrow_buffer::i256;
use arrow_schema::DataType;
use fetcher_engine::{ColumnType, Result, Value};

use crate::text;
use crate::{not_representable, writer_failed};

/// Builds the array of one column.
pub fn array<'a>(
    ty: ColumnType,
    data_type: &DataType,
    values: impl Iterator<Item = &'a Value>,
    len: usize,
) -> Result<ArrayRef> {
    Ok(match ty {
        ColumnType::Bool => {
            let mut b = BooleanBuilder::with_capacity(len);
            for v in values {
                match v {
                    Value::Null => b.append_null(),
                    Value::Bool(x) => b.append_value(*x),
                    _ => return Err(not_representable()),
                }
            }
            Arc::new(b.finish())
        }
        ColumnType::Int8 => ints::<Int8Type>(values, len)?,
        ColumnType::Int16 => ints::<Int16Type>(values, len)?,
        ColumnType::Int32 => ints::<Int32Type>(values, len)?,
        ColumnType::Int64 => ints::<Int64Type>(values, len)?,
        ColumnType::UInt8 => ints::<UInt8Type>(values, len)?,
        ColumnType::UInt16 => ints::<UInt16Type>(values, len)?,
        ColumnType::UInt32 => ints::<UInt32Type>(values, len)?,
        ColumnType::UInt64 => ints::<UInt64Type>(values, len)?,
        ColumnType::Float32 => {
            let mut b = Float32Builder::with_capacity(len);
            let mut text = String::new();
            for v in values {
                match v {
                    Value::Null => b.append_null(),
                    // The connector printed the 4-byte float's shortest form and parsed
                    // it as a double; printing that double again gives the same short
                    // text, and parsing it as a 4-byte float gives the original bits.
                    Value::Float(x) => {
                        use std::fmt::Write as _;
                        text.clear();
                        let _ = write!(text, "{x}");
                        b.append_value(text.parse::<f32>().map_err(|_| not_representable())?)
                    }
                    other => b.append_value(special_float(other)? as f32),
                }
            }
            Arc::new(b.finish())
        }
        ColumnType::Float64 => {
            let mut b = Float64Builder::with_capacity(len);
            for v in values {
                match v {
                    Value::Null => b.append_null(),
                    Value::Float(x) => b.append_value(*x),
                    other => b.append_value(special_float(other)?),
                }
            }
            Arc::new(b.finish())
        }
        ColumnType::Decimal { precision, scale } if precision <= 38 => {
            let mut b = Decimal128Builder::with_capacity(len);
            for v in values {
                match v {
                    Value::Null => b.append_null(),
                    Value::String(s) => {
                        let (negative, digits) = text::decimal_digits(s, precision, scale)
                            .ok_or_else(not_representable)?;
                        let n: i128 = digits.parse().map_err(|_| not_representable())?;
                        b.append_value(if negative { -n } else { n });
                    }
                    _ => return Err(not_representable()),
                }
            }
            Arc::new(
                b.finish()
                    .with_precision_and_scale(precision, scale as i8)
                    .map_err(writer_failed)?,
            )
        }
        ColumnType::Decimal { precision, scale } => {
            let mut b = Decimal256Builder::with_capacity(len);
            for v in values {
                match v {
                    Value::Null => b.append_null(),
                    Value::String(s) => {
                        let (negative, digits) = text::decimal_digits(s, precision, scale)
                            .ok_or_else(not_representable)?;
                        let n = i256::from_string(&digits).ok_or_else(not_representable)?;
                        b.append_value(if negative { n.wrapping_neg() } else { n });
                    }
                    _ => return Err(not_representable()),
                }
            }
            Arc::new(
                b.finish()
                    .with_precision_and_scale(precision, scale as i8)
                    .map_err(writer_failed)?,
            )
        }
        ColumnType::Bytes => {
            let mut b = BinaryBuilder::with_capacity(len, len * 16);
            for v in values {
                match v {
                    Value::Null => b.append_null(),
                    Value::Bytes(x) => b.append_value(x),
                    _ => return Err(not_representable()),
                }
            }
            Arc::new(b.finish())
        }
        ColumnType::Uuid => {
            let mut b = FixedSizeBinaryBuilder::with_capacity(len, 16);
            for v in values {
                match v {
                    Value::Null => b.append_null(),
                    Value::String(s) => b
                        .append_value(text::uuid(s).ok_or_else(not_representable)?)
                        .map_err(writer_failed)?,
                    _ => return Err(not_representable()),
                }
            }
            Arc::new(b.finish())
        }
        ColumnType::Date => Arc::new(parsed::<Date32Type>(values, len, text::date)?),
        ColumnType::Time => Arc::new(parsed::<Time64MicrosecondType>(
            values,
            len,
            text::time_of_day,
        )?),
        ColumnType::Timestamp | ColumnType::TimestampTz => Arc::new(
            parsed::<TimestampMicrosecondType>(values, len, text::timestamp)?
                .with_data_type(data_type.clone()),
        ),
        ColumnType::Json => {
            let mut b = StringBuilder::with_capacity(len, len * 32);
            for v in values {
                match v {
                    Value::Null => b.append_null(),
                    other => b.append_value(json_text(other)?),
                }
            }
            Arc::new(b.finish())
        }
        ColumnType::Text | ColumnType::Unknown => {
            let mut b = StringBuilder::with_capacity(len, len * 16);
            for v in values {
                match v {
                    Value::Null => b.append_null(),
                    Value::String(s) => b.append_value(s),
                    // Text that is not UTF-8 is Base64 in NDJSON; the same string here.
                    Value::Bytes(x) => b.append_value(fetcher_engine::json::base64(x)),
                    // A value of a type with no typed column (an interval as a number, a
                    // PostgreSQL array read as text, …): its NDJSON text.
                    other => b.append_value(json_text(other)?),
                }
            }
            Arc::new(b.finish())
        }
    })
}

/// A temporal column from its NDJSON texts (docs/encodings.md), parsed by `parse`.
fn parsed<'a, T: arrow_array::ArrowPrimitiveType>(
    values: impl Iterator<Item = &'a Value>,
    len: usize,
    parse: impl Fn(&str) -> Option<T::Native>,
) -> Result<arrow_array::PrimitiveArray<T>> {
    let mut b = PrimitiveBuilder::<T>::with_capacity(len);
    for v in values {
        match v {
            Value::Null => b.append_null(),
            Value::String(s) => b.append_value(parse(s).ok_or_else(not_representable)?),
            _ => return Err(not_representable()),
        }
    }
    Ok(b.finish())
}

/// An integer column: exact, within the Parquet type's range.
fn ints<'a, T>(values: impl Iterator<Item = &'a Value>, len: usize) -> Result<ArrayRef>
where
    T: arrow_array::ArrowPrimitiveType,
    T::Native: TryFrom<i64> + TryFrom<u64>,
{
    let mut b = PrimitiveBuilder::<T>::with_capacity(len);
    for v in values {
        match v {
            Value::Null => b.append_null(),
            Value::Int(x) => {
                b.append_value(T::Native::try_from(*x).map_err(|_| not_representable())?)
            }
            Value::UInt(x) => {
                b.append_value(T::Native::try_from(*x).map_err(|_| not_representable())?)
            }
            _ => return Err(not_representable()),
        }
    }
    Ok(Arc::new(b.finish()))
}

/// The tagged strings of NaN and the infinities (docs/encodings.md) as the floats they
/// name; integers that a double holds exactly (SQLite may store one in a `REAL` column).
fn special_float(v: &Value) -> Result<f64> {
    match v {
        Value::String(s) if s == "NaN" => Ok(f64::NAN),
        Value::String(s) if s == "Infinity" => Ok(f64::INFINITY),
        Value::String(s) if s == "-Infinity" => Ok(f64::NEG_INFINITY),
        Value::Int(i) if i.unsigned_abs() <= 1 << 53 => Ok(*i as f64),
        _ => Err(not_representable()),
    }
}

/// A value's compact JSON text, as NDJSON embeds it.
fn json_text(v: &Value) -> Result<String> {
    let bytes = fetcher_engine::json::to_compact(v).map_err(|_| not_representable())?;
    String::from_utf8(bytes).map_err(|_| not_representable())
}
