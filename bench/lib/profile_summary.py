#!/usr/bin/env python3
"""Inclusive costs on one thread from folded stacks (inferno-collapse-perf / stackcollapse-perf).

    profile_summary.py FOLDED THREAD_NAME [--meta key=value ...]

A folded line is `thread;frame;frame;...;leaf COUNT`. A category's inclusive share is the
samples whose stack contains a frame matching any of its patterns (substring, case-sensitive),
over all samples of the thread; categories can overlap (e.g. `Derived::encode` runs inside
`finish`), so they do not add up to 100 %. Prints a Markdown block: the metadata, the thread's
share of all samples, the categories, and the hottest self (leaf) frames on the thread.
"""
import argparse
import re
from collections import Counter

# (category, patterns) in the order of the hot path.
CATEGORIES = [
    ("poll: consumer poll, fetch, message copy", ["rd_kafka_consumer_poll", "BaseConsumer", "rd_kafka_poll"]),
    ("ingest (orders): everything in PartitionTask::ingest", ["PartitionTask>::ingest", "PartitionTask::ingest"]),
    ("  normalise (schema v1/v2 → event, incl. JSON parse)", ["normalize::normalize_order", "normalize_order_with"]),
    ("  JSON parse (serde_json, anywhere)", ["serde_json::de::", "serde_json::value::de", "serde_json::read::"]),
    ("finish (orders): dedup, apply, emit, stage", ["PartitionTask>::finish", "PartitionTask::finish"]),
    ("  dedup lookup (RocksDB multi-get)", ["dedup_lookup"]),
    ("  derive lines (repartition records)", ["derive_lines"]),
    ("  repartition encode (Derived::encode)", ["Derived>::encode", "Derived::encode"]),
    ("  dashboard / provisional records", ["dashboard::record_bytes", "ProvisionalRecord>::to_bytes", "ProvisionalRecord::to_bytes", "dashboard::apply"]),
    ("  codec::encode (bincode state values)", ["codec::encode"]),
    ("SKU task ingest (repartition decode, merge buffer)", ["SkuTask>::ingest", "SkuTask::ingest"]),
    ("  repartition decode (Derived::decode)", ["Derived>::decode", "Derived::decode"]),
    ("SKU task finish (merge, rules, outbox)", ["SkuTask>::finish", "SkuTask::finish"]),
    ("combine tasks", ["CombineTask"]),
    ("produce (OutputSink send, librdkafka produce)", ["OutputSink", "rd_kafka_producev", "rd_kafka_produceva", "rd_kafka_produce"]),
    ("  header allocation (rd_kafka_headers_new)", ["rd_kafka_headers_new", "OwnedHeaders"]),
    ("RocksDB write (WriteBatch put, DB::Write)", ["rocksdb::WriteBatch", "WriteBatchInternal", "rocksdb::DBImpl::Write", "rocksdb_writebatch", "rocksdb_write"]),
    ("RocksDB read (Get, MultiGet, iterators)", ["rocksdb::DBImpl::Get", "rocksdb::DBImpl::MultiGet", "DBIter", "rocksdb_multi_get", "rocksdb_get"]),
    ("commit hand-off (committer, flush)", ["committer::", "Committer"]),
    ("memory: malloc/free/memcpy", ["mi_malloc", "mi_free", "_mi_", "malloc", "__memmove", "__memcpy", "realloc", "cfree"]),
    ("kernel", ["[kernel.kallsyms]", "entry_SYSCALL", "do_syscall"]),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("folded")
    ap.add_argument("thread")
    ap.add_argument("--meta", action="append", default=[])
    ap.add_argument("--top", type=int, default=25)
    a = ap.parse_args()

    total_all = 0
    stacks = []
    per_thread = Counter()
    for line in open(a.folded, errors="replace"):
        line = line.rstrip("\n")
        if not line:
            continue
        stack, _, n = line.rpartition(" ")
        n = int(n)
        total_all += n
        frames = stack.split(";")
        thread = re.sub(r"[-/ ]\d+$", "", frames[0])
        per_thread[thread] += n
        if frames[0] == a.thread or thread == a.thread:
            stacks.append((frames[1:], n))
    total = sum(n for _, n in stacks)

    print("```")
    for m in a.meta:
        print(m)
    print(f"weight (cycles of the samples): {total_all} in all threads, {total} on the stream thread ({a.thread}, "
          f"{100 * total / max(1, total_all):.1f} %)")
    print("```\n")
    print("Samples per thread name (all threads):\n")
    print("| thread | weight | share |")
    print("|---|---:|---:|")
    for t, n in per_thread.most_common(12):
        print(f"| {t} | {n} | {100 * n / max(1, total_all):.1f} % |")
    print("\nInclusive cost on the stream thread (a sample counts for a category when any frame of its")
    print("stack matches; categories nest, so they do not add up to 100 %):\n")
    print("| category | weight | share of stream thread |")
    print("|---|---:|---:|")
    for name, pats in CATEGORIES:
        n = sum(c for frames, c in stacks if any(p in f for f in frames for p in pats))
        print(f"| {name} | {n} | {100 * n / max(1, total):.1f} % |")
    leaf = Counter()
    for frames, c in stacks:
        if frames:
            leaf[frames[-1]] += c
    print(f"\nHottest self (leaf) frames on the stream thread (top {a.top}):\n")
    print("| frame | weight | share |")
    print("|---|---:|---:|")
    for f, n in leaf.most_common(a.top):
        f = f.replace("|", "\\|")
        if len(f) > 110:
            f = f[:107] + "..."
        print(f"| `{f}` | {n} | {100 * n / max(1, total):.1f} % |")


if __name__ == "__main__":
    main()
