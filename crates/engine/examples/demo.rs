//! Runs one extraction end to end on the in-memory ports and prints the result:
//!
//!     cargo run -p fetcher-engine --example demo
//!
//! Two datasources (`crm`, `billing`), a filter-free plan over both, executed in store
//! mode (NDJSON, as it streams to the sink) and in direct mode (indented JSON).

use fetcher_engine::memory::*;
use fetcher_engine::*;

fn table(rows: &[&[(&str, Value)]]) -> Vec<Row> {
    rows.iter()
        .map(|r| Row::from_pairs(r.iter().map(|(k, v)| (*k, v.clone()))))
        .collect()
}

fn source(name: &str, rows: Vec<Row>, fields: &[&str]) -> TemplateBehaviour {
    TemplateBehaviour {
        rows: [(name.to_string(), rows)].into(),
        schema: SchemaSnapshot {
            config_name: String::new(),
            tables: vec![TableSnapshot {
                name: name.into(),
                fields: fields.iter().map(|f| f.to_string()).collect(),
                ..Default::default()
            }],
            captured_at: None,
        },
        ..Default::default()
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<()> {
    let registry = MemoryRegistry::new();
    registry.register(
        DatasourceType::Postgresql,
        TemplateFactory::new(source(
            "public.accounts",
            table(&[
                &[
                    ("id", 1.into()),
                    ("name", "Ada Lovelace".into()),
                    ("tier", "gold".into()),
                ],
                &[
                    ("id", 2.into()),
                    ("name", "Grace Hopper".into()),
                    ("tier", Value::Null),
                ],
            ]),
            &["id", "name", "tier"],
        )),
    );
    registry.register(
        DatasourceType::SqlServer,
        TemplateFactory::new(source(
            "public.invoices",
            table(&[&[
                ("id", 10.into()),
                ("account_id", 1.into()),
                ("total", "1234.5000".into()),
            ]]),
            &["id", "account_id", "total"],
        )),
    );
    let sink = MemoryResultSink::new();
    let engine = Engine::builder()
        .connector_registry(registry)
        .connection_store(MemoryConnectionStore::new())
        .result_sink(sink.clone())
        .build()?;

    let ctx = Context::background();
    let tenant = TenantContext::new("demo")?.with_request_id("job-1");
    for (name, ty) in [
        ("crm", DatasourceType::Postgresql),
        ("billing", DatasourceType::SqlServer),
    ] {
        let input = ConnectionInput {
            config_name: name.into(),
            datasource_type: ty,
            ..Default::default()
        };
        engine.create_connection(&ctx, &tenant, &input).await?;
    }
    let mut request = ExtractionRequest::default();
    request.mapped_fields.insert(
        "crm".into(),
        [(
            "public.accounts".into(),
            vec!["id".into(), "name".into(), "tier".into()],
        )]
        .into(),
    );
    request.mapped_fields.insert(
        "billing".into(),
        [("public.invoices".into(), vec!["id".into(), "total".into()])].into(),
    );
    let plan = engine.plan_extraction(&ctx, &tenant, &request).await?;

    let stored = engine.execute_extraction(&ctx, &plan).await?;
    let reference = stored.reference.expect("store mode");
    println!(
        "== store mode: {} rows, {} bytes, sha256 {}",
        reference.row_count,
        reference.size_bytes,
        reference.integrity.unwrap().digest
    );
    print!(
        "{}",
        String::from_utf8_lossy(&sink.get(&reference.path).unwrap_or_default())
    );

    let direct = engine
        .execute_extraction(
            &ctx,
            &ExtractionPlan {
                mode: ExecutionMode::Direct,
                ..plan
            },
        )
        .await?;
    let direct = direct.direct.expect("direct mode");
    println!(
        "== direct mode: {} rows, sha256 {}",
        direct.row_count,
        direct.integrity.unwrap().digest
    );
    println!("{}", String::from_utf8_lossy(&direct.data));
    Ok(())
}
