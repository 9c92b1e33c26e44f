#!/usr/bin/env python3
"""Splits a process's RSS by who mapped the memory, from /proc/PID/smaps, every --every s.

    maps_sampler.py OUT.jsonl --pidfile FILE [--every 30]

One JSON line per sample: {"t", "rss_bytes", "by": {class: bytes}} with the classes
- mimalloc: anonymous mappings of 1 GiB or more, the arenas mimalloc (tidemark's allocator
  until soak run 9) reserves. jemalloc (the allocator since) maps its extents at any size, so
  under it this class and anon_other both hold the heap: read their sum;
- glibc_main: glibc's main arena ([heap], grown by brk);
- glibc_arenas: glibc's per-thread arenas, 64 MiB-aligned anonymous heaps. C and C++
  libraries allocate here: RocksDB (block cache, memtables, compaction buffers) and librdkafka;
- anon_other: other anonymous mappings (thread stacks, large glibc allocations mmapped
  on their own);
- files: mapped files (the binary and shared libraries).
RocksDB's own accounting (tidemark_state_memory_bytes) says how much of glibc's arenas the
store should hold; the difference is what the allocator keeps beyond it.
"""
import argparse, json, re, time

ARENA = 64 << 20
HEAD = re.compile(r'^([0-9a-f]+)-([0-9a-f]+) (\S+) \S+ \S+ (\d+)\s*(.*)$')


def mappings(pid):
    out, cur = [], None
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            m = HEAD.match(line)
            if m:
                cur = {"start": int(m[1], 16), "end": int(m[2], 16), "inode": int(m[4]), "name": m[5].strip(), "rss": 0}
                out.append(cur)
            elif line.startswith("Rss:") and cur is not None:
                cur["rss"] = int(line.split()[1]) * 1024
    return out


def classify(maps):
    bases = {m["start"] for m in maps if m["start"] % ARENA == 0 and m["end"] - m["start"] <= ARENA and m["inode"] == 0 and not m["name"]}
    by = {"mimalloc": 0, "glibc_main": 0, "glibc_arenas": 0, "anon_other": 0, "files": 0}
    for m in maps:
        size = m["end"] - m["start"]
        if m["inode"] != 0 or m["name"].startswith("/"):
            k = "files"
        elif m["name"] == "[heap]":
            k = "glibc_main"
        elif size >= (256 << 20):
            k = "mimalloc"
        elif m["start"] - m["start"] % ARENA in bases and not m["name"]:
            k = "glibc_arenas"
        else:
            k = "anon_other"
        by[k] += m["rss"]
    return by


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--pidfile", required=True)
    ap.add_argument("--every", type=float, default=30.0)
    a = ap.parse_args()
    with open(a.out, "a") as out:
        while True:
            try:
                pid = open(a.pidfile).read().strip()
                by = classify(mappings(pid))
                out.write(json.dumps({"t": time.time(), "rss_bytes": sum(by.values()), "by": by}) + "\n")
                out.flush()
            except (OSError, ValueError):
                pass
            time.sleep(a.every)


if __name__ == "__main__":
    main()
