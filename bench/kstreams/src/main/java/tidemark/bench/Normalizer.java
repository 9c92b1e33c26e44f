package tidemark.bench;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;
import com.fasterxml.jackson.core.StreamReadFeature;

import java.math.BigDecimal;
import java.math.BigInteger;
import java.time.OffsetDateTime;
import java.time.format.DateTimeFormatter;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/**
 * Port of tidemark's normalisation layer (topology/src/normalize.rs, v1.rs, v2.rs): schema v1
 * and v2 order records into one canonical event, or a rejection with the same reason code
 * and the same ranking ("earliest reason in CHECK_ORDER wins"). One streaming pass with
 * Jackson's JsonParser; no tree is built (the Rust side does not build one either).
 */
public final class Normalizer {
    public static final long MAX_FUTURE_SKEW_MS = 3_600_000L;
    static final BigDecimal MAX_AMOUNT = new BigDecimal("1000000000000000");

    // Reason ranks, as in CHECK_ORDER.
    static final String[] REASONS = {"not_json", "unknown_schema_version", "missing_event_id", "unknown_event_type",
        "unparsable_time", "unknown_currency", "mixed_currencies", "non_positive_quantity", "invalid_amount",
        "event_time_in_future", "invalid_field"};

    static final Map<String, Integer> CURRENCIES = Map.ofEntries(
        Map.entry("AUD", 2), Map.entry("BHD", 3), Map.entry("BRL", 2), Map.entry("CAD", 2), Map.entry("CHF", 2),
        Map.entry("CNY", 2), Map.entry("DKK", 2), Map.entry("EUR", 2), Map.entry("GBP", 2), Map.entry("HKD", 2),
        Map.entry("INR", 2), Map.entry("JPY", 0), Map.entry("KRW", 0), Map.entry("KWD", 3), Map.entry("MXN", 2),
        Map.entry("NOK", 2), Map.entry("NZD", 2), Map.entry("SEK", 2), Map.entry("SGD", 2), Map.entry("USD", 2));

    private static final JsonFactory JSON = JsonFactory.builder()
        .enable(StreamReadFeature.STRICT_DUPLICATE_DETECTION).build();

    public enum Kind { PLACED, CANCELLED, SHIPPED, REFUNDED }

    public static final class Line {
        public String sku;
        public long qty;
        public BigDecimal unitPrice;
    }

    public static final class Event {
        public String eventId;
        public String orderId;
        public Kind kind;
        public long eventTimeMs;
        public String store;
        public String currency; // null only for a shipped event without money
        public List<Line> lines;
        public BigDecimal refund;

        public long units() {
            long u = 0;
            for (Line l : lines) u += l.qty;
            return u;
        }

        public BigDecimal linesAmount() {
            if (currency == null) return BigDecimal.ZERO;
            BigDecimal s = BigDecimal.ZERO;
            for (Line l : lines) if (l.unitPrice != null) s = s.add(l.unitPrice.multiply(BigDecimal.valueOf(l.qty)));
            return s.setScale(CURRENCIES.get(currency), java.math.RoundingMode.HALF_UP);
        }
    }

    /** Result: either {@code event} or {@code reason} (+ detail) is set. */
    public static final class Result {
        public Event event;
        public String reason;
        public String detail;
    }

    // ---- a shallow JSON value, as the Rust side's `Json` ----
    static final int NULL = 0, BOOL = 1, INT = 2, BIGINT = 3, FLOAT = 4, STR = 5, ARRAY = 6, OBJECT = 7;

    static final class V {
        int t;
        long i;
        double f;
        String s;
        List<Map<String, Object>> items; // for arrays of objects: each element a field map (null = not an object)
        Map<String, Object> obj; // for objects: field map
    }

    private static final class Bad extends RuntimeException {
        Bad(String m) { super(m, null, false, false); }
    }

    /** Reads any value; arrays read their elements as objects of scalars/objects (2 levels). */
    private static V value(JsonParser p, int depth) throws java.io.IOException {
        JsonToken tok = p.currentToken();
        V v = new V();
        switch (tok) {
            case VALUE_NULL: v.t = NULL; break;
            case VALUE_TRUE: case VALUE_FALSE: v.t = BOOL; break;
            case VALUE_NUMBER_INT:
                if (p.getNumberType() == JsonParser.NumberType.BIG_INTEGER) {
                    BigInteger b = p.getBigIntegerValue();
                    v.t = b.signum() > 0 ? BIGINT : FLOAT; // negative below i64: serde reads it as f64
                } else {
                    v.t = INT;
                    v.i = p.getLongValue();
                }
                break;
            case VALUE_NUMBER_FLOAT: v.t = FLOAT; v.f = p.getDoubleValue(); break;
            case VALUE_STRING: v.t = STR; v.s = p.getText(); break;
            case START_ARRAY:
                v.t = ARRAY;
                if (depth < 2) {
                    v.items = new ArrayList<>();
                    while (p.nextToken() != JsonToken.END_ARRAY) {
                        if (p.currentToken() == JsonToken.START_OBJECT) v.items.add(object(p, depth + 1));
                        else { v.items.add(null); p.skipChildren(); }
                    }
                } else p.skipChildren();
                break;
            case START_OBJECT:
                v.t = OBJECT;
                if (depth < 3) v.obj = object(p, depth + 1);
                else p.skipChildren();
                break;
            default: throw new Bad("unexpected token");
        }
        return v;
    }

    private static Map<String, Object> object(JsonParser p, int depth) throws java.io.IOException {
        Map<String, Object> m = new java.util.HashMap<>(8);
        while (p.nextToken() == JsonToken.FIELD_NAME) {
            String name = p.currentName();
            p.nextToken();
            V v = value(p, depth);
            if (v.t != NULL) m.put(name, v);
        }
        return m;
    }

    private static final class Checks {
        int rank = Integer.MAX_VALUE;
        String reason, detail;

        void fail(String r, String d) {
            int k = rank(r);
            if (k < rank) { rank = k; reason = r; detail = d; }
        }
    }

    static int rank(String r) {
        for (int i = 0; i < REASONS.length; i++) if (REASONS[i].equals(r)) return i;
        return REASONS.length;
    }

    private static Result reject(String reason, String detail) {
        Result r = new Result();
        r.reason = reason;
        r.detail = detail;
        return r;
    }

    private static V get(Map<String, Object> m, String k) { return (V) m.get(k); }

    private static String text(V v) {
        return v != null && v.t == STR && !v.s.isBlank() ? v.s : null;
    }

    public static Result normalizeOrder(byte[] bytes, long appendMs) {
        Map<String, Object> raw;
        try (JsonParser p = JSON.createParser(bytes)) {
            if (p.nextToken() != JsonToken.START_OBJECT) {
                // any other JSON value is `not an object`; garbage is a syntax error: both not_json
                return reject("not_json", "top level is not an object");
            }
            raw = object(p, 0);
            if (p.nextToken() != null) return reject("not_json", "trailing data");
        } catch (Exception e) {
            return reject("not_json", String.valueOf(e.getMessage()));
        }
        V sv = get(raw, "schema_version");
        int version;
        if (sv != null && sv.t == INT && (sv.i == 1 || sv.i == 2)) version = (int) sv.i;
        else return reject("unknown_schema_version", "schema_version");
        String eventId = text(get(raw, "event_id"));
        if (eventId == null) return reject("missing_event_id", "event_id");
        return version == 1 ? v1(raw, eventId, appendMs) : v2(raw, eventId, appendMs);
    }

    private static Kind kind(V v, String placed, String cancelled, String shipped, String refunded) {
        if (v == null || v.t != STR) return null;
        String s = v.s;
        if (s.equals(placed)) return Kind.PLACED;
        if (s.equals(cancelled)) return Kind.CANCELLED;
        if (s.equals(shipped)) return Kind.SHIPPED;
        if (s.equals(refunded)) return Kind.REFUNDED;
        return null;
    }

    static Long rfc3339Ms(String s) {
        try {
            return OffsetDateTime.parse(s, DateTimeFormatter.ISO_OFFSET_DATE_TIME).toInstant().toEpochMilli();
        } catch (Exception e) {
            return null;
        }
    }

    private static Long quantity(Checks c, V q, String name) {
        if (q == null) { c.fail("invalid_field", name + " missing"); return null; }
        if (q.t == INT && q.i <= 0 || q.t == FLOAT && q.f <= 0.0) { c.fail("non_positive_quantity", name); return null; }
        if (q.t == BIGINT || q.t == INT && q.i > 0xFFFF_FFFFL) { c.fail("invalid_field", name + " exceeds u32"); return null; }
        if (q.t != INT) { c.fail("invalid_field", name + " is not an integer"); return null; }
        return q.i;
    }

    private static String currency(Checks c, V v, String name) {
        if (v != null && v.t == STR && CURRENCIES.containsKey(v.s)) return v.s;
        c.fail("unknown_currency", name);
        return null;
    }

    private static BigDecimal bounded(Checks c, BigDecimal a, String name) {
        if (a.signum() < 0) { c.fail("invalid_amount", name + " is negative"); return null; }
        if (a.compareTo(MAX_AMOUNT) > 0) { c.fail("invalid_amount", name + " exceeds the per-event maximum"); return null; }
        return a;
    }

    private static BigDecimal major(Checks c, String cur, V v, String name) {
        if (v.t != STR) { c.fail("invalid_amount", name + " is not a decimal string"); return null; }
        String s = v.s;
        String u = s.startsWith("-") ? s.substring(1) : s;
        int dot = u.indexOf('.');
        String ip = dot < 0 ? u : u.substring(0, dot), fp = dot < 0 ? "" : u.substring(dot + 1);
        boolean ok = !ip.isEmpty() && (dot < 0 || !fp.isEmpty()) && digits(ip) && digits(fp)
            && fp.length() <= CURRENCIES.get(cur);
        if (!ok) { c.fail("invalid_amount", name + " is not a decimal"); return null; }
        return bounded(c, new BigDecimal(s).setScale(CURRENCIES.get(cur)), name);
    }

    private static boolean digits(String s) {
        for (int i = 0; i < s.length(); i++) if (s.charAt(i) < '0' || s.charAt(i) > '9') return false;
        return true;
    }

    private static List<Map<String, Object>> requiredList(Checks c, V v, String name) {
        if (v != null && v.t == ARRAY && v.items != null && !v.items.isEmpty()) return v.items;
        c.fail("invalid_field", name + (v == null ? " missing" : v.t != ARRAY ? " is not an array" : " is empty"));
        return List.of();
    }

    private static void linesTotal(Checks c, List<Line> lines, String name) {
        BigDecimal t = BigDecimal.ZERO;
        for (Line l : lines) if (l.unitPrice != null) t = t.add(l.unitPrice.multiply(BigDecimal.valueOf(l.qty)));
        if (t.compareTo(MAX_AMOUNT) > 0) c.fail("invalid_amount", name + " total exceeds maximum");
    }

    private static Result finish(Checks c, Event e, long appendMs) {
        if (e.eventTimeMs > appendMs + MAX_FUTURE_SKEW_MS) c.fail("event_time_in_future", "event time");
        if (c.reason != null) return reject(c.reason, c.detail);
        Result r = new Result();
        r.event = e;
        return r;
    }

    private static Result v1(Map<String, Object> raw, String eventId, long appendMs) {
        Kind kind = kind(get(raw, "event_type"), "order_placed", "order_cancelled", "order_shipped", "order_refunded");
        if (kind == null) return reject("unknown_event_type", "event_type");
        V et = get(raw, "event_time");
        Long t = et != null && et.t == STR ? rfc3339Ms(et.s) : null;
        if (t == null) return reject("unparsable_time", "event_time");
        Checks c = new Checks();
        Event e = new Event();
        e.eventId = eventId;
        e.kind = kind;
        e.eventTimeMs = t;
        e.orderId = text(get(raw, "order_id"));
        if (e.orderId == null) c.fail("invalid_field", "order_id");
        e.store = text(get(raw, "store"));
        if (e.store == null) c.fail("invalid_field", "store");
        List<Map<String, Object>> raws = kind == Kind.REFUNDED ? List.of() : requiredList(c, get(raw, "lines"), "lines");
        boolean carriesMoney = kind != Kind.SHIPPED;
        if (!carriesMoney) for (Map<String, Object> l : raws) if (l != null && l.containsKey("unit_price")) carriesMoney = true;
        V curField = get(raw, "currency");
        String declared = curField == null && !carriesMoney ? null : currency(c, curField, "currency");
        String cur = carriesMoney ? declared : null;
        e.currency = cur;
        e.lines = new ArrayList<>(raws.size());
        for (int i = 0; i < raws.size(); i++) {
            Map<String, Object> l = raws.get(i);
            Line line = new Line();
            e.lines.add(line);
            if (l == null) { c.fail("invalid_field", "lines[" + i + "] is not an object"); continue; }
            line.sku = text(get(l, "sku"));
            if (line.sku == null) c.fail("invalid_field", "lines[" + i + "].sku");
            Long q = quantity(c, get(l, "qty"), "lines[" + i + "].qty");
            line.qty = q == null ? 0 : q;
            V price = get(l, "unit_price");
            if (price == null) {
                if (kind != Kind.SHIPPED) c.fail("invalid_field", "lines[" + i + "].unit_price missing");
            } else if (cur != null) line.unitPrice = major(c, cur, price, "lines[" + i + "].unit_price");
        }
        linesTotal(c, e.lines, "lines");
        if (kind == Kind.REFUNDED) {
            V amount = get(raw, "amount");
            if (amount == null) c.fail("invalid_field", "amount missing");
            else if (cur != null) e.refund = major(c, cur, amount, "amount");
        }
        return finish(c, e, appendMs);
    }

    private static Result v2(Map<String, Object> raw, String eventId, long appendMs) {
        Kind kind = kind(get(raw, "type"), "ORDER_PLACED", "ORDER_CANCELLED", "ORDER_SHIPPED", "ORDER_REFUNDED");
        if (kind == null) return reject("unknown_event_type", "type");
        V ot = get(raw, "occurred_at_ms");
        if (ot == null || ot.t != INT || ot.i < -8_334_601_228_800_000L || ot.i > 8_210_266_876_799_999L)
            return reject("unparsable_time", "occurred_at_ms");
        Checks c = new Checks();
        Event e = new Event();
        e.eventId = eventId;
        e.kind = kind;
        e.eventTimeMs = ot.i;
        e.orderId = text(get(raw, "order_id"));
        if (e.orderId == null) c.fail("invalid_field", "order_id");
        e.store = text(get(raw, "store_id"));
        if (e.store == null) c.fail("invalid_field", "store_id");
        V ch = get(raw, "channel");
        if (ch != null && ch.t != STR) c.fail("invalid_field", "channel is not a string");
        String[] first = {null};
        e.lines = new ArrayList<>();
        if (kind == Kind.REFUNDED) {
            V refund = get(raw, "refund");
            if (refund == null) c.fail("invalid_field", "refund missing");
            else e.refund = price(c, first, refund, "refund");
        } else {
            List<Map<String, Object>> raws = requiredList(c, get(raw, "items"), "items");
            for (int i = 0; i < raws.size(); i++) {
                Map<String, Object> l = raws.get(i);
                Line line = new Line();
                e.lines.add(line);
                if (l == null) { c.fail("invalid_field", "items[" + i + "] is not an object"); continue; }
                line.sku = text(get(l, "sku"));
                if (line.sku == null) c.fail("invalid_field", "items[" + i + "].sku");
                Long q = quantity(c, get(l, "quantity"), "items[" + i + "].quantity");
                line.qty = q == null ? 0 : q;
                V p = get(l, "price");
                if (p == null) {
                    if (kind != Kind.SHIPPED) c.fail("invalid_field", "items[" + i + "].price missing");
                } else line.unitPrice = price(c, first, p, "items[" + i + "].price");
            }
            linesTotal(c, e.lines, "items");
        }
        e.currency = first[0];
        return finish(c, e, appendMs);
    }

    private static BigDecimal price(Checks c, String[] first, V v, String name) {
        if (v.t != OBJECT || v.obj == null) { c.fail("invalid_amount", name + " is not an object"); return null; }
        String cur = currency(c, get(v.obj, "currency"), name + ".currency");
        if (cur == null) return null;
        if (first[0] == null) first[0] = cur;
        else if (!first[0].equals(cur)) c.fail("mixed_currencies", name + ".currency");
        V a = get(v.obj, "amount_minor");
        if (a == null || a.t != INT) { c.fail("invalid_amount", name + ".amount_minor"); return null; }
        return bounded(c, BigDecimal.valueOf(a.i, CURRENCIES.get(cur)), name + ".amount_minor");
    }
}
