"""Requests/s the API emulator serves through the official client: list of 1000 objects, watch fan-out,
and patch on 1000 objects. Later operator benchmarks compare against these to know they measure the
operator and not the emulator.

    .venv/bin/python bench/emulator_throughput.py [--objects 1000] [--watchers 10]
"""

from __future__ import annotations

import argparse
import threading
import time

import kubernetes

from kubelocal.apiserver import ApiServerThread


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=1000)
    parser.add_argument("--watchers", type=int, default=10)
    # 200, not 20: 20 lists took 40-80 ms, and whether one of the process's full garbage collections (~60 ms)
    # fell inside them halved the figure or not (an unrelated import moved it from ~500 to ~250 req/s).
    parser.add_argument("--lists", type=int, default=200)
    args = parser.parse_args()
    with ApiServerThread() as api:
        cfg = kubernetes.client.Configuration()
        cfg.host = api.url
        client = kubernetes.client.ApiClient(cfg)
        core = kubernetes.client.CoreV1Api(client)
        for i in range(args.objects):
            core.create_namespaced_config_map(
                "default", {"metadata": {"name": f"cm-{i}", "labels": {"i": str(i)}}, "data": {"k": "v" * 64}}
            )

        start = time.perf_counter()
        for _ in range(args.lists):
            assert len(core.list_namespaced_config_map("default", _preload_content=False).data) > 0
        list_rate = args.lists / (time.perf_counter() - start)
        print(f"list ({args.objects} objects): {list_rate:.1f} req/s")

        since = core.list_namespaced_config_map("default", limit=1).metadata.resource_version
        counts = [0] * args.watchers
        started = threading.Barrier(args.watchers + 1)

        def watch(slot: int) -> None:
            w_client = kubernetes.client.ApiClient(cfg)
            w_core = kubernetes.client.CoreV1Api(w_client)
            started.wait()
            for _ in kubernetes.watch.Watch().stream(
                w_core.list_namespaced_config_map, "default", resource_version=since, timeout_seconds=120
            ):
                counts[slot] += 1
                if counts[slot] >= args.objects:
                    break
            w_client.close()

        threads = [threading.Thread(target=watch, args=(i,)) for i in range(args.watchers)]
        for t in threads:
            t.start()
        started.wait()
        time.sleep(0.5)  # let every watch connect before the burst
        start = time.perf_counter()
        for i in range(args.objects):
            core.patch_namespaced_config_map(f"cm-{i}", "default", {"data": {"k": str(i)}})
        patch_rate = args.objects / (time.perf_counter() - start)
        for t in threads:
            t.join()
        fanout_rate = sum(counts) / (time.perf_counter() - start)
        print(f"patch ({args.objects} objects, {args.watchers} watchers attached): {patch_rate:.1f} req/s")
        print(f"watch fan-out ({args.watchers} watchers x {args.objects} events): {fanout_rate:.1f} events/s")

        start = time.perf_counter()
        for i in range(args.objects):
            core.patch_namespaced_config_map(f"cm-{i}", "default", {"data": {"k": f"x{i}"}})
        plain_patch = args.objects / (time.perf_counter() - start)
        print(f"patch ({args.objects} objects, no watchers busy): {plain_patch:.1f} req/s")
        print(
            f"SUMMARY objects={args.objects} list_rps={list_rate:.1f} watch_events_per_s={fanout_rate:.0f} "
            f"patch_rps={plain_patch:.0f} patch_watched_rps={patch_rate:.0f}"
        )
        client.close()


if __name__ == "__main__":
    main()
