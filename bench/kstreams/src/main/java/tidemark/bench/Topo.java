package tidemark.bench;

import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.processor.PunctuationType;
import org.apache.kafka.streams.processor.api.Processor;
import org.apache.kafka.streams.processor.api.ProcessorContext;
import org.apache.kafka.streams.processor.api.Record;
import org.apache.kafka.streams.processor.api.RecordMetadata;
import org.apache.kafka.streams.state.KeyValueIterator;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.Stores;

import java.math.BigDecimal;
import java.math.RoundingMode;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.time.Instant;
import java.time.format.DateTimeFormatter;
import java.time.ZoneOffset;
import java.util.ArrayList;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.TreeSet;

/**
 * The tidemark topology in the Kafka Streams Processor API.
 *
 * <pre>
 * orders ──▶ normalize-dedup ──▶ dead-letter (original bytes + tidemark.* headers)
 *               │ dedup: KV store event_id → first append time; seen within 7 d of append time = duplicate;
 *               │        entries older than that deleted by a stream-time punctuation (hourly)
 *               │ dashboard: KV store of 1-min partials per store/currency, emitted each commit interval
 *               ├──▶ late (beyond window retention)
 *               ├──▶ dashboard (compacted)
 *               └──▶ sku-repartition (key = sku; placed and cancelled lines)
 * sku-repartition ──▶ velocity (KV store sku → 1-min window units + fired marks; task watermark)
 *               └──▶ actions (key = idempotency key, value = canonical payload) ──▶ dispatcher POSTs
 * </pre>
 */
public final class Topo {
    public static final class Cfg {
        long windowMs, graceMs, retentionMs, lateMs, dedupRetentionMs, dedupExpiryEveryMs, minUnits;
        String factor;
        int baselineWindows;
        String ruleId;
        int ruleVersion;
        String ordersTopic, repartition, dashboard, deadLetter, late, actions;
    }

    static final DateTimeFormatter RFC3339_MS =
        DateTimeFormatter.ofPattern("uuuu-MM-dd'T'HH:mm:ss.SSS'Z'").withZone(ZoneOffset.UTC);

    static String rfc3339(long ms) { return RFC3339_MS.format(Instant.ofEpochMilli(ms)); }

    static long windowStart(long t, long size) { return Math.floorDiv(t, size) * size; }

    public static Topology build(Cfg cfg) {
        Topology t = new Topology();
        t.addSource("orders", App.STR_DE, App.BYTES_DE, cfg.ordersTopic);
        t.addProcessor("normalize-dedup", () -> new NormalizeDedup(cfg), "orders");
        // Point lookups (get/put) in a KV store, cached and logged like the other stores. A KV
        // store has no retention: expireDedup deletes entries past it by stream time.
        t.addStateStore(Stores.keyValueStoreBuilder(Stores.persistentKeyValueStore("dedup"),
            Serdes.String(), Serdes.Long()).withCachingEnabled(), "normalize-dedup");
        t.addStateStore(Stores.keyValueStoreBuilder(Stores.persistentKeyValueStore("dashboard-partials"),
            Serdes.String(), Serdes.String()).withCachingEnabled(), "normalize-dedup");
        t.addSink("dead-letter", cfg.deadLetter, App.STR_SER, App.BYTES_SER, "normalize-dedup");
        t.addSink("late", cfg.late, App.STR_SER, App.BYTES_SER, "normalize-dedup");
        t.addSink("dashboard", cfg.dashboard, App.STR_SER, App.STR_SER, "normalize-dedup");
        t.addSink("to-sku", cfg.repartition, App.STR_SER, App.BYTES_SER, "normalize-dedup");

        t.addSource("sku-lines", App.STR_DE, App.BYTES_DE, cfg.repartition);
        t.addProcessor("velocity", () -> new Velocity(cfg), "sku-lines");
        t.addStateStore(Stores.keyValueStoreBuilder(Stores.persistentKeyValueStore("sku-state"),
            Serdes.String(), Serdes.ByteArray()).withCachingEnabled(), "velocity");
        t.addSink("actions", cfg.actions, App.STR_SER, App.STR_SER, "velocity");
        return t;
    }

    /** Normalise, dedup, dashboard partials, late/dead-letter side outputs, derive SKU lines. */
    static final class NormalizeDedup implements Processor<String, byte[], String, Object> {
        static final String WM_KEY = "~wm";
        final Cfg cfg;
        ProcessorContext<String, Object> ctx;
        KeyValueStore<String, Long> dedup;
        KeyValueStore<String, String> partials;
        final LinkedHashSet<String> dirty = new LinkedHashSet<>();
        long maxEventMs = Long.MIN_VALUE;
        long expiredUpTo = Long.MIN_VALUE;
        long dedupScannedAt = Long.MIN_VALUE;

        NormalizeDedup(Cfg cfg) { this.cfg = cfg; }

        @Override
        public void init(ProcessorContext<String, Object> context) {
            ctx = context;
            dedup = context.getStateStore("dedup");
            partials = context.getStateStore("dashboard-partials");
            String wm = partials.get(WM_KEY);
            if (wm != null) maxEventMs = Long.parseLong(wm);
            long every = Long.parseLong(App.arg("commit-ms", "200"));
            context.schedule(Duration.ofMillis(every), PunctuationType.WALL_CLOCK_TIME, ts -> emitDashboard());
            context.schedule(Duration.ofMillis(cfg.dedupExpiryEveryMs), PunctuationType.STREAM_TIME, this::expireDedup);
        }

        /**
         * Deletes dedup entries first seen more than the retention before stream time (the
         * task's newest append time), at most once per `dedupExpiryEveryMs` of stream time
         * counted from the task's first punctuation (which only notes the time: Kafka Streams
         * fires a stream-time punctuation at the first record and then on multiples of the
         * interval since the epoch, so without this a log could pay a scan just for crossing
         * an hour boundary). The scan reads every entry, so in a log spanning less than the
         * interval (every bench log) it never runs. Lookups check the age themselves, so
         * when entries are deleted does not change which records are duplicates.
         */
        void expireDedup(long streamTime) {
            if (dedupScannedAt == Long.MIN_VALUE) { dedupScannedAt = streamTime; return; }
            if (streamTime - dedupScannedAt < cfg.dedupExpiryEveryMs) return;
            dedupScannedAt = streamTime;
            long cutoff = streamTime - cfg.dedupRetentionMs;
            long t0 = System.currentTimeMillis(), scanned = 0, deleted = 0;
            String from = null;
            while (true) {
                List<String> gone = new ArrayList<>();
                String last = null;
                boolean more = false;
                try (KeyValueIterator<String, Long> it = dedup.range(from, null)) {
                    while (it.hasNext()) {
                        if (gone.size() >= 10_000) { more = true; break; }
                        var kv = it.next();
                        scanned++;
                        last = kv.key;
                        if (kv.value < cutoff) gone.add(kv.key);
                    }
                }
                for (String k : gone) dedup.delete(k);
                deleted += gone.size();
                if (!more) break;
                from = last;
            }
            System.err.println("[ks] t=" + System.currentTimeMillis() + " dedup expiry task " + ctx.taskId() + ": " + deleted
                + " of " + scanned + " entries older than " + cutoff + " deleted in " + (System.currentTimeMillis() - t0) + " ms");
        }

        Long watermark() { return maxEventMs == Long.MIN_VALUE ? null : maxEventMs - cfg.lateMs; }

        boolean expired(long start, Long wm) { return wm != null && wm >= start + cfg.windowMs + cfg.retentionMs; }

        @Override
        public void process(Record<String, byte[]> rec) {
            RecordMetadata md = ctx.recordMetadata().orElseThrow();
            long appendMs = rec.timestamp(); // the orders topic uses LogAppendTime
            byte[] value = rec.value() == null ? new byte[0] : rec.value();
            Normalizer.Result r = Normalizer.normalizeOrder(value, appendMs);
            if (r.event == null) {
                ctx.forward(sideOutput(rec, md, appendMs, r.reason, r.detail), "dead-letter");
                return;
            }
            Normalizer.Event e = r.event;
            Long wm = watermark();
            boolean late = expired(windowStart(e.eventTimeMs, cfg.windowMs), wm);
            if (e.eventTimeMs > maxEventMs) {
                maxEventMs = e.eventTimeMs;
                partials.put(WM_KEY, Long.toString(maxEventMs));
            }
            // dedup: first seen within retention of append time → no effect; otherwise this
            // append time becomes the id's first sighting (also when the old one expired)
            Long first = dedup.get(e.eventId);
            if (first != null && appendMs - first <= cfg.dedupRetentionMs) return;
            dedup.put(e.eventId, appendMs);
            if (late) {
                ctx.forward(sideOutput(rec, md, appendMs, "beyond_retention", "event time is past window retention"), "late");
                return;
            }
            deriveLines(e, appendMs, rec.timestamp());
            if (e.kind != Normalizer.Kind.SHIPPED && e.currency != null) {
                String key = String.format("%015d|%s|%s", windowStart(e.eventTimeMs, cfg.windowMs), e.store, e.currency);
                Agg a = Agg.decode(partials.get(key));
                switch (e.kind) {
                    case PLACED: a.orders++; a.units += e.units(); a.gross = a.gross.add(e.linesAmount()); break;
                    case CANCELLED: a.cancelled = a.cancelled.add(e.linesAmount()); break;
                    case REFUNDED: a.refunded = a.refunded.add(e.refund == null ? BigDecimal.ZERO : e.refund); break;
                    default: break;
                }
                a.version++;
                a.asOf = Math.max(a.asOf, appendMs);
                partials.put(key, a.encode());
                dirty.add(key);
            }
        }

        void deriveLines(Normalizer.Event e, long appendMs, long ts) {
            if (e.kind != Normalizer.Kind.PLACED && e.kind != Normalizer.Kind.CANCELLED) return;
            for (Normalizer.Line l : e.lines) {
                ByteBuffer b = ByteBuffer.allocate(1 + 8 + 8 + 8);
                b.put((byte) (e.kind == Normalizer.Kind.PLACED ? 1 : 0)).putLong(l.qty).putLong(e.eventTimeMs).putLong(appendMs);
                ctx.forward(new Record<String, Object>(l.sku, b.array(), ts), "to-sku");
            }
        }

        Record<String, Object> sideOutput(Record<String, byte[]> rec, RecordMetadata md, long appendMs, String reason,
                                          String detail) {
            RecordHeaders h = new RecordHeaders();
            h.add("tidemark.reason", reason.getBytes(StandardCharsets.UTF_8));
            h.add("tidemark.detail", String.valueOf(detail).getBytes(StandardCharsets.UTF_8));
            h.add("tidemark.source.topic", md.topic().getBytes(StandardCharsets.UTF_8));
            h.add("tidemark.source.partition", Integer.toString(md.partition()).getBytes(StandardCharsets.UTF_8));
            h.add("tidemark.source.offset", Long.toString(md.offset()).getBytes(StandardCharsets.UTF_8));
            h.add("tidemark.source.append_ms", Long.toString(appendMs).getBytes(StandardCharsets.UTF_8));
            return new Record<String, Object>(rec.key(), rec.value(), rec.timestamp(), h);
        }

        /** Emits the partials changed since the last call (upserts), then drops expired windows. */
        void emitDashboard() {
            int p = ctx.taskId().partition();
            for (String key : dirty) {
                String v = partials.get(key);
                if (v == null) continue;
                String[] k = key.split("\\|", 3);
                long start = Long.parseLong(k[0]);
                Agg a = Agg.decode(v);
                String recKey = rfc3339(start) + "|" + k[1] + "|" + k[2] + "|p" + p;
                BigDecimal net = a.gross.subtract(a.cancelled).subtract(a.refunded);
                String json = "{\"window_start\":\"" + rfc3339(start) + "\",\"window_end\":\"" + rfc3339(start + cfg.windowMs)
                    + "\",\"store\":\"" + k[1] + "\",\"currency\":\"" + k[2] + "\",\"source_partition\":" + p
                    + ",\"orders\":" + a.orders + ",\"units\":" + a.units + ",\"gross\":\"" + a.gross.toPlainString()
                    + "\",\"cancelled\":\"" + a.cancelled.toPlainString() + "\",\"refunded\":\"" + a.refunded.toPlainString()
                    + "\",\"net\":\"" + net.toPlainString() + "\",\"version\":" + a.version + ",\"as_of\":\"" + rfc3339(a.asOf) + "\"}";
                ctx.forward(new Record<String, Object>(recKey, json, a.asOf), "dashboard");
            }
            dirty.clear();
            Long wm = watermark();
            if (wm == null) return;
            long firstLive = windowStart(wm - cfg.windowMs - cfg.retentionMs, cfg.windowMs) + cfg.windowMs;
            if (firstLive > expiredUpTo) {
                List<String> gone = new ArrayList<>();
                try (KeyValueIterator<String, String> it = partials.range("", String.format("%015d", firstLive))) {
                    while (it.hasNext()) gone.add(it.next().key);
                }
                for (String k : gone) partials.delete(k);
                expiredUpTo = firstLive;
            }
        }
    }

    /** One dashboard partial; text-encoded in the store. */
    static final class Agg {
        long orders, units, version, asOf;
        BigDecimal gross = BigDecimal.ZERO, cancelled = BigDecimal.ZERO, refunded = BigDecimal.ZERO;

        static Agg decode(String s) {
            Agg a = new Agg();
            if (s == null) return a;
            String[] f = s.split(",");
            a.orders = Long.parseLong(f[0]);
            a.units = Long.parseLong(f[1]);
            a.gross = new BigDecimal(f[2]);
            a.cancelled = new BigDecimal(f[3]);
            a.refunded = new BigDecimal(f[4]);
            a.version = Long.parseLong(f[5]);
            a.asOf = Long.parseLong(f[6]);
            return a;
        }

        String encode() {
            return orders + "," + units + "," + gross.toPlainString() + "," + cancelled.toPlainString() + ","
                + refunded.toPlainString() + "," + version + "," + asOf;
        }
    }

    /** Per-SKU velocity_spike rule (topology/src/sku.rs + rules.rs), emit-on-update. */
    static final class Velocity implements Processor<String, byte[], String, Object> {
        static final String WM_KEY = "\u0000wm";
        final Cfg cfg;
        ProcessorContext<String, Object> ctx;
        KeyValueStore<String, byte[]> store;
        long maxEventMs = Long.MIN_VALUE;
        final BigDecimal factor;

        Velocity(Cfg cfg) {
            this.cfg = cfg;
            this.factor = new BigDecimal(cfg.factor);
        }

        @Override
        public void init(ProcessorContext<String, Object> context) {
            ctx = context;
            store = context.getStateStore("sku-state");
            byte[] wm = store.get(WM_KEY);
            if (wm != null) maxEventMs = ByteBuffer.wrap(wm).getLong();
        }

        Long watermark() { return maxEventMs == Long.MIN_VALUE ? null : maxEventMs - cfg.lateMs; }

        @Override
        public void process(Record<String, byte[]> rec) {
            ByteBuffer b = ByteBuffer.wrap(rec.value());
            boolean placed = b.get() == 1;
            long qty = b.getLong(), t = b.getLong(), appendMs = b.getLong();
            String sku = rec.key();
            long size = cfg.windowMs;
            long start = windowStart(t, size);
            Long wm0 = watermark();
            if (wm0 != null && wm0 >= start + size + cfg.retentionMs) return; // beyond retention
            if (t > maxEventMs) {
                maxEventMs = t;
                store.put(WM_KEY, ByteBuffer.allocate(8).putLong(maxEventMs).array());
            }
            if (!placed) return; // velocity counts placed units only
            long wm = watermark();
            long lastClosed = windowStart(wm - size - cfg.graceMs, size);
            long reach = lastClosed + size - (long) cfg.baselineWindows * size;
            if (start < reach) return;
            SkuState s = SkuState.decode(store.get(sku));
            // prune what no later input can observe (results do not depend on when this runs)
            s.windows.headMap(reach).clear();
            s.fired.removeIf(f -> wm >= f + size + cfg.graceMs);
            s.windows.merge(start, qty, Long::sum);
            boolean open = !(wm >= start + size + cfg.graceMs);
            if (open) {
                long units = s.windows.get(start);
                long span = (long) cfg.baselineWindows * size;
                long baseline = 0;
                for (long u : s.windows.subMap(start - span, start).values()) baseline += u;
                boolean meets = BigDecimal.valueOf(units).multiply(BigDecimal.valueOf(cfg.baselineWindows))
                    .compareTo(factor.multiply(BigDecimal.valueOf(baseline))) >= 0;
                if (units >= cfg.minUnits && meets && s.fired.add(start)) {
                    String key = cfg.ruleId + ":v" + cfg.ruleVersion + ":" + sku + ":window:" + rfc3339(start);
                    BigDecimal mean = BigDecimal.valueOf(baseline)
                        .divide(BigDecimal.valueOf(cfg.baselineWindows), 2, RoundingMode.HALF_EVEN).stripTrailingZeros();
                    String payload = "{\"action_id\":\"" + key + "\",\"action\":\"notify\",\"rule\":{\"id\":\"" + cfg.ruleId
                        + "\",\"version\":" + cfg.ruleVersion + "},\"sku\":\"" + sku + "\",\"trigger\":{\"type\":\"window\",\"start\":\""
                        + rfc3339(start) + "\",\"end\":\"" + rfc3339(start + size) + "\"},\"evidence\":{\"window_units\":" + units
                        + ",\"baseline_windows\":" + cfg.baselineWindows + ",\"baseline_units\":" + baseline
                        + ",\"baseline_mean\":\"" + mean.toPlainString() + "\",\"factor\":\"" + cfg.factor + "\",\"min_units\":"
                        + cfg.minUnits + "},\"created_at\":\"" + rfc3339(t) + "\"}";
                    RecordHeaders h = new RecordHeaders();
                    h.add("tm.append_ms", Long.toString(appendMs).getBytes(StandardCharsets.UTF_8));
                    ctx.forward(new Record<String, Object>(key, payload, rec.timestamp(), h), "actions");
                }
            }
            store.put(sku, s.encode());
        }
    }

    static final class SkuState {
        final TreeMap<Long, Long> windows = new TreeMap<>();
        final TreeSet<Long> fired = new TreeSet<>();

        static SkuState decode(byte[] v) {
            SkuState s = new SkuState();
            if (v == null) return s;
            ByteBuffer b = ByteBuffer.wrap(v);
            int n = b.getInt();
            for (int i = 0; i < n; i++) s.windows.put(b.getLong(), b.getLong());
            int f = b.getInt();
            for (int i = 0; i < f; i++) s.fired.add(b.getLong());
            return s;
        }

        byte[] encode() {
            ByteBuffer b = ByteBuffer.allocate(8 + 16 * windows.size() + 8 * fired.size());
            b.putInt(windows.size());
            for (Map.Entry<Long, Long> e : windows.entrySet()) b.putLong(e.getKey()).putLong(e.getValue());
            b.putInt(fired.size());
            for (long f : fired) b.putLong(f);
            return b.array();
        }
    }
}
