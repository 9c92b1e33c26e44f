package tidemark.bench;

import org.HdrHistogram.Histogram;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.ListOffsetsOptions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.IsolationLevel;
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
import java.lang.management.ManagementFactory;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
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
 *   --dedup-expiry-every-ms 3600000  (stream time between scans deleting expired dedup entries)
 *   --exit-at-end   exit once the orders and repartition topics are fully committed and the
 *                   dispatcher POSTed every action up to the actions topic's committed end;
 *                   prints one stdout line {"drained_ms": measured start → the later of those
 *                   two moments, "offsets_drained_ms", "last_post_ms", "cpu_ms": process CPU
 *                   (all threads) over the same span, "peak_rss_kb": VmHWM since the measured
 *                   start (reset through /proc/self/clear_refs; "peak_rss_reset"), "warmup_ms", ...}
 *   --drain-poll-ms 100  how often --exit-at-end reads the committed and end offsets
 *   --warmup-orders TOPIC  JIT warm-up, discarded: before the measured instance, the same JVM
 *                   drains TOPIC under application id APP-ID-warmup and prefix PREFIX-warmup
 *                   (own topics, state, groups), closes that instance, runs a GC, and only then
 *                   starts the measured instance and its clock, CPU and peak-RSS counters
 *   --warmup-action-url URL  where the warm-up's actions are POSTed (unset: produced, not POSTed)
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
        long jvmT0 = System.currentTimeMillis();
        String bootstrap = arg("bootstrap", "127.0.0.1:9092");
        String appId = arg("app-id", "ks-bench");
        String prefix = arg("prefix", appId);
        String orders = arg("orders", "orders");
        String instanceId = ARGS.get("instance-id");
        String sessionMs = ARGS.get("session-timeout-ms");
        long pollMs = Long.parseLong(arg("drain-poll-ms", "100"));

        // JIT warm-up, discarded: the same JVM drains a warm-up log under its own application
        // id and topics (state, groups and outputs apart from the measured instance's), closes
        // that instance, and only then starts the measured one and its clock.
        String warmOrders = ARGS.get("warmup-orders");
        long warmupMs = -1, warmupCpuMs = -1;
        if (warmOrders != null) {
            long w0 = System.currentTimeMillis(), wc0 = processCpuNs();
            Instance w = Instance.start(bootstrap, appId + "-warmup", prefix + "-warmup", warmOrders,
                ARGS.get("warmup-action-url"), null, null, sessionMs, true);
            w.drain(pollMs, Duration.ofSeconds(120));
            w.close();
            System.gc();
            warmupMs = System.currentTimeMillis() - w0;
            warmupCpuMs = (processCpuNs() - wc0) / 1_000_000;
            System.err.println("[ks] t=" + System.currentTimeMillis() + " warm-up drained and closed in " + warmupMs
                + " ms, " + warmupCpuMs + " CPU ms");
        }

        // The measured instance: peak RSS counted from here, process CPU and wall clock too.
        boolean rssReset = resetPeakRss();
        long cpu0 = processCpuNs();
        long t0 = System.currentTimeMillis();
        Instance m = Instance.start(bootstrap, appId, prefix, orders, ARGS.get("action-url"), arg("latency-out", null),
            instanceId, sessionMs, false);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> m.streams.close(Duration.ofSeconds(30))));
        System.err.println("[ks] started in " + (System.currentTimeMillis() - jvmT0) + " ms");

        if (ARGS.containsKey("task-log")) {
            Thread th = new Thread(() -> taskLogger(m.streams), "task-logger");
            th.setDaemon(true);
            th.start();
        }

        String lagOut = ARGS.get("lag-out");
        if (lagOut != null) {
            Thread th = new Thread(() -> lagReporter(bootstrap, appId, orders, m.cfg.repartition, lagOut), "lag-reporter");
            th.setDaemon(true);
            th.start();
        }

        if (ARGS.containsKey("exit-at-end")) {
            Instance.Drained d = m.drain(pollMs, Duration.ofSeconds(120));
            long cpuMs = (processCpuNs() - cpu0) / 1_000_000;
            long hwmKb = statusKb("VmHWM");
            // drained_ms: measured start → orders and sku-repartition committed at their ends and
            // every action up to the actions topic's end POSTed (the later of the two moments).
            System.out.println("{\"drained_ms\":" + (d.at - t0) + ",\"offsets_drained_ms\":" + (d.offsetsAt - t0)
                + ",\"last_post_ms\":" + (d.lastPostAt > 0 ? d.lastPostAt - t0 : -1) + ",\"actions_caught_up\":" + d.actionsCaughtUp
                + ",\"actions_delivered\":" + d.delivered + ",\"cpu_ms\":" + cpuMs + ",\"peak_rss_kb\":" + hwmKb
                + ",\"peak_rss_reset\":" + rssReset + ",\"warmup_ms\":" + warmupMs + ",\"warmup_cpu_ms\":" + warmupCpuMs
                + ",\"jvm_to_start_ms\":" + (t0 - jvmT0) + "}");
            System.out.flush();
            m.close();
            System.exit(0);
        }
        m.done.await();
        System.exit(1);
    }

    /** CPU time of the whole JVM process (every thread: stream threads, GC, JIT, clients), ns. */
    static long processCpuNs() {
        return ((com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean()).getProcessCpuTime();
    }

    /** Resets the kernel's peak RSS (VmHWM) of this process (`echo 5 > /proc/self/clear_refs`). */
    static boolean resetPeakRss() {
        try {
            Files.writeString(Path.of("/proc/self/clear_refs"), "5");
            return true;
        } catch (IOException | RuntimeException e) {
            System.err.println("[ks] cannot reset the peak RSS (" + e + "): peak_rss_kb includes the warm-up");
            return false;
        }
    }

    /** A `/proc/self/status` field in kB (VmHWM, VmRSS), -1 when unreadable. */
    static long statusKb(String field) {
        try {
            for (String l : Files.readAllLines(Path.of("/proc/self/status"))) {
                if (l.startsWith(field + ":")) return Long.parseLong(l.substring(field.length() + 1).trim().split("\\s+")[0]);
            }
        } catch (IOException | RuntimeException e) {
            // not Linux
        }
        return -1;
    }

    static Topo.Cfg cfg(String prefix, String orders) {
        Topo.Cfg cfg = new Topo.Cfg();
        cfg.windowMs = Long.parseLong(arg("window-ms", "60000"));
        cfg.graceMs = Long.parseLong(arg("grace-ms", "120000"));
        cfg.retentionMs = Long.parseLong(arg("retention-ms", String.valueOf(7 * 3_600_000L)));
        cfg.lateMs = Long.parseLong(arg("allowed-lateness-ms", "0"));
        cfg.dedupRetentionMs = Long.parseLong(arg("dedup-retention-ms", String.valueOf(7 * 86_400_000L)));
        cfg.dedupExpiryEveryMs = Long.parseLong(arg("dedup-expiry-every-ms", String.valueOf(3_600_000L)));
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
        return cfg;
    }

    /** One KafkaStreams instance of the topology, with its action dispatcher (if given a URL). */
    static final class Instance {
        final String bootstrap, appId;
        final Topo.Cfg cfg;
        final KafkaStreams streams;
        final Dispatcher dispatcher;
        final CountDownLatch done = new CountDownLatch(1);

        record Drained(long at, long offsetsAt, long lastPostAt, boolean actionsCaughtUp, long delivered) {}

        private Instance(String bootstrap, String appId, Topo.Cfg cfg, Properties p, Dispatcher dispatcher, String tag) {
            this.bootstrap = bootstrap;
            this.appId = appId;
            this.cfg = cfg;
            this.dispatcher = dispatcher;
            streams = new KafkaStreams(Topo.build(cfg), p);
            streams.setUncaughtExceptionHandler(e -> {
                e.printStackTrace();
                done.countDown();
                return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
            });
            streams.setStateListener((now, old) ->
                System.err.println("[ks] t=" + System.currentTimeMillis() + tag + " state " + old + " -> " + now));
            streams.setGlobalStateRestoreListener(new org.apache.kafka.streams.processor.StateRestoreListener() {
                public void onRestoreStart(TopicPartition tp, String store, long start, long end) {
                    System.err.println("[ks] t=" + System.currentTimeMillis() + tag + " restore-start " + store + " " + tp + " " + (end - start));
                }
                public void onBatchRestored(TopicPartition tp, String store, long batchEnd, long n) {}
                public void onRestoreEnd(TopicPartition tp, String store, long total) {
                    System.err.println("[ks] t=" + System.currentTimeMillis() + tag + " restore-end " + store + " " + tp + " " + total);
                }
            });
        }

        /** Creates the instance's topics, starts it and its dispatcher. */
        static Instance start(String bootstrap, String appId, String prefix, String orders, String actionUrl,
                              String latencyOut, String instanceId, String sessionMs, boolean warmup) throws Exception {
            Topo.Cfg cfg = App.cfg(prefix, orders);
            int partitions = Integer.parseInt(arg("partitions", "4"));
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
            p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, arg("guarantee", "at_least_once"));
            p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, arg("commit-ms", "200"));
            p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, arg("threads", "2"));
            p.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, Long.parseLong(arg("cache-mb", "64")) * 1024 * 1024);
            p.put(StreamsConfig.STATE_DIR_CONFIG, arg("state-dir", "/tmp/ks-state"));
            p.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 1);
            p.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");
            if (instanceId != null) {
                // Static membership; Kafka Streams suffixes it with "-<thread index>" per stream thread.
                p.put(StreamsConfig.consumerPrefix(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG), instanceId);
            }
            p.put(StreamsConfig.NUM_STANDBY_REPLICAS_CONFIG, Integer.parseInt(arg("standby", "0")));
            if (sessionMs != null) {
                p.put(StreamsConfig.consumerPrefix(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG), sessionMs);
                p.put(StreamsConfig.consumerPrefix(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG), String.valueOf(Long.parseLong(sessionMs) / 3));
            }
            // Same producer durability as tidemark (acks=all, idempotent), which are the KS defaults too.
            p.put(StreamsConfig.producerPrefix("acks"), "all");
            p.put(StreamsConfig.producerPrefix("compression.type"), arg("compression", "lz4"));

            Dispatcher dispatcher = actionUrl == null ? null
                : new Dispatcher(bootstrap, appId + "-dispatch", instanceId == null ? null : instanceId + "-dispatch",
                    cfg.actions, actionUrl, latencyOut, sessionMs);
            if (dispatcher != null && warmup) dispatcher.report = System.err;
            Instance in = new Instance(bootstrap, appId, cfg, p, dispatcher, warmup ? " warm-up" : "");
            in.streams.start();
            if (dispatcher != null) {
                Thread th = new Thread(dispatcher, warmup ? "warmup-dispatcher" : "dispatcher");
                th.setDaemon(true);
                th.start();
            }
            return in;
        }

        /**
         * Waits until the group committed the orders and sku-repartition partitions at their
         * ends, then until the dispatcher consumed the actions topic up to its committed end
         * (read_committed) with every POST answered. `at` is the later of the offsets moment and
         * the last POST's answer.
         */
        Drained drain(long pollMs, Duration actionsTimeout) throws Exception {
            long offsetsAt = waitDrained(bootstrap, appId, List.of(cfg.ordersTopic, cfg.repartition), pollMs, this);
            if (dispatcher == null) return new Drained(offsetsAt, offsetsAt, -1, false, 0);
            Map<TopicPartition, Long> ends = new HashMap<>();
            try (Admin admin = Admin.create(Map.of(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap))) {
                List<TopicPartition> tps = new ArrayList<>();
                admin.describeTopics(List.of(cfg.actions)).allTopicNames().get().values()
                    .forEach(d -> d.partitions().forEach(pi -> tps.add(new TopicPartition(d.name(), pi.partition()))));
                var res = admin.listOffsets(tps.stream().collect(Collectors.toMap(tp -> tp, tp -> OffsetSpec.latest())),
                    new ListOffsetsOptions(IsolationLevel.READ_COMMITTED)).all().get();
                res.forEach((tp, r) -> ends.put(tp, r.offset()));
            }
            dispatcher.target = ends;
            boolean caughtUp = dispatcher.caughtUp.await(actionsTimeout.toMillis(), java.util.concurrent.TimeUnit.MILLISECONDS);
            if (!caughtUp) {
                System.err.println("[ks] dispatcher did not reach the actions' end " + ends + " in " + actionsTimeout + "; waiting for 2 s without records");
                dispatcher.waitIdle(Duration.ofSeconds(30));
            }
            long lastPost = dispatcher.lastPostDoneMs;
            return new Drained(Math.max(offsetsAt, lastPost), offsetsAt, lastPost, caughtUp, dispatcher.deliveredCount());
        }

        void close() {
            streams.close(Duration.ofSeconds(60));
            if (dispatcher != null) dispatcher.stop();
        }
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

    /**
     * Polls the group's committed offsets every `pollMs` until every partition of `topics` is
     * at its end; returns that moment. Throws if the instance stopped.
     */
    static long waitDrained(String bootstrap, String group, List<String> topics, long pollMs, Instance in) throws Exception {
        long t0 = System.currentTimeMillis();
        try (Admin admin = Admin.create(Map.of(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap))) {
            Map<String, TopicDescription> desc = admin.describeTopics(topics).allTopicNames().get();
            List<TopicPartition> tps = new ArrayList<>();
            desc.values().forEach(d -> d.partitions().forEach(pi -> tps.add(new TopicPartition(d.name(), pi.partition()))));
            Map<TopicPartition, OffsetSpec> latest = tps.stream().collect(Collectors.toMap(tp -> tp, tp -> OffsetSpec.latest()));
            while (true) {
                Thread.sleep(pollMs);
                if (in.done.getCount() == 0 || !in.streams.state().isRunningOrRebalancing())
                    throw new IllegalStateException("Kafka Streams instance " + group + " stopped: " + in.streams.state());
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
        /** When the last POST got its final answer (epoch ms; 0: none yet). */
        volatile long lastPostDoneMs;
        /** Set by the main thread once the input is drained: the actions' committed end offsets. */
        volatile Map<TopicPartition, Long> target;
        /** Counted down when the consumer's positions reach `target` with every POST answered. */
        final CountDownLatch caughtUp = new CountDownLatch(1);
        /** Where stop() prints the delivery summary (the warm-up's goes to stderr). */
        java.io.PrintStream report = System.out;

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
                            lastPostDoneMs = System.currentTimeMillis();
                            long lat = Math.max(0, lastPostDoneMs - appendMs);
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
                    checkCaughtUp();
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

        /** Every POST of the records polled so far is answered here; are the positions at `target`? */
        void checkCaughtUp() {
            Map<TopicPartition, Long> t = target;
            if (t == null || caughtUp.getCount() == 0) return;
            try {
                if (!consumer.assignment().containsAll(t.keySet())) return;
                for (Map.Entry<TopicPartition, Long> e : t.entrySet()) {
                    if (consumer.position(e.getKey(), Duration.ofSeconds(1)) < e.getValue()) return;
                }
                caughtUp.countDown();
            } catch (org.apache.kafka.common.errors.TimeoutException e) {
                // position unknown yet: next loop
            }
        }

        long deliveredCount() {
            synchronized (hist) { return delivered; }
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
                report.printf("{\"actions_delivered\":%d,\"p50_ms\":%d,\"p99_ms\":%d,\"max_ms\":%d}%n", delivered,
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
