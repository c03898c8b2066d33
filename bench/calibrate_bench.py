#!/usr/bin/env python3
"""`heft calibrate` on the judged fleet: capacities, weights and wall time.

Three `heft demo-backend`s with --workers 6, 2, 1 and --delay 10ms (nominal
capacities 600, 200 and 100 req/s; a request takes about 10.7 ms here, so about
560, 187 and 93) measured by `heft calibrate --config Heftfile --json` with its
default --duration 60s. Checks each capacity within --tolerance (15 %) of the
nominal one, the weights 6:2:1, and the whole run under --limit (60 s) of wall
time; prints the figures and exits 1 if one fails.

    bench/calibrate_bench.py [--heft build/heft] [--runs 1] [--duration 60s] [--tolerance 0.15] [--limit 60]

Everything runs on 127.0.0.1; every process started here is stopped by PID.
"""
import argparse, json, os, shutil, signal, subprocess, sys, tempfile, time

from sim_vs_real import free_port, wait_port  # (this folder's)

FLEET = [("a", 6, 600), ("b", 2, 200), ("c", 1, 100)]  # name, workers, nominal req/s
WEIGHTS = [6, 2, 1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--heft", default=os.path.join(os.path.dirname(__file__), "..", "build", "heft"))
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--duration", default="60s")
    ap.add_argument("--tolerance", type=float, default=0.15)
    ap.add_argument("--limit", type=float, default=60)
    args = ap.parse_args()

    work = tempfile.mkdtemp(prefix="calibrate_bench.")
    procs = []
    failed = False
    try:
        dials = []
        for name, workers, _ in FLEET:
            port = free_port()
            procs.append(subprocess.Popen(
                [args.heft, "demo-backend", "--listen", f"127.0.0.1:{port}", "--name", name,
                 "--workers", str(workers), "--delay", "10ms"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            wait_port(port)
            dials.append(f"127.0.0.1:{port}")
        heftfile = os.path.join(work, "Heftfile")
        with open(heftfile, "w") as f:
            f.write("{\n\tadmin off\n}\n:%d {\n\treverse_proxy %s\n}\n" % (free_port(), " ".join(dials)))
        for run in range(args.runs):
            start = time.monotonic()
            done = subprocess.run([args.heft, "calibrate", "--config", heftfile, "--duration", args.duration, "--json"],
                                  capture_output=True, text=True, timeout=args.limit * 3)
            wall = time.monotonic() - start
            if done.returncode != 0:
                print(f"run {run + 1}: heft calibrate exited {done.returncode}\n{done.stderr}", file=sys.stderr)
                failed = True
                continue
            report = json.loads(done.stdout)
            by_address = {b["address"]: b for b in report["backends"]}
            weights = [by_address[d].get("weight") for d in dials]
            line = [f"run {run + 1}: {wall:.1f}s"]
            for (name, _, nominal), d in zip(FLEET, dials):
                capacity = by_address[d].get("capacity", 0)
                off = capacity / nominal - 1
                ok = abs(off) <= args.tolerance
                failed |= not ok
                line.append(f"{name} {capacity:.0f} req/s ({off:+.1%}{'' if ok else ' FAIL'})")
            weights_ok = weights == WEIGHTS
            time_ok = wall < args.limit
            failed |= not (weights_ok and time_ok)
            line.append(f"weights {':'.join(map(str, weights))}{'' if weights_ok else ' FAIL'}")
            if not time_ok:
                line.append(f"over {args.limit:.0f}s FAIL")
            print(", ".join(line))
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
