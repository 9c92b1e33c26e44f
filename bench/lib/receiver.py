#!/usr/bin/env python3
"""A tiny action endpoint for the benchmarks: answers every POST with 200 at once and appends
one JSON line per request to OUT: {"t": receive time (ms), "key": Idempotency-Key, "src": the
tidemark-source-append-time header (broker append time of the record that fired the action,
ms; null from senders without it), "body": payload}.

    receiver.py PORT OUT

HTTP/1.1 keep-alive, one thread per connection. Actions are rare relative to events (at most
one per SKU per 1-minute window per rule), so this is far from being a bottleneck.
"""
import json, sys, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

port, out = int(sys.argv[1]), sys.argv[2]
lock = threading.Lock()
f = open(out, "a", buffering=1)


class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(n).decode("utf-8", "replace")
        key = self.headers.get("Idempotency-Key", "")
        src = self.headers.get("tidemark-source-append-time")
        line = json.dumps({"t": int(time.time() * 1000), "key": key, "src": int(src) if src else None, "body": body})
        with lock:
            f.write(line + "\n")
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *a):
        pass


ThreadingHTTPServer.daemon_threads = True
ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()
