package tidemark.bench;

import org.HdrHistogram.Histogram;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.Topology;

import java.io.FileWriter;
import java.io.IOException;
import java.io.PrintWriter;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Semaphore;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.stream.Collectors;

/**
 * Kafka Streams baseline of the tidemark topology. Settings come from flags `--key value`:
 *
 * <pre>
 *   --bootstrap 127.0.0.1:9092  --app-id ks-bench  --orders orders  --prefix ks-bench
 *   --partitions 4  --guarantee at_least_once|exactly_once_v2  --commit-ms 200
 *   --threads 2  --cache-mb 64  --state-dir /tmp/ks-state
 *   --action-url http://127.0.0.1:18080/actions   (unset: actions are produced but not POSTed)
 *   --min-units 50 --factor 3.0 --baseline-windows 15 --window-ms 60000 --grace-ms 120000
 *   --retention-ms 25200000 --dedup-retention-ms 604800000
 *   --exit-at-end   (exit once the orders and repartition topics are fully committed)
 *   --latency-out FILE  (JSON lines: per-second append-&gt;2xx percentiles of actions)
 *   --instance-id ID    static group membership, as tidemark's `--instance-id` (StatefulSet pod
 *                       name): the stream threads' consumers get group.instance.id ID-&lt;thread&gt;
 *                       (Kafka Streams appends the thread index), the dispatcher's ID-dispatch,
 *                       so a restarted instance takes its partitions back at once instead of
 *                       waiting for the killed member's session to time out (unset: dynamic)
 *   --lag-out FILE      (JSON lines, once a second: the application's committed offsets and the
 *                       end offsets, summed over the partitions of the orders and the repartition
 *                       topic: {"t","orders_committed","orders_end","repartition_committed","repartition_end"})
 *   --standby N         num.standby.replicas (default 0, the Kafka Streams default)
 *   --session-timeout-ms MS  session.timeout.ms of the stream threads' consumers and the
 *                       dispatcher's (heartbeat.interval.ms = MS / 3); unset: the client default
 *   --task-log          stderr line `[ks] t=EPOCH_MS tasks active=TOPIC:P,... standby=TOPIC:P,...`
 *                       whenever this instance's task assignment changes (checked every 200 ms;
 *                       the input partitions of its active and standby tasks)
 * </pre>
 *
 * <p>Stderr also gets `[ks] t=EPOCH_MS state OLD -&gt; NEW` for every client state change and
 * `[ks] t=EPOCH_MS restore-start|restore-end STORE TOPIC-PARTITION N` for changelog restores
 * (the recovery benchmark reads them).
 */
public final class App {
    static final Map<String, String> ARGS = new HashMap<>();

    static String arg(String k, String d) { return ARGS.getOrDefault(k, d); }

    public static void main(String[] argv) throws Exception {
        for (int i = 0; i < argv.length; i++) {
            String a = argv[i];
            if (!a.startsWith("--")) throw new IllegalArgumentException("unexpected " + a);
            String k = a.substring(2);
            if (i + 1 < argv.length && !argv[i + 1].startsWith("--")) ARGS.put(k, argv[++i]);
            else ARGS.put(k, "true");
        }
        long t0 = System.currentTimeMillis();
        String bootstrap = arg("bootstrap", "127.0.0.1:9092");
        String appId = arg("app-id", "ks-bench");
        String prefix = arg("prefix", appId);
        String orders = arg("orders", "orders");
        int partitions = Integer.parseInt(arg("partitions", "4"));
        String guarantee = arg("guarantee", "at_least_once");

        Topo.Cfg cfg = new Topo.Cfg();
        cfg.windowMs = Long.parseLong(arg("window-ms", "60000"));
        cfg.graceMs = Long.parseLong(arg("grace-ms", "120000"));
        cfg.retentionMs = Long.parseLong(arg("retention-ms", String.valueOf(7 * 3_600_000L)));
        cfg.lateMs = Long.parseLong(arg("allowed-lateness-ms", "0"));
        cfg.dedupRetentionMs = Long.parseLong(arg("dedup-retention-ms", String.valueOf(7 * 86_400_000L)));
        cfg.minUnits = Long.parseLong(arg("min-units", "50"));
        cfg.factor = arg("factor", "3.0");
        cfg.baselineWindows = Integer.parseInt(arg("baseline-windows", "15"));
        cfg.ruleId = arg("rule-id", "velocity_spike");
        cfg.ruleVersion = Integer.parseInt(arg("rule-version", "1"));
        cfg.ordersTopic = orders;
        cfg.repartition = prefix + ".sku-repartition";
        cfg.dashboard = prefix + ".dashboard";
        cfg.deadLetter = prefix + ".dead-letter";
        cfg.late = prefix + ".late";
        cfg.actions = prefix + ".actions";

        try (Admin admin = Admin.create(Map.of(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap))) {
            Set<String> have = admin.listTopics().names().get();
            List<NewTopic> create = new ArrayList<>();
            for (String t : List.of(cfg.repartition, cfg.dashboard, cfg.deadLetter, cfg.late, cfg.actions)) {
                if (have.contains(t)) continue;
                NewTopic nt = new NewTopic(t, partitions, (short) 1);
                if (t.equals(cfg.dashboard)) nt.configs(Map.of("cleanup.policy", "compact"));
                create.add(nt);
            }
            if (!create.isEmpty()) {
                try {
                    admin.createTopics(create).all().get();
                } catch (java.util.concurrent.ExecutionException e) {
                    // another instance of the application created them at the same time
                    if (!(e.getCause() instanceof org.apache.kafka.common.errors.TopicExistsException)) throw e;
                }
            }
        }

        Properties p = new Properties();
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, appId);
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, guarantee);
        p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, arg("commit-ms", "200"));
        p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, arg("threads", "2"));
        p.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, Long.parseLong(arg("cache-mb", "64")) * 1024 * 1024);
        p.put(StreamsConfig.STATE_DIR_CONFIG, arg("state-dir", "/tmp/ks-state"));
        p.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 1);
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");
        String instanceId = ARGS.get("instance-id");
        if (instanceId != null) {
            // Static membership; Kafka Streams suffixes it with "-<thread index>" per stream thread.
            p.put(StreamsConfig.consumerPrefix(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG), instanceId);
        }
        p.put(StreamsConfig.NUM_STANDBY_REPLICAS_CONFIG, Integer.parseInt(arg("standby", "0")));
        String sessionMs = ARGS.get("session-timeout-ms");
        if (sessionMs != null) {
            p.put(StreamsConfig.consumerPrefix(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG), sessionMs);
            p.put(StreamsConfig.consumerPrefix(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG), String.valueOf(Long.parseLong(sessionMs) / 3));
        }
        // Same producer durability as tidemark (acks=all, idempotent), which are the KS defaults too.
        p.put(StreamsConfig.producerPrefix("acks"), "all");
        p.put(StreamsConfig.producerPrefix("compression.type"), arg("compression", "lz4"));

        Topology topology = Topo.build(cfg);
        KafkaStreams streams = new KafkaStreams(topology, p);
        CountDownLatch done = new CountDownLatch(1);
        streams.setUncaughtExceptionHandler(e -> {
            e.printStackTrace();
            done.countDown();
            return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
        streams.setStateListener((now, old) ->
            System.err.println("[ks] t=" + System.currentTimeMillis() + " state " + old + " -> " + now));
        streams.setGlobalStateRestoreListener(new org.apache.kafka.streams.processor.StateRestoreListener() {
            public void onRestoreStart(TopicPartition tp, String store, long start, long end) {
                System.err.println("[ks] t=" + System.currentTimeMillis() + " restore-start " + store + " " + tp + " " + (end - start));
            }
            public void onBatchRestored(TopicPartition tp, String store, long batchEnd, long n) {}
            public void onRestoreEnd(TopicPartition tp, String store, long total) {
                System.err.println("[ks] t=" + System.currentTimeMillis() + " restore-end " + store + " " + tp + " " + total);
            }
        });
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            streams.close(Duration.ofSeconds(30));
        }));
        streams.start();
        System.err.println("[ks] started in " + (System.currentTimeMillis() - t0) + " ms");

        Dispatcher dispatcher = null;
        String url = ARGS.get("action-url");
        if (url != null) {
            dispatcher = new Dispatcher(bootstrap, appId + "-dispatch", instanceId == null ? null : instanceId + "-dispatch",
                cfg.actions, url, arg("latency-out", null), sessionMs);
            Thread th = new Thread(dispatcher, "dispatcher");
            th.setDaemon(true);
            th.start();
        }

        if (ARGS.containsKey("task-log")) {
            Thread th = new Thread(() -> taskLogger(streams), "task-logger");
            th.setDaemon(true);
            th.start();
        }

        String lagOut = ARGS.get("lag-out");
        if (lagOut != null) {
            Thread th = new Thread(() -> lagReporter(bootstrap, appId, orders, cfg.repartition, lagOut), "lag-reporter");
            th.setDaemon(true);
            th.start();
        }

        if (ARGS.containsKey("exit-at-end")) {
            long drainedAt = waitDrained(bootstrap, appId, List.of(orders, cfg.repartition), t0);
            System.out.println("{\"drained_ms\":" + (drainedAt - t0) + "}");
            if (dispatcher != null) dispatcher.waitIdle(Duration.ofSeconds(30));
            streams.close(Duration.ofSeconds(60));
            if (dispatcher != null) dispatcher.stop();
            System.exit(0);
        }
        done.await();
        System.exit(1);
    }

    /**
     * Once a second: the group's committed offsets and the end offsets, summed per topic over
     * the orders and the repartition topic, as a JSON line appended to `out` (consumer lag for
     * the scenario benchmarks; Kafka Streams has no backlog-age gauge).
     */
    static void lagReporter(String bootstrap, String group, String orders, String repartition, String out) {
        try (Admin admin = Admin.create(Map.of(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap));
             PrintWriter w = new PrintWriter(new FileWriter(out, true), true)) {
            List<TopicPartition> tps = new ArrayList<>();
            admin.describeTopics(List.of(orders, repartition)).allTopicNames().get().values()
                .forEach(d -> d.partitions().forEach(pi -> tps.add(new TopicPartition(d.name(), pi.partition()))));
            Map<TopicPartition, OffsetSpec> latest = tps.stream().collect(Collectors.toMap(tp -> tp, tp -> OffsetSpec.latest()));
            long next = System.currentTimeMillis();
            while (true) {
                next += 1000;
                Thread.sleep(Math.max(0, next - System.currentTimeMillis()));
                try {
                    Map<TopicPartition, OffsetAndMetadata> committed =
                        admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
                    var ends = admin.listOffsets(latest).all().get();
                    long oc = 0, oe = 0, rc = 0, re = 0;
                    for (TopicPartition tp : tps) {
                        OffsetAndMetadata c = committed.get(tp);
                        long at = c == null ? 0 : c.offset(), end = ends.get(tp).offset();
                        if (tp.topic().equals(orders)) { oc += at; oe += end; } else { rc += at; re += end; }
                    }
                    w.printf("{\"t\":%d,\"orders_committed\":%d,\"orders_end\":%d,\"repartition_committed\":%d,\"repartition_end\":%d}%n",
                        System.currentTimeMillis(), oc, oe, rc, re);
                } catch (java.util.concurrent.ExecutionException e) {
                    // broker busy or group coordinator moving: skip this second
                }
            }
        } catch (Exception e) {
            System.err.println("[ks] lag reporter stopped: " + e);
        }
    }

    /** Every 200 ms: this instance's active and standby input partitions, printed when they change. */
    static void taskLogger(KafkaStreams streams) {
        String last = "";
        while (true) {
            try {
                Thread.sleep(200);
                java.util.TreeSet<String> active = new java.util.TreeSet<>(), standby = new java.util.TreeSet<>();
                for (var th : streams.metadataForLocalThreads()) {
                    for (var t : th.activeTasks()) t.topicPartitions().forEach(tp -> active.add(tp.topic() + ":" + tp.partition()));
                    for (var t : th.standbyTasks()) t.topicPartitions().forEach(tp -> standby.add(tp.topic() + ":" + tp.partition()));
                }
                String now = "active=" + String.join(",", active) + " standby=" + String.join(",", standby);
                if (!now.equals(last)) {
                    System.err.println("[ks] t=" + System.currentTimeMillis() + " tasks " + now);
                    last = now;
                }
            } catch (InterruptedException e) {
                return;
            } catch (RuntimeException e) {
                // metadata not available while the client is starting or shutting down
            }
        }
    }

    /** Polls the group's committed offsets until every partition of `topics` is at its end. */
    static long waitDrained(String bootstrap, String group, List<String> topics, long t0) throws Exception {
        try (Admin admin = Admin.create(Map.of(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap))) {
            Map<String, TopicDescription> desc = admin.describeTopics(topics).allTopicNames().get();
            List<TopicPartition> tps = new ArrayList<>();
            desc.values().forEach(d -> d.partitions().forEach(pi -> tps.add(new TopicPartition(d.name(), pi.partition()))));
            Map<TopicPartition, OffsetSpec> latest = tps.stream().collect(Collectors.toMap(tp -> tp, tp -> OffsetSpec.latest()));
            while (true) {
                Thread.sleep(250);
                Map<TopicPartition, OffsetAndMetadata> committed =
                    admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
                var ends = admin.listOffsets(latest).all().get();
                boolean all = true;
                long total = 0, done = 0;
                for (TopicPartition tp : tps) {
                    long end = ends.get(tp).offset();
                    OffsetAndMetadata c = committed.get(tp);
                    long at = c == null ? 0 : c.offset();
                    if (at < end) all = false;
                    if (tp.topic().equals(topics.get(0))) { total += end; done += Math.min(at, end); }
                }
                if (ARGS.containsKey("progress")) System.err.printf("[ks] t=%d ms orders committed %d/%d%n",
                    System.currentTimeMillis() - t0, done, total);
                if (all && total > 0) return System.currentTimeMillis();
            }
        }
    }

    /**
     * The action side: reads committed action records (read_committed, so under EOS only
     * actions of committed transactions) and POSTs each with its idempotency key, at most 32
     * in flight (tidemark's default max_in_flight), retrying 408/429/5xx.
     */
    static final class Dispatcher implements Runnable {
        final KafkaConsumer<String, String> consumer;
        final HttpClient http = HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1)
            .connectTimeout(Duration.ofSeconds(5)).build();
        final URI uri;
        final Semaphore inFlight = new Semaphore(32);
        final AtomicBoolean running = new AtomicBoolean(true);
        final Histogram hist = new Histogram(3_600_000_000L, 3);
        final PrintWriter latencyOut;
        volatile long lastActivity = System.currentTimeMillis();
        long delivered;

        Dispatcher(String bootstrap, String group, String instanceId, String topic, String url, String latencyOut,
                   String sessionMs) throws IOException {
            Properties c = new Properties();
            c.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
            c.put(ConsumerConfig.GROUP_ID_CONFIG, group);
            if (instanceId != null) c.put(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG, instanceId);
            c.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
            c.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
            c.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
            c.put(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, "50");
            if (sessionMs != null) {
                c.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, sessionMs);
                c.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, String.valueOf(Long.parseLong(sessionMs) / 3));
            }
            consumer = new KafkaConsumer<>(c, new StringDeserializer(), new StringDeserializer());
            consumer.subscribe(List.of(topic));
            uri = URI.create(url);
            this.latencyOut = latencyOut == null ? null : new PrintWriter(new FileWriter(latencyOut, true), true);
        }

        public void run() {
            long nextReport = System.currentTimeMillis() / 1000 * 1000 + 1000;
            Histogram interval = new Histogram(3_600_000_000L, 3);
            try {
                while (running.get()) {
                    ConsumerRecords<String, String> recs = consumer.poll(Duration.ofMillis(100));
                    List<CompletableFuture<Void>> fs = new ArrayList<>();
                    for (ConsumerRecord<String, String> r : recs) {
                        lastActivity = System.currentTimeMillis();
                        Header h = r.headers().lastHeader("tm.append_ms");
                        long appendMs = h == null ? r.timestamp() : Long.parseLong(new String(h.value(), StandardCharsets.UTF_8));
                        inFlight.acquireUninterruptibly();
                        fs.add(post(r.key(), r.value(), 0).whenComplete((v, e) -> {
                            inFlight.release();
                            long lat = Math.max(0, System.currentTimeMillis() - appendMs);
                            synchronized (hist) {
                                hist.recordValue(Math.min(lat, 3_600_000_000L));
                                interval.recordValue(Math.min(lat, 3_600_000_000L));
                                delivered++;
                            }
                        }));
                    }
                    if (!fs.isEmpty()) {
                        CompletableFuture.allOf(fs.toArray(new CompletableFuture[0])).join();
                        consumer.commitSync();
                    }
                    long now = System.currentTimeMillis();
                    if (latencyOut != null && now >= nextReport) {
                        synchronized (hist) {
                            latencyOut.printf("{\"t\":%d,\"n\":%d,\"p50_ms\":%d,\"p99_ms\":%d,\"max_ms\":%d}%n", now,
                                interval.getTotalCount(), interval.getValueAtPercentile(50), interval.getValueAtPercentile(99),
                                interval.getMaxValue());
                            interval.reset();
                        }
                        nextReport = now / 1000 * 1000 + 1000;
                    }
                }
            } catch (org.apache.kafka.common.errors.WakeupException e) {
                // stopping
            } finally {
                consumer.close();
            }
        }

        CompletableFuture<Void> post(String key, String body, int attempt) {
            HttpRequest req = HttpRequest.newBuilder(uri).timeout(Duration.ofSeconds(5))
                .header("Content-Type", "application/json").header("Idempotency-Key", key).header("webhook-id", key)
                .POST(HttpRequest.BodyPublishers.ofString(body)).build();
            return http.sendAsync(req, HttpResponse.BodyHandlers.discarding()).handle((resp, err) -> {
                int s = resp == null ? 0 : resp.statusCode();
                boolean retry = err != null || s == 408 || s == 429 || s >= 500;
                return retry && attempt < 20;
            }).thenCompose(retry -> {
                if (!retry) return CompletableFuture.completedFuture(null);
                long backoff = (long) (Math.random() * Math.min(30_000, 200L << Math.min(attempt, 8)));
                return CompletableFuture.runAsync(() -> {}, CompletableFuture.delayedExecutor(backoff,
                    java.util.concurrent.TimeUnit.MILLISECONDS)).thenCompose(x -> post(key, body, attempt + 1));
            });
        }

        void waitIdle(Duration quiet) throws InterruptedException {
            while (System.currentTimeMillis() - lastActivity < 2000) Thread.sleep(200);
        }

        void stop() {
            running.set(false);
            consumer.wakeup();
            synchronized (hist) {
                System.out.printf("{\"actions_delivered\":%d,\"p50_ms\":%d,\"p99_ms\":%d,\"max_ms\":%d}%n", delivered,
                    hist.getValueAtPercentile(50), hist.getValueAtPercentile(99), hist.getMaxValue());
            }
        }
    }

    static RecordHeaders headers() { return new RecordHeaders(); }

    // Used by Topo for serializers.
    static final StringSerializer STR_SER = new StringSerializer();
    static final ByteArraySerializer BYTES_SER = new ByteArraySerializer();
    static final StringDeserializer STR_DE = new StringDeserializer();
    static final ByteArrayDeserializer BYTES_DE = new ByteArrayDeserializer();
    static final Serdes.StringSerde STRING_SERDE = new Serdes.StringSerde();
}
