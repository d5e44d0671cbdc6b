use super::*;
use fetcher_engine::Columns;

#[test]
fn temporal_texts_parse_exactly() {
    assert_eq!(text::date("1970-01-01T00:00:00Z"), Some(0));
    assert_eq!(text::date("2024-02-29T00:00:00Z"), Some(19782));
    assert_eq!(text::date("-0043-03-15T00:00:00Z"), Some(-735_160));
    assert_eq!(text::date("+12345-06-07T00:00:00Z"), Some(3_789_548));
    assert_eq!(text::date("infinity"), Some(i32::MAX));
    assert_eq!(text::date("0000-00-00"), None);
    assert_eq!(text::date("2023-02-29T00:00:00Z"), None);
    assert_eq!(text::timestamp("1970-01-01T00:00:01.5Z"), Some(1_500_000));
    assert_eq!(text::timestamp("1969-12-31T23:59:59.999999Z"), Some(-1));
    assert_eq!(text::timestamp("-infinity"), Some(i64::MIN));
    // PostgreSQL's range passes i64 microseconds since 1970 in year 294247.
    assert_eq!(
        text::timestamp("+294247-01-10T04:00:54.775806Z"),
        Some(i64::MAX - 1)
    );
    assert_eq!(text::timestamp("+294247-01-10T04:00:54.775807Z"), None);
    assert_eq!(text::timestamp("0000-00-00 00:00:00"), None);
    assert_eq!(text::time_of_day("23:59:59.000001"), Some(86_399_000_001));
    assert_eq!(text::time_of_day("24:00:00"), None);
    assert_eq!(text::time_of_day("-838:59:59"), None);
}

#[test]
fn decimal_texts_keep_their_scale() {
    assert_eq!(
        text::decimal_digits("1500.00", 15, 2),
        Some((false, "150000".into()))
    );
    assert_eq!(
        text::decimal_digits("-0.5", 4, 2),
        Some((true, "50".into()))
    );
    assert_eq!(
        text::decimal_digits("-0.00", 4, 2),
        Some((false, "0".into()))
    );
    assert_eq!(
        text::decimal_digits("12", 4, 2),
        Some((false, "1200".into()))
    );
    assert_eq!(text::decimal_digits("123.456", 6, 2), None);
    assert_eq!(text::decimal_digits("NaN", 6, 2), None);
    assert_eq!(text::decimal_digits("99999", 4, 0), None);
}

fn encode(columns: &Arc<Columns>, rows: &[Row], group: usize) -> Result<Vec<u8>> {
    let mut enc: Box<dyn TableEncoder> = Box::new(ParquetEncoder::new(columns, group)?);
    let mut out = Vec::new();
    for chunk in rows.chunks(100) {
        enc.push(chunk, &mut out)?;
    }
    enc.finish(&mut out)?;
    Ok(out)
}

fn sample(n: i64) -> (Arc<Columns>, Vec<Row>) {
    let columns = Columns::typed([
        ("id", ColumnType::Int64),
        (
            "amount",
            ColumnType::Decimal {
                precision: 15,
                scale: 2,
            },
        ),
        ("at", ColumnType::TimestampTz),
        ("u", ColumnType::Uuid),
        ("doc", ColumnType::Json),
        ("note", ColumnType::Text),
    ]);
    let rows = (0..n)
        .map(|i| {
            Row::new(
                columns.clone(),
                vec![
                    Value::Int(i),
                    Value::String(format!("{i}.25")),
                    Value::String(format!("2024-01-01T00:00:{:02}Z", i % 60)),
                    Value::String("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11".into()),
                    Value::Json(format!("{{\"k\":{i}}}").into_boxed_str()),
                    if i % 3 == 0 {
                        Value::Null
                    } else {
                        Value::String(format!("row {i}"))
                    },
                ],
            )
        })
        .collect();
    (columns, rows)
}

#[test]
fn the_same_rows_give_the_same_bytes_and_row_groups_are_cut_by_size() {
    let (columns, rows) = sample(5000);
    let a = encode(&columns, &rows, 16 * 1024).unwrap();
    let b = encode(&columns, &rows, 16 * 1024).unwrap();
    assert_eq!(a, b);
    assert_eq!(&a[..4], b"PAR1");
    assert_eq!(&a[a.len() - 4..], b"PAR1");
    let reader = parquet::file::reader::SerializedFileReader::new(bytes_of(a)).unwrap();
    use parquet::file::reader::FileReader;
    let meta = reader.metadata();
    assert_eq!(meta.file_metadata().num_rows(), 5000);
    assert!(
        meta.num_row_groups() > 1,
        "cut by size: {}",
        meta.num_row_groups()
    );
    let created_by = meta.file_metadata().created_by().unwrap_or_default();
    assert!(created_by.starts_with("parquet-rs"), "{created_by}");
}

fn bytes_of(v: Vec<u8>) -> bytes::Bytes {
    bytes::Bytes::from(v)
}

#[test]
fn a_value_its_type_cannot_hold_fails_as_validation_without_the_value() {
    let columns = Columns::typed([("d", ColumnType::Date)]);
    let row = Row::new(columns.clone(), vec![Value::String("0000-00-00".into())]);
    let e = encode(&columns, &[row], 1 << 20).unwrap_err();
    assert_eq!(e.category(), Category::Validation);
    assert_eq!(
        e.message(),
        format!("{}: column 'd'", msg::VALUE_NOT_REPRESENTABLE)
    );
    assert!(!e.to_string().contains("0000"));
    let columns = Columns::typed([("n", ColumnType::Int32)]);
    let row = Row::new(columns.clone(), vec![Value::Int(i64::from(i32::MAX) + 1)]);
    assert_eq!(
        encode(&columns, &[row], 1 << 20).unwrap_err().category(),
        Category::Validation
    );
}

#[test]
fn an_empty_table_is_a_valid_file_with_its_schema() {
    let (columns, _) = sample(0);
    let bytes = encode(&columns, &[], 1 << 20).unwrap();
    let reader = parquet::file::reader::SerializedFileReader::new(bytes_of(bytes)).unwrap();
    use parquet::file::reader::FileReader;
    let schema = reader.metadata().file_metadata().schema_descr();
    assert_eq!(schema.num_columns(), 6);
    assert_eq!(
        schema.column(3).logical_type_ref(),
        Some(&parquet::basic::LogicalType::Uuid)
    );
    assert_eq!(
        schema.column(4).logical_type_ref(),
        Some(&parquet::basic::LogicalType::Json)
    );
}
