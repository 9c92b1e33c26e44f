//! `tidemark demo`: the whole pipeline with nothing installed.
//!
//! librdkafka's in-process mock cluster stands in for Kafka here and only here: it has no
//! LogAppendTime (the producer's timestamps are used), no transactions, and keeps only the
//! last 5 MB / 100k records of each partition, so nothing in the test suite relies on it.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use rdkafka::mocking::MockCluster;
use rdkafka::producer::DefaultProducerContext;
use rust_decimal::Decimal;
use tidemark_state::{codec, PartitionId};
use tidemark_topology::config;

use crate::cli::{DemoArgs, GenArgs, KafkaArgs};
use crate::cmd::{gen, query};
use crate::engine::outbox::OutboxRow;
use crate::engine::Stats;
use crate::kafka::admin;
use crate::kafka::reader::read_topic;
use crate::kafka::KafkaSettings;
use crate::tasks::SKU_REPARTITION;
use crate::{actions, status, stream};

/// Where the example topology the demo runs lives in the repository.
const EXAMPLE_PATH: &str = "topology/examples/orders.toml";
/// Long enough for the shadow audits of a large run on a slow machine.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(60);

pub fn run(args: DemoArgs) -> anyhow::Result<()> {
    let topology = config::parse(config::EXAMPLE, "topology/examples/orders.toml")?;
    let mock: MockCluster<'static, DefaultProducerContext> = MockCluster::new(1).context("starting mock cluster")?;
    // Every topic of the topology, from the list `tidemark topics` creates.
    for (spec, _) in admin::topology_topics(&topology) {
        mock.create_topic(&spec.topic, spec.partitions, 1).with_context(|| format!("creating {}", spec.topic))?;
    }
    let settings = KafkaSettings::new(&mock.bootstrap_servers());
    eprintln!(
        "demo: mock Kafka at {}; generating {} order records (seed {})",
        settings.bootstrap, args.events, args.seed
    );
    let _ = std::fs::remove_dir_all(&args.state_dir);

    let stop = Arc::new(AtomicBool::new(false));
    let generated = Arc::new(AtomicBool::new(false));
    let stats = Arc::new(Stats::default());
    let gen_args = GenArgs {
        seed: args.seed,
        events: args.events,
        rate: args.rate,
        start: "now".into(),
        spike: None,
        late_fraction: 0.02,
        max_lateness: Duration::from_secs(6 * 3600),
        dup_fraction: 0.01,
        malformed_fraction: 0.001,
        v2_fraction: 0.5,
        skus: 2000,
        stores: 12,
        open_orders: 50_000,
        inventory_every: 1000,
        event_bytes: 512,
        out: None,
        orders_topic: topology.orders.topic.clone(),
        inventory_topic: topology.inventory.topic.clone(),
        paced: true,
        kafka: KafkaArgs { bootstrap: settings.bootstrap.clone(), kafka_option: Vec::new(), kafka_config: None },
    };
    let producer_settings = settings.clone();
    let done = Arc::clone(&generated);
    let assigned = Arc::clone(&stats);
    let producer = std::thread::spawn(move || {
        // The mock cluster keeps only the last 5 MB of each partition: start producing once
        // the processor is consuming, and pace it, so nothing is truncated before it is read.
        while assigned.assigned.load(Ordering::Relaxed) == 0 {
            std::thread::sleep(Duration::from_millis(50));
        }
        let result = gen::run(gen_args, &producer_settings);
        done.store(true, Ordering::Relaxed);
        result
    });

    let mut opts = stream::StreamOptions {
        settings: settings.clone(),
        topology: topology.clone(),
        state_dir: args.state_dir.clone(),
        group_id: "tidemark-demo".into(),
        instance_id: None,
        stop: Arc::clone(&stop),
        stats: Arc::clone(&stats),
        exit_at_end: Some(generated),
        drain_timeout: DRAIN_TIMEOUT,
        accept_gaps: false,
        progress: Arc::new(crate::telemetry::Progress::default()),
        rows: None,
        store: None,
        sku_owned: Default::default(),
        static_assignment: None,
        snapshots: None,
        handover: None,
        gate: None,
        session_timeout: Duration::from_secs(30),
        standbys: None,
        warmup_timeout: Duration::ZERO,
        recall: None,
        lifecycle: Arc::default(),
        memtable_budget_bytes: tidemark_state::DEFAULT_MEMTABLE_BUDGET_BYTES,
        threads: stream::default_threads(),
        repartition_packing: true,
    };
    // The action runtime, as in `tidemark run`: the example rules are in shadow mode, so their
    // rows are audited to the audit topic and never sent.
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build()?;
    let store = stream::open_store(&opts)?;
    let runtime = actions::spawn(&rt, &settings, &topology, Arc::clone(&store), Arc::clone(&stop), Arc::clone(&stats))?;
    opts.rows = Some(runtime.rows);
    opts.sku_owned = runtime.owned;
    opts.gate = Some(Arc::clone(&runtime.gate));
    opts.store = Some(Arc::clone(&store));
    let printer = status::spawn_printer(Arc::clone(&stats), Arc::clone(&stop), Duration::from_secs(1));
    let started = Instant::now();
    let result = stream::run(opts);
    stop.store(true, Ordering::Relaxed);
    let _ = printer.join();
    producer.join().map_err(|_| anyhow::anyhow!("generator thread panicked"))??;
    match result {
        Err(e) if e.is::<stream::DrainTimeout>() => eprintln!("demo: {e}"),
        other => other?,
    }
    eprintln!("demo: {}", status::summary(&stats, started.elapsed()));

    let partials = query::latest_partials(&settings, &topology.dashboard.topic)?;
    let totals = query::combine(partials.values());
    let mut by_currency: BTreeMap<String, (u64, Decimal, Decimal)> = BTreeMap::new();
    for t in &totals {
        let e = by_currency.entry(t.currency.clone()).or_default();
        e.0 += t.figures.orders;
        e.1 += t.figures.gross;
        e.2 += t.net;
    }
    eprintln!(
        "demo: dashboard topic holds {} windows ({} partials); totals per currency:",
        totals.len(),
        partials.len()
    );
    for (currency, (orders, gross, net)) in by_currency {
        eprintln!("  {currency}: {orders} orders, gross {gross}, net {net}");
    }
    let mut summary = status::ActionSummary::default();
    for partition in 0..topology.sku_repartition.partitions {
        let id = PartitionId { source: SKU_REPARTITION, partition };
        for (_, bytes) in store.outbox_scan(id)? {
            summary.add(&codec::decode::<OutboxRow>("outbox row", &bytes)?);
        }
    }
    let audited = read_topic(&settings, &topology.audit.topic)?.len();
    for line in summary.lines(&topology.audit.topic, audited) {
        eprintln!("demo: {line}");
    }
    let day = chrono::Utc::now().with_timezone(&topology.finance_time_zone).date_naive();
    eprintln!(
        "demo: look further (the mock cluster ends with the demo: on a real broker, `tidemark topics`, `gen` and `run` \
         with --topology {EXAMPLE_PATH} first):\n  \
         tidemark query dashboard --topology {EXAMPLE_PATH} --store tokyo-01\n  \
         tidemark batch close --topology {EXAMPLE_PATH} --business-day {day}\n  \
         audit records (key = idempotency key) are in topic {}; failed actions in {}",
        topology.audit.topic, topology.action_dead_letter.topic
    );
    Ok(())
}
