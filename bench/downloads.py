"""Benchmark: Modelplane's downloader against the raw clients, side by side in one run on loopback.

    python -m bench.downloads [--large-mib 1024] [--small-count 1000] [--no-write]

Sources: a moto[server] S3 API and an olah (offline) Hugging Face protocol server, both on 127.0.0.1,
each holding one large object (1 GiB) and 1,000 objects of 1 MiB. For each case the raw client runs
first and the downloader second, into fresh directories:

- S3: boto3 ``download_file`` per object (its own multipart threads for the large one) vs ``fill_cache``;
- HF: ``huggingface_hub.snapshot_download(local_dir=...)`` (8 workers) vs ``fill_cache``.

The downloader's time includes listing, the lock, verification (size, SHA-256 of every file, MD5 where the
ETag is one) and the completion marker. Then the kill test: ``modelplane cache fill`` of the large S3
object is SIGKILLed when half of it is on disk and run again; reported are the bytes the second run
fetched that the first had already written (re-fetched), against the bound of one part per part in flight.
The machine is shared (2 cores, other jobs): the load average before each case is in the table.
Writes its section between the downloads-bench markers of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable

import boto3
from boto3.s3.transfer import TransferConfig

from engine.bench import machine, write_section
from tasks.downloader import DEFAULT_CONCURRENCY, DEFAULT_PART_SIZE, Credentials, fill_cache, read_manifest
from tasks.downloader.plan import STAGING_DIR

START, END = "<!-- downloads-bench:start -->", "<!-- downloads-bench:end -->"
MiB = 1024 * 1024
PACKAGES = ("boto3", "huggingface_hub", "moto")


@dataclass
class Case:
    """One side-by-side measurement."""

    source: str
    shape: str
    raw_label: str
    raw_s: float
    ours_s: float
    total_bytes: int
    load: float

    @property
    def speedup(self) -> float:
        return self.raw_s / self.ours_s if self.ours_s > 0 else float("inf")


def timed(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def write_random(path: pathlib.Path, size: int) -> None:
    with open(path, "wb") as handle:
        left = size
        while left:
            block = os.urandom(min(left, 8 * MiB))
            handle.write(block)
            left -= len(block)


# ----------------------------------------------------------------------------------------------------- S3


COUNT_OBJECTS = 20


def populate_s3(client, bucket: str, large: pathlib.Path, small_count: int) -> None:  # type: ignore[no-untyped-def]
    client.create_bucket(Bucket=bucket)
    for i in range(COUNT_OBJECTS):
        client.put_object(Bucket=bucket, Key=f"count/shard-{i:03d}.bin", Body=os.urandom(MiB))
    client.upload_file(str(large), bucket, "large/model.safetensors", Config=TransferConfig(multipart_chunksize=16 * MiB))
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda i: client.put_object(Bucket=bucket, Key=f"small/shard-{i:05d}.bin", Body=os.urandom(MiB)), range(small_count)))


def raw_s3(client, bucket: str, prefix: str, dest: pathlib.Path) -> None:  # type: ignore[no-untyped-def]
    """boto3 download_file, one object after another (what a simple script does)."""
    paginator = client.get_paginator("list_objects_v2")
    for page in paginator.paginate(Bucket=bucket, Prefix=prefix + "/"):
        for obj in page.get("Contents", []):
            target = dest / obj["Key"][len(prefix) + 1:]
            target.parent.mkdir(parents=True, exist_ok=True)
            client.download_file(bucket, obj["Key"], str(target))


# ----------------------------------------------------------------------------------------------------- HF


def populate_hf(server, large: pathlib.Path, small_count: int) -> tuple[str, str, str]:  # type: ignore[no-untyped-def]
    """Two repositories; content written straight into the LFS store to avoid holding 1 GiB in memory twice."""
    large_repo = server.repos.new_repo_id("large")
    small_repo = server.repos.new_repo_id("small")
    count_repo = server.repos.new_repo_id("count")
    server.repos.commit(count_repo, {f"shard-{i:03d}.bin": os.urandom(MiB) for i in range(COUNT_OBJECTS)})
    server.repos.commit(large_repo, {"model.safetensors": large.read_bytes()})
    server.repos.commit(small_repo, {f"shard-{i:05d}.bin": os.urandom(MiB) for i in range(small_count)})
    return large_repo, small_repo, count_repo


def raw_hf(endpoint: str, repo: str, dest: pathlib.Path) -> None:
    from huggingface_hub import snapshot_download

    snapshot_download(repo, local_dir=str(dest), endpoint=endpoint, token=False, allow_patterns=["*.safetensors", "*.bin"])


# ----------------------------------------------------------------------------------------------------- requests


def count_requests(client, bucket: str, s3_endpoint: str, hf_endpoint: str, repo: str, creds: Credentials, tmp: pathlib.Path) -> dict[str, dict[str, int]]:  # type: ignore[no-untyped-def]
    """HTTP requests by method for 20 objects of 1 MiB, each client behind a counting proxy."""
    from tests.countingproxy import CountingProxy

    counts: dict[str, dict[str, int]] = {}

    def measure(label: str, upstream: str, action: Callable[[str, pathlib.Path], None]) -> None:
        proxy = CountingProxy(upstream.removeprefix("http://"))
        url = proxy.start()
        dest = tmp / f"count-{len(counts)}"
        dest.mkdir()
        try:
            action(url, dest)
        finally:
            proxy.stop()
            shutil.rmtree(dest)
        by_method: dict[str, int] = {}
        for record in proxy.records:
            by_method[record.method] = by_method.get(record.method, 0) + 1
        counts[label] = by_method

    def raw_s3_via(url: str, dest: pathlib.Path) -> None:
        proxied = boto3.client("s3", endpoint_url=url, region_name="us-east-1", aws_access_key_id="bench", aws_secret_access_key="bench")
        raw_s3(proxied, bucket, "count", dest)

    measure("S3 boto3 download_file", s3_endpoint, raw_s3_via)
    measure("S3 downloader", s3_endpoint, lambda url, dest: fill_cache(f"s3://{bucket}/count", dest, Credentials(aws_access_key_id="bench", aws_secret_access_key="bench", aws_endpoint_url=url, aws_region="us-east-1")))
    measure("HF snapshot_download", hf_endpoint, lambda url, dest: raw_hf(url, repo, dest))
    measure("HF downloader", hf_endpoint, lambda url, dest: fill_cache(f"hf://{repo}?allow=*.bin", dest, Credentials(hf_endpoint=url)))
    return counts


# ----------------------------------------------------------------------------------------------------- kill


def kill_at_half(source: str, env: dict[str, str], size: int, workdir: pathlib.Path, concurrency: int, part_size: int) -> dict[str, float]:
    dest = workdir / "killed"
    command = [sys.executable, "-c", "from flows.cli import main; main()", "cache", "fill", source, str(dest),
               "--concurrency", str(concurrency), "--part-size-mib", str(part_size // MiB)]
    process = subprocess.Popen(command, env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)

    def written() -> int:
        staging = dest / STAGING_DIR
        return sum(p.stat().st_blocks * 512 for p in staging.glob("*.part")) if staging.exists() else 0

    while written() < size // 2:
        if process.poll() is not None:
            raise RuntimeError("the filler finished before half of the object was on disk")
        time.sleep(0.005)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    on_disk = min(written(), size)
    started = time.perf_counter()
    result = subprocess.run(command, env={**os.environ, **env}, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if result.returncode != 0:
        raise RuntimeError(result.stderr)
    manifest = read_manifest(dest)
    assert manifest is not None
    fetched = manifest.stats["bytesFetched"]
    return {
        "on_disk": on_disk,
        "fetched": fetched,
        "refetched": max(0, fetched - (size - on_disk)),
        "bound": concurrency * part_size,
        "resume_s": elapsed,
    }


# ----------------------------------------------------------------------------------------------------- run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--large-mib", type=int, default=1024)
    parser.add_argument("--small-count", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=DEFAULT_CONCURRENCY)
    parser.add_argument("--no-write", action="store_true", help="print only; leave docs/benchmarks.md alone")
    args = parser.parse_args(argv)

    from tests.hftest.fixture import start_olah
    from tests.s3test.fixture import create_access_key, start_moto, stop_process

    os.environ["HF_HUB_DISABLE_XET"] = "1"
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    large_size = args.large_mib * MiB
    cases: list[Case] = []
    kill: dict[str, float] = {}
    requests: dict[str, dict[str, int]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-downloads-") as tmp_text:
        tmp = pathlib.Path(tmp_text)
        large = tmp / "large.bin"
        write_random(large, large_size)
        moto, port = start_moto(auth=False)  # the server's IAM checks would only add server CPU to both sides
        olah, hf = start_olah(tmp / "olah")
        try:
            endpoint = f"http://127.0.0.1:{port}"
            access, secret = create_access_key(endpoint)
            client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id=access, aws_secret_access_key=secret)
            creds = Credentials(aws_access_key_id=access, aws_secret_access_key=secret, aws_endpoint_url=endpoint, aws_region="us-east-1", hf_endpoint=hf.endpoint)
            bucket = "bench"
            print("uploading to moto ...", flush=True)
            populate_s3(client, bucket, large, args.small_count)
            print("writing HF repositories ...", flush=True)
            large_repo, small_repo, count_repo = populate_hf(hf, large, args.small_count)
            large.unlink()

            def case(source: str, shape: str, raw_label: str, raw: Callable[[pathlib.Path], None], uri: str, total: int) -> None:
                load = os.getloadavg()[0]
                raw_dir, ours_dir = tmp / f"raw-{len(cases)}", tmp / f"ours-{len(cases)}"
                raw_dir.mkdir()
                raw_s = timed(lambda: raw(raw_dir))
                shutil.rmtree(raw_dir)
                ours_s = timed(lambda: fill_cache(uri, ours_dir, creds, concurrency=args.concurrency))
                shutil.rmtree(ours_dir)
                cases.append(Case(source, shape, raw_label, raw_s, ours_s, total, load))
                print(f"{source} {shape}: raw {raw_s:.2f}s, downloader {ours_s:.2f}s ({raw_s / ours_s:.2f}x) load {load:.2f}", flush=True)

            large_shape = f"1 x {args.large_mib} MiB"
            small_shape = f"{args.small_count:,} x 1 MiB"
            case("S3", large_shape, "boto3 download_file", lambda d: raw_s3(client, bucket, "large", d), f"s3://{bucket}/large", large_size)
            case("S3", small_shape, "boto3 download_file per object", lambda d: raw_s3(client, bucket, "small", d), f"s3://{bucket}/small", args.small_count * MiB)
            case("HF", large_shape, "snapshot_download", lambda d: raw_hf(hf.endpoint, large_repo, d), f"hf://{large_repo}?allow=*.safetensors", large_size)
            case("HF", small_shape, "snapshot_download (8 workers)", lambda d: raw_hf(hf.endpoint, small_repo, d), f"hf://{small_repo}?allow=*.bin", args.small_count * MiB)
            print("request counts ...", flush=True)
            requests = count_requests(client, bucket, endpoint, hf.endpoint, count_repo, creds, tmp)
            print(requests, flush=True)
            print("kill at 50% ...", flush=True)
            env = {"AWS_ACCESS_KEY_ID": access, "AWS_SECRET_ACCESS_KEY": secret, "AWS_ENDPOINT_URL": endpoint, "AWS_REGION": "us-east-1"}
            kill = kill_at_half(f"s3://{bucket}/large", env, large_size, tmp, args.concurrency, DEFAULT_PART_SIZE)
            print(kill, flush=True)
        finally:
            stop_process(moto)
            stop_process(olah)
    section = render(cases, kill, requests, args)
    print(section)
    if not args.no_write:
        write_section(section, START, END)
    large_ok = all(c.speedup >= 0.9 for c in cases if c.shape.startswith("1 x"))
    small_ok = all(c.speedup >= 2 for c in cases if not c.shape.startswith("1 x"))
    return 0 if large_ok and small_ok and kill.get("refetched", 0) <= kill.get("bound", 0) else 1


def render(cases: list[Case], kill: dict[str, float], requests: dict[str, dict[str, int]], args: argparse.Namespace) -> str:
    def mib_s(total: int, seconds: float) -> str:
        return f"{total / MiB / seconds:,.0f} MiB/s"

    lines = [
        START,
        "",
        "## Downloads",
        "",
        f"Produced by `python -m bench.downloads` on {machine(PACKAGES)}.",
        "",
        "Side by side in one run on loopback (moto[server] S3, IAM checks off; olah 0.5.4 offline as the",
        "Hugging Face server); raw client first, then `tasks.downloader.fill_cache` "
        f"(concurrency {args.concurrency}, S3 parts of {DEFAULT_PART_SIZE // MiB} MiB), into fresh directories.",
        "The downloader's time includes listing, locking, verifying every file (size, SHA-256; MD5 where the",
        "ETag is one) and writing the completion marker. The servers are single Python processes on the same",
        "2 shared cores, so they, not the clients, bound most rows. Other helpers' jobs ran on the machine",
        "at the same time: the 1-minute load average before each case is in the last column.",
        "Targets: >= 0.9x the raw client on the large object, >= 2x on the many small ones.",
        "",
        "| source | objects | raw client | raw | downloader | speed-up | load avg |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in cases:
        lines.append(
            f"| {c.source} | {c.shape} | {c.raw_label} | {c.raw_s:.2f} s ({mib_s(c.total_bytes, c.raw_s)}) | "
            f"{c.ours_s:.2f} s ({mib_s(c.total_bytes, c.ours_s)}) | {c.speedup:.2f}x | {c.load:.2f} |"
        )
    if requests:
        lines += [
            "",
            f"HTTP requests for {COUNT_OBJECTS} objects of 1 MiB (counted by a proxy in front of each server): "
            + "; ".join(f"{label}: " + ", ".join(f"{n} {m}" for m, n in sorted(by.items())) for label, by in requests.items())
            + ". The downloader takes sizes and checksums from the one listing and sends one GET per object.",
        ]
    if kill:
        lines += [
            "",
            f"Kill at 50 %: `modelplane cache fill` of the {args.large_mib} MiB S3 object SIGKILLed once "
            f"{kill['on_disk'] / MiB:,.0f} MiB were on disk, then run again ({kill['resume_s']:.2f} s): it fetched "
            f"{kill['fetched'] / MiB:,.1f} MiB, of which **{kill['refetched'] / MiB:,.1f} MiB re-fetched** "
            f"(bound: one part per part in flight = {args.concurrency} x {DEFAULT_PART_SIZE // MiB} MiB = "
            f"{kill['bound'] / MiB:,.0f} MiB). Parts record their progress every 0.2 s, so a part in flight",
            "resumes near where it stopped rather than from its start.",
        ]
    lines += ["", END, ""]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
