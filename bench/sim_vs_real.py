#!/usr/bin/env python3
"""Sim and reality agree: one small scenario run twice, by `heft sim` and for real.

The same arrival times (a Poisson trace written here) go to `heft sim` and,
replayed open-loop over HTTP, to a real `heft run` in front of `heft demo-backend`
processes whose --workers and --delay model the simulated servers (fixed service
times). Shares come from the X-Backend header of every answer; utilisation is
requests x service time / (workers x duration) on both sides.

    bench/sim_vs_real.py [--heft build/heft] [--duration 20] [--rate 120] [--policy least_conn]

Prints a comparison table and exits 1 if a share differs by more than 2
percentage points or a utilisation by more than 10 % (relative). Everything
runs on 127.0.0.1 and every process started here is stopped by PID.
"""
import argparse, asyncio, atexit, json, os, random, shutil, signal, socket, subprocess, sys, tempfile, time

SERVERS = [  # name, workers, service seconds, weight
    ("big", 3, 0.025, 3),
    ("small1", 1, 0.025, 1),
    ("small2", 1, 0.050, 1),
]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, timeout=10):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"port {port} never opened")


async def replay(port, arrivals, limit_s):
    """Sends one GET per arrival time (open loop); returns X-Backend counts."""
    counts, errors = {}, 0
    idle = []  # keep-alive connections not in use

    async def one():
        nonlocal errors
        conn = idle.pop() if idle else None
        try:
            if conn is None:
                conn = await asyncio.open_connection("127.0.0.1", port)
            reader, writer = conn
            writer.write(b"GET / HTTP/1.1\r\nHost: sim\r\n\r\n")
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), limit_s)
            length, backend = 0, None
            for line in head.split(b"\r\n"):
                k, _, v = line.partition(b":")
                if k.lower() == b"content-length":
                    length = int(v)
                elif k.lower() == b"x-backend":
                    backend = v.strip().decode()
            await reader.readexactly(length)
            counts[backend] = counts.get(backend, 0) + 1
            idle.append(conn)
        except Exception:
            errors += 1

    start = time.monotonic()
    tasks = []
    for t in arrivals:
        delay = start + t - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one()))
    await asyncio.gather(*tasks)
    for _, w in idle:
        w.close()
    return counts, errors


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--heft", default=os.path.join(os.path.dirname(__file__), "..", "build", "heft"))
    ap.add_argument("--duration", type=float, default=20)
    ap.add_argument("--rate", type=float, default=120)
    ap.add_argument("--policy", default="least_conn")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()

    rng = random.Random(args.seed)
    arrivals, t = [], 0.0
    while True:
        t += rng.expovariate(args.rate)
        if t >= args.duration:
            break
        arrivals.append(t)

    work = tempfile.mkdtemp(prefix="heft-sim-vs-real-")
    atexit.register(shutil.rmtree, work, ignore_errors=True)
    with open(os.path.join(work, "arrivals.txt"), "w") as f:
        f.writelines(f"{a:.6f}\n" for a in arrivals)
    scenario = {
        "name": "sim-vs-real", "seed": args.seed, "duration": args.duration, "trace": "arrivals.txt",
        "servers": [{"name": n, "size": w, "service": s, "dist": "fixed", "weight": wt} for n, w, s, wt in SERVERS],
        "policies": [args.policy],
    }
    with open(os.path.join(work, "scenario.json"), "w") as f:
        json.dump(scenario, f)
    sim = json.loads(subprocess.run([args.heft, "sim", "--scenario", os.path.join(work, "scenario.json"), "--json"],
                                    check=True, capture_output=True, text=True).stdout)
    sim_servers = {s["name"]: s for s in sim["scenarios"][0]["policies"][0]["servers"]}

    procs = []
    try:
        ports = {}
        for name, workers, service, _ in SERVERS:
            ports[name] = free_port()
            procs.append(subprocess.Popen([args.heft, "demo-backend", "--listen", f"127.0.0.1:{ports[name]}", "--name", name,
                                           "--workers", str(workers), "--delay", f"{int(service * 1000)}ms", "--body-bytes", "64"],
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        proxy_port = free_port()
        upstreams = "\n".join(f"\t\tto 127.0.0.1:{ports[n]} weight {wt}" for n, _, _, wt in SERVERS)
        with open(os.path.join(work, "Heftfile"), "w") as f:
            f.write(f"{{\n\tadmin off\n\tworkers 1\n}}\n:{proxy_port} {{\n\treverse_proxy {{\n{upstreams}\n"
                    f"\t\tlb_policy {args.policy}\n\t}}\n}}\n")
        procs.append(subprocess.Popen([args.heft, "run", "--config", os.path.join(work, "Heftfile")],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        for p in list(ports.values()) + [proxy_port]:
            wait_port(p)
        counts, errors = asyncio.run(replay(proxy_port, arrivals, limit_s=30))
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()

    total = sum(counts.values())
    ok = errors == 0 and total == len(arrivals)
    print(f"{len(arrivals)} arrivals over {args.duration:g} s, policy {args.policy}; real run: {total} answered, {errors} errors")
    print()
    print("| server | workers | service | sim share | real share | sim util | real util |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, workers, service, _ in SERVERS:
        real_share = counts.get(name, 0) / max(total, 1)
        real_util = counts.get(name, 0) * service / (workers * args.duration)
        s = sim_servers[name]
        print(f"| {name} | {workers} | {service * 1000:g} ms | {s['share'] * 100:.1f} % | {real_share * 100:.1f} % | "
              f"{s['utilisation'] * 100:.1f} % | {real_util * 100:.1f} % |")
        if abs(real_share - s["share"]) > 0.02 or abs(real_util - s["utilisation"]) > 0.10 * s["utilisation"]:
            ok = False
    print()
    print("agree" if ok else "DISAGREE")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
