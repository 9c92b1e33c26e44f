"""The action endpoint the systems POST to, in the harness's process (a thread per connection).

Mode "ok" answers 200 at once and records one entry per POST: (receive time ms, the
Idempotency-Key, the `tidemark-source-append-time` header as ms or None, the SKU of the body
or None). Mode "refuse" answers 503 to every POST and only counts them (memory stays flat
whatever the storm's length). Actions are rare next to events (at most one per SKU, window
and rule), so a Python endpoint is far from being the bottleneck."""
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Endpoint:
    def __init__(self, mode="ok"):
        if mode not in ("ok", "refuse"):
            raise ValueError(f"endpoint mode {mode!r}: expected ok or refuse")
        self.mode = mode
        self.posts = []  # (t_ms, key, src_ms, sku)
        self.refused = 0
        self.lock = threading.Lock()
        ep = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):
                n = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(n)
                if ep.mode == "refuse":
                    with ep.lock:
                        ep.refused += 1
                    self.send_response(503)
                else:
                    t = int(time.time() * 1000)
                    src = self.headers.get("tidemark-source-append-time")
                    try:
                        sku = json.loads(body).get("sku")
                    except (ValueError, AttributeError):
                        sku = None
                    with ep.lock:
                        ep.posts.append((t, self.headers.get("Idempotency-Key", ""), int(src) if src else None, sku))
                    self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *a):
                pass

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request, client_address):
                pass  # a client that hung up (a killed processor): nothing to record

        self.server = Server(("127.0.0.1", 0), H)
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/actions"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def snapshot(self):
        with self.lock:
            return list(self.posts)

    def close(self):
        self.server.shutdown()
        self.server.server_close()
