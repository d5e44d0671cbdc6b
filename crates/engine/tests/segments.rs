//! Segmented runs (docs/engine.md, "Continued runs"): a run asked to stop stops at a
//! resumable boundary and seals its parts; the next resumes after the last row it wrote.
//! The parts of all segments, in manifest order, are exactly the bytes of one
//! uninterrupted run. The template connector orders every table by `id` and reports
//! positions like a SQL connector with a primary key.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use fetcher_engine::memory::*;
use fetcher_engine::ports::{TableEncoder, TableFormat};
use fetcher_engine::*;
use serde_json::json;

/// `pg-a` (`public.a`, `a` rows) and `mongo-b` (`coll.b`, `b` rows), each ordered by `id`;
/// `keyed` says whether their connector reports positions.
async fn sources(h: &Harness, t: &TenantContext, a: i64, b: i64, keyed: bool) {
    let rows = |n: i64, tag: &str| -> Vec<Row> {
        (1..=n)
            .map(|i| row(&[("id", i.into()), ("v", format!("{tag}-{i}").into())]))
            .collect()
    };
    let behaviour = |table: &str, rows: Vec<Row>| TemplateBehaviour {
        rows: [(table.to_string(), rows)].into(),
        schema: schema(&[(table, &["id", "v"])]),
        key: keyed.then(|| "id".to_string()),
        ..Default::default()
    };
    add_source(h, t, "pg-a", behaviour("public.a", rows(a, "a"))).await;
    add_source(h, t, "mongo-b", behaviour("coll.b", rows(b, "b"))).await;
}

fn both() -> ExtractionRequest {
    request(&[
        ("pg-a", "public.a", &["id", "v"]),
        ("mongo-b", "coll.b", &["id", "v"]),
    ])
}

/// Runs `plan` in segments that are each asked to stop at once, until one finishes;
/// the finishing result and how many segments it took.
async fn in_segments(
    h: &Harness,
    plan: &ExtractionPlan,
    format: Option<Arc<dyn TableFormat>>,
) -> (ExtractionResult, usize) {
    let mut segment = Segment::default();
    for n in 1..=100 {
        segment.stop_at = Some(tokio::time::Instant::now());
        let r = h
            .engine
            .execute_segment(
                &ctx(),
                plan,
                format.clone(),
                &segment,
                &ExtractionProgress::default(),
            )
            .await
            .unwrap();
        match r.stopped {
            Some(s) => {
                assert!(r.reference.is_none());
                assert_ne!(
                    Some(&s.at),
                    segment.resume.as_ref(),
                    "every segment moves on"
                );
                segment.resume = Some(s.at);
                segment.earlier_parts.extend(s.parts);
            }
            None => return (r, n),
        }
    }
    panic!("no end after 100 segments");
}

fn stored(h: &Harness, path: &str) -> Vec<u8> {
    h.sink
        .get(path)
        .unwrap_or_else(|| panic!("no object {path}"))
}

#[tokio::test]
async fn segments_hold_exactly_the_bytes_of_one_run() {
    let h = harness(store_wiring(), TemplateBehaviour::default(), None);
    let t = tenant("acme").with_request_id("job-seg");
    sources(&h, &t, 3000, 2500, true).await;
    let plan = h.engine.plan_extraction(&ctx(), &t, &both()).await.unwrap();
    let whole = h
        .engine
        .execute_extraction_observed(&ctx(), &plan, &ExtractionProgress::default())
        .await
        .unwrap();
    let whole = stored(&h, &whole.reference.unwrap().path);
    assert_eq!(whole.iter().filter(|b| **b == b'\n').count(), 5500);

    let (done, segments) = in_segments(&h, &plan, None).await;
    // The template hands out 1024-row batches and a step stops after one: 3 + 3
    // segments, and a last that finds nothing after the last row (no part).
    assert_eq!(segments, 7);
    let reference = done.reference.unwrap();
    assert_eq!(reference.format, StoredFormat::Ndjson);
    assert_eq!(reference.row_count, 5500);
    assert_eq!(reference.parts.len(), 6);
    let mut joined = Vec::new();
    for p in &reference.parts {
        let bytes = stored(&h, &p.path);
        assert_eq!(p.sha256, sha256_hex(&bytes));
        assert_eq!(p.size_bytes, bytes.len() as i64);
        assert_eq!(
            p.row_count,
            bytes.iter().filter(|b| **b == b'\n').count() as i64
        );
        joined.extend(bytes);
    }
    assert_eq!(
        joined, whole,
        "the parts are the uninterrupted run's bytes, in order"
    );
    // Parts are labelled where they begin; the manifest lists them, with the totals.
    let labels: Vec<(&str, &str)> = reference
        .parts
        .iter()
        .map(|p| (p.config.as_str(), p.table.as_str()))
        .collect();
    assert_eq!(labels[0], ("mongo-b", "coll.b"));
    assert_eq!(labels[5], ("pg-a", "public.a"));
    let manifest: serde_json::Value = serde_json::from_slice(&stored(&h, &reference.path)).unwrap();
    assert_eq!(manifest["format"], "ndjson");
    assert_eq!(manifest["jobId"], "job-seg");
    assert_eq!(manifest["rowCount"], 5500);
    assert_eq!(manifest["parts"].as_array().unwrap().len(), 6);
    assert_eq!(
        reference.integrity.unwrap().digest,
        sha256_hex(&stored(&h, &reference.path))
    );
}

#[tokio::test]
async fn a_segment_that_neither_resumes_nor_stops_is_an_ordinary_run() {
    let h = harness(store_wiring(), TemplateBehaviour::default(), None);
    let t = tenant("acme").with_request_id("job-plain");
    sources(&h, &t, 1500, 10, true).await;
    let plan = h.engine.plan_extraction(&ctx(), &t, &both()).await.unwrap();
    let progress = ExtractionProgress::default();
    let whole = h
        .engine
        .execute_extraction_observed(&ctx(), &plan, &progress)
        .await
        .unwrap();
    let seg = h
        .engine
        .execute_segment(&ctx(), &plan, None, &Segment::default(), &progress)
        .await
        .unwrap();
    let (a, b) = (whole.reference.unwrap(), seg.reference.unwrap());
    assert!(seg.stopped.is_none() && b.parts.is_empty());
    assert_eq!(stored(&h, &a.path), stored(&h, &b.path));
    assert_eq!(a.integrity, b.integrity);
    // A stop asked for later than the run takes changes nothing either.
    let later = Segment {
        stop_at: Some(tokio::time::Instant::now() + Duration::from_secs(3600)),
        ..Segment::default()
    };
    let r = h
        .engine
        .execute_segment(&ctx(), &plan, None, &later, &progress)
        .await
        .unwrap();
    assert_eq!(stored(&h, &r.reference.unwrap().path), stored(&h, &a.path));
}

#[tokio::test]
async fn a_table_without_positions_is_read_whole_and_the_run_stops_after_it() {
    let h = harness(store_wiring(), TemplateBehaviour::default(), None);
    let t = tenant("acme").with_request_id("job-unkeyed");
    sources(&h, &t, 3000, 2500, false).await;
    let plan = h.engine.plan_extraction(&ctx(), &t, &both()).await.unwrap();
    let whole = h
        .engine
        .execute_extraction_observed(&ctx(), &plan, &ExtractionProgress::default())
        .await
        .unwrap();
    let whole = stored(&h, &whole.reference.unwrap().path);
    let (done, segments) = in_segments(&h, &plan, None).await;
    // Each table in one piece: a stop is only possible where the next one begins.
    assert_eq!(segments, 2);
    let parts = done.reference.unwrap().parts;
    let joined: Vec<u8> = parts.iter().flat_map(|p| stored(&h, &p.path)).collect();
    assert_eq!(joined, whole);
}

/// The error `segment` of `plan` ends with.
async fn refused(h: &Harness, plan: &ExtractionPlan, segment: &Segment) -> EngineError {
    h.engine
        .execute_segment(&ctx(), plan, None, segment, &ExtractionProgress::default())
        .await
        .unwrap_err()
}

#[tokio::test]
async fn out_of_time_in_a_table_that_cannot_stop_is_limit_exceeded_naming_it() {
    let big = TemplateBehaviour {
        generator: Some(RowGenerator {
            table: "public.big".into(),
            count: u64::MAX,
            make: Arc::new(|i| row(&[("id", (i as i64).into())])),
        }),
        schema: schema(&[("public.big", &["id"])]),
        ..Default::default()
    };
    let limits = Limits {
        timeout: Duration::from_millis(300),
        ..Limits::defaults()
    };
    let h = harness(store_wiring(), TemplateBehaviour::default(), Some(limits));
    let t = tenant("acme").with_request_id("job-big");
    add_source(&h, &t, "pg-big", big).await;
    let plan = h
        .engine
        .plan_extraction(&ctx(), &t, &request(&[("pg-big", "public.big", &["id"])]))
        .await
        .unwrap();
    let segment = Segment {
        stop_at: Some(tokio::time::Instant::now()),
        ..Segment::default()
    };
    let err = refused(&h, &plan, &segment).await;
    assert_eq!(err.category(), Category::LimitExceeded, "{err}");
    assert!(
        err.message()
            .contains("table 'pg-big.public.big' did not fit in one run"),
        "{err}"
    );
    assert_eq!(h.sink.stored_count(), 0, "nothing is left behind");
}

#[tokio::test]
async fn a_resume_point_outside_the_plan_is_refused() {
    let h = harness(store_wiring(), TemplateBehaviour::default(), None);
    let t = tenant("acme").with_request_id("job-bad-point");
    sources(&h, &t, 10, 10, true).await;
    let plan = h.engine.plan_extraction(&ctx(), &t, &both()).await.unwrap();
    for (config, table) in [("nope", "public.a"), ("pg-a", "public.nope")] {
        let segment = Segment {
            resume: Some(ResumePoint {
                config: config.into(),
                table: table.into(),
                after: Some(vec![json!(3)]),
            }),
            ..Segment::default()
        };
        let err = refused(&h, &plan, &segment).await;
        assert_eq!(err.category(), Category::Validation);
    }
}

/// A table format whose files are the rows' compact JSON lines (so NDJSON parts):
/// enough to see parts cut and continued without Parquet.
struct Lines;

struct LinesEncoder;

impl TableFormat for Lines {
    fn format(&self) -> StoredFormat {
        StoredFormat::Ndjson
    }

    fn encoder(&self, _: &str, _: &Arc<Columns>) -> Result<Box<dyn TableEncoder>> {
        Ok(Box::new(LinesEncoder))
    }
}

impl TableEncoder for LinesEncoder {
    fn push(&mut self, rows: &[Row], out: &mut Vec<u8>) -> Result<()> {
        for r in rows {
            out.extend(fetcher_engine::json::row_to_compact(r).unwrap());
            out.push(b'\n');
        }
        Ok(())
    }

    fn finish(self: Box<Self>, _: &mut Vec<u8>) -> Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn file_parts_are_cut_per_segment_and_table_and_join_to_one_runs_files() {
    let h = harness(store_wiring(), TemplateBehaviour::default(), None);
    let t = tenant("acme").with_request_id("job-parts");
    sources(&h, &t, 3000, 1100, true).await;
    let plan = h.engine.plan_extraction(&ctx(), &t, &both()).await.unwrap();
    let format: Arc<dyn TableFormat> = Arc::new(Lines);
    let whole = h
        .engine
        .execute_extraction_parts(&ctx(), &plan, format.clone(), &Default::default())
        .await
        .unwrap()
        .reference
        .unwrap();
    assert_eq!(whole.parts.len(), 2, "one file per table");
    let (done, segments) = in_segments(&h, &plan, Some(format)).await;
    assert_eq!(segments, 6);
    let reference = done.reference.unwrap();
    assert_eq!(reference.format, StoredFormat::Ndjson);
    for table in &whole.parts {
        let joined: Vec<u8> = reference
            .parts
            .iter()
            .filter(|p| p.config == table.config && p.table == table.table)
            .flat_map(|p| stored(&h, &p.path))
            .collect();
        assert_eq!(
            joined,
            stored(&h, &table.path),
            "{}.{}",
            table.config,
            table.table
        );
    }
    assert_eq!(reference.row_count, 4100);
    assert_eq!(reference.parts.len(), 5);
}
