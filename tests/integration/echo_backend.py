#!/usr/bin/env python3
"""A backend for the route tests: answers every request with 200 and a JSON
body saying what it saw (its name, the method, the request target as sent and
the header fields), so a test can check what heft (or Caddy) forwarded.

    echo_backend.py NAME PORT_FILE   # listens on 127.0.0.1, an ephemeral port written to PORT_FILE
"""
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Echo(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def handle_one(self):
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        body = json.dumps({
            "backend": NAME,
            "method": self.command,
            "target": self.path,
            "headers": [[k, v] for k, v in self.headers.items()],
        }).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Backend", NAME)
        self.send_header("X-Backend-Only", "1")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = do_PATCH = handle_one

    def log_message(self, *args):
        pass


NAME = sys.argv[1]
server = ThreadingHTTPServer(("127.0.0.1", 0), Echo)
server.daemon_threads = True
with open(sys.argv[2] + ".tmp", "w") as f:
    f.write(str(server.server_address[1]) + "\n")
import os
os.rename(sys.argv[2] + ".tmp", sys.argv[2])
server.serve_forever()
