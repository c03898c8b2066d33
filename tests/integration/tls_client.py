#!/usr/bin/env python3
"""Python's own TLS client against heft, for tls_test.cc.

Every mode connects to 127.0.0.1:PORT and sends NAME as SNI and Host,
verifying heft's certificate against --ca. Every wait is bounded.

  split   N requests over C keep-alive connections; prints "statuses {200: N}"
  resume  two connections, the second offering the first's session; prints "reused True|False"
  hold    a request, then (once --flag exists) another on the same connection;
          prints "first STATUS" and "second STATUS"
"""
import argparse
import collections
import http.client
import os
import socket
import ssl
import sys
import time


def connect(args, context, session=None):
    raw = socket.create_connection(("127.0.0.1", args.port), timeout=10)
    tls = context.wrap_socket(raw, server_hostname=args.name, session=session)
    conn = http.client.HTTPConnection(args.name, args.port, timeout=10)
    conn.sock = tls
    return conn, tls


def get(conn, path="/"):
    conn.request("GET", path, headers={"Host": args.name})
    response = conn.getresponse()
    response.read()
    return response.status


parser = argparse.ArgumentParser()
parser.add_argument("mode", choices=["split", "resume", "hold"])
parser.add_argument("--port", type=int, required=True)
parser.add_argument("--ca", required=True)
parser.add_argument("--name", required=True)
parser.add_argument("--requests", type=int, default=1000)
parser.add_argument("--connections", type=int, default=10)
parser.add_argument("--tls", choices=["1.2", "1.3"], default="1.3")
parser.add_argument("--flag", default="")
args = parser.parse_args()

context = ssl.create_default_context(cafile=args.ca)
version = ssl.TLSVersion.TLSv1_2 if args.tls == "1.2" else ssl.TLSVersion.TLSv1_3
context.minimum_version = version
context.maximum_version = version

if args.mode == "split":
    statuses = collections.Counter()
    per_connection = args.requests // args.connections
    for c in range(args.connections):
        conn, _ = connect(args, context)
        count = per_connection + (1 if c < args.requests % args.connections else 0)
        for _ in range(count):
            statuses[get(conn)] += 1
        conn.close()
    print("statuses", dict(statuses))
elif args.mode == "resume":
    conn, tls = connect(args, context)
    get(conn)  # TLS 1.3 sends its tickets after the handshake: read a response first
    session = tls.session
    conn.close()
    conn, tls = connect(args, context, session=session)
    status = get(conn)
    print("reused", tls.session_reused, "status", status)
    conn.close()
else:
    conn, tls = connect(args, context)
    print("first", get(conn), flush=True)
    deadline = time.monotonic() + 60
    while not os.path.exists(args.flag):
        if time.monotonic() > deadline:
            print("no flag within 60 s", flush=True)
            sys.exit(1)
        time.sleep(0.05)
    print("second", get(conn), flush=True)
    conn.close()
