"""Save every bucket of an S3 endpoint to a folder, and load it back.

The embedded S3 server (moto) keeps objects only in memory, so ``shardline down`` saves
them here first and ``shardline up`` loads them into the fresh server. Layout::

    <dir>/<bucket>/<key>            the object's bytes
    <dir>/.escaped/<bucket>/<sha>   keys that cannot be a file path ("dir/", "a/../b",
                                    "a" when "a/b" exists too), named by sha256(key)
    <dir>/.index.json               buckets; per object key, file, ETag, size, content
                                    type, user metadata and, for multipart uploads, the
                                    part sizes

ETags are kept: a single-part ETag is the MD5 of the bytes, so re-uploading the same bytes
gives it back; a multipart ETag (``md5-of-part-md5s-N``) comes back because the object is
re-uploaded in the same parts. Downloads are checked against their ETag, uploads report
any ETag that changed. Only current object versions, content type and user metadata are
kept: not bucket policies, notification settings, tags or old versions.

A snapshot is written to ``<dir>.partial`` and swapped in only when complete, so a failed
snapshot never replaces a good one. (Bucket names cannot start with '.', so the dot-names
never collide with a bucket.)
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config as BotoConfig
from botocore.exceptions import BotoCoreError, ClientError

from shardline.core.errors import ShardlineError

log = logging.getLogger(__name__)

INDEX = ".index.json"
ESCAPED = ".escaped"
FORMAT = 1
_CHUNK = 1 << 20


class SnapshotError(ShardlineError):
    """Saving or loading a bucket snapshot failed; the message names the object and file."""


@dataclass(frozen=True)
class SnapshotSummary:
    """What a snapshot holds (or what was restored from one)."""

    path: str
    buckets: int
    objects: int
    bytes: int
    seconds: float
    taken_at: str
    # Restore only: s3://bucket/key of objects whose ETag differs from the recorded one.
    etag_changed: list[str] = field(default_factory=list)


def s3_client(endpoint_url: str, access_key: str = "testing", secret_key: str = "testing",
              region: str = "us-east-1") -> Any:
    """A boto3 S3 client for ``endpoint_url`` (moto accepts any credentials)."""
    return boto3.session.Session().client(
        "s3", endpoint_url=endpoint_url, aws_access_key_id=access_key,
        aws_secret_access_key=secret_key, region_name=region,
        config=BotoConfig(retries={"mode": "standard", "max_attempts": 5},
                          max_pool_connections=16),
    )


def file_names(bucket: str, keys: Iterable[str]) -> dict[str, str]:
    """Snapshot-relative file name for each key: ``<bucket>/<key>`` where that is a safe,
    unambiguous path, else ``.escaped/<bucket>/<sha256(key)>``."""
    keys = list(keys)

    def clean(key: str) -> bool:
        parts = key.split("/")
        return all(p not in ("", ".", "..") and len(p.encode()) <= 255 for p in parts) \
            and "\0" not in key

    dirs = {k.rsplit("/", i)[0] for k in keys if clean(k) for i in range(1, k.count("/") + 1)}
    out = {}
    for k in keys:
        if clean(k) and k not in dirs:
            out[k] = f"{bucket}/{k}"
        else:
            out[k] = f"{ESCAPED}/{bucket}/{hashlib.sha256(k.encode()).hexdigest()}"
    return out


def etag_of(path: Path, part_sizes: list[int] | None) -> str:
    """The S3 ETag of a file uploaded whole (MD5) or in parts of ``part_sizes``."""
    with open(path, "rb") as f:
        if not part_sizes:
            h = hashlib.md5()
            while chunk := f.read(_CHUNK):
                h.update(chunk)
            return h.hexdigest()
        digests = b"".join(hashlib.md5(f.read(size)).digest() for size in part_sizes)
    return f"{hashlib.md5(digests).hexdigest()}-{len(part_sizes)}"


def _save_object(client: Any, bucket: str, key: str, root: Path, rel: str) -> dict[str, Any]:
    where = f"s3://{bucket}/{key}"
    dest = root / rel
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        r = client.get_object(Bucket=bucket, Key=key)
        with open(dest, "wb") as f:
            shutil.copyfileobj(r["Body"], f, _CHUNK)
        etag = str(r["ETag"]).strip('"')
        parts = None
        if "-" in etag:  # multipart upload: record each part's size to upload it alike
            count = int(etag.rsplit("-", 1)[1])
            parts = [int(client.head_object(Bucket=bucket, Key=key, PartNumber=n)
                         ["ContentLength"]) for n in range(1, count + 1)]
    except (ClientError, BotoCoreError) as exc:
        raise SnapshotError(f"saving {where} to {dest} failed: {exc}") from exc
    if etag_of(dest, parts) != etag:
        raise SnapshotError(f"saved {where} to {dest} but its bytes do not match ETag "
                            f"{etag}; the object changed during the snapshot: run down again")
    return {"key": key, "file": rel, "etag": etag, "size": dest.stat().st_size,
            "content_type": r.get("ContentType"), "metadata": r.get("Metadata") or {},
            "parts": parts}


def _list(client: Any, bucket: str) -> list[str]:
    keys: list[str] = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        keys.extend(o["Key"] for o in page.get("Contents", []))
    return keys


def _run(fn: Callable[..., Any], jobs: list[tuple[Any, ...]], threads: int) -> list[Any]:
    with ThreadPoolExecutor(max_workers=threads) as pool:
        futures = [pool.submit(fn, *job) for job in jobs]
        return [f.result() for f in futures]


def take_snapshot(client: Any, dest: Path, threads: int = 8) -> SnapshotSummary:
    """Save every object of every bucket under ``dest``, replacing the previous snapshot
    only once this one is complete.

    Raises:
        SnapshotError: an object could not be read or did not match its ETag; the previous
            snapshot (if any) is left as it was.
    """
    t0 = time.monotonic()
    tmp = dest.with_name(dest.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        buckets = sorted(b["Name"] for b in client.list_buckets().get("Buckets", []))
        index: dict[str, list[dict[str, Any]]] = {}
        for bucket in buckets:
            names = file_names(bucket, _list(client, bucket))
            jobs = [(client, bucket, k, tmp, rel) for k, rel in names.items()]
            index[bucket] = _run(_save_object, jobs, threads)
    except (ClientError, BotoCoreError) as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise SnapshotError(f"listing the buckets for a snapshot into {dest} failed: "
                            f"{exc}") from exc
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    taken_at = datetime.now(UTC).isoformat(timespec="seconds")
    doc = {"format": FORMAT, "taken_at": taken_at, "buckets": index}
    (tmp / INDEX).write_text(json.dumps(doc, indent=1))
    old = dest.with_name(dest.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if dest.exists():
        dest.rename(old)
    tmp.rename(dest)
    shutil.rmtree(old, ignore_errors=True)
    objs = [o for objects in index.values() for o in objects]
    return SnapshotSummary(str(dest), len(index), len(objs), sum(o["size"] for o in objs),
                           round(time.monotonic() - t0, 2), taken_at)


def read_index(src: Path) -> dict[str, Any] | None:
    """The snapshot index in ``src``, or None when there is no snapshot there.

    Raises:
        SnapshotError: ``src`` exists but its index is missing or unreadable.
    """
    old = src.with_name(src.name + ".old")
    if not src.exists() and old.exists():  # interrupted between the two renames of a swap
        log.warning("recovering the previous bucket snapshot %s -> %s", old, src)
        old.rename(src)
    if not src.exists():
        return None
    path = src / INDEX
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise SnapshotError(
            f"{src} holds a bucket snapshot but its index {path} cannot be read ({exc}); "
            f"nothing was restored. Move {src} away to start with empty buckets, or restore "
            "the index") from exc
    if doc.get("format") != FORMAT:
        raise SnapshotError(f"{path} has format {doc.get('format')!r}, expected {FORMAT}")
    return dict(doc)


def _load_object(client: Any, bucket: str, obj: dict[str, Any], root: Path) -> str | None:
    path = root / obj["file"]
    extra: dict[str, Any] = {"Metadata": obj.get("metadata") or {}}
    if obj.get("content_type"):
        extra["ContentType"] = obj["content_type"]
    try:
        if obj.get("parts"):
            etag = _upload_parts(client, bucket, obj["key"], path, obj["parts"], extra)
        else:
            with open(path, "rb") as f:
                etag = client.put_object(Bucket=bucket, Key=obj["key"], Body=f, **extra)["ETag"]
    except (ClientError, BotoCoreError, OSError) as exc:
        raise SnapshotError(f"restoring s3://{bucket}/{obj['key']} from {path} failed: "
                            f"{exc}") from exc
    return None if str(etag).strip('"') == obj["etag"] else f"s3://{bucket}/{obj['key']}"


def _upload_parts(client: Any, bucket: str, key: str, path: Path, sizes: list[int],
                  extra: dict[str, Any]) -> str:
    upload = client.create_multipart_upload(Bucket=bucket, Key=key, **extra)["UploadId"]
    try:
        parts = []
        with open(path, "rb") as f:
            for n, size in enumerate(sizes, 1):
                r = client.upload_part(Bucket=bucket, Key=key, UploadId=upload, PartNumber=n,
                                       Body=f.read(size))
                parts.append({"ETag": r["ETag"], "PartNumber": n})
        return str(client.complete_multipart_upload(
            Bucket=bucket, Key=key, UploadId=upload, MultipartUpload={"Parts": parts})["ETag"])
    except BaseException:
        client.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=upload)
        raise


def restore_snapshot(client: Any, src: Path, threads: int = 8) -> SnapshotSummary | None:
    """Create the snapshot's buckets and upload its objects; None when there is none.

    Raises:
        SnapshotError: the index is unreadable or an object could not be uploaded.
    """
    doc = read_index(src)
    if doc is None:
        return None
    t0 = time.monotonic()
    changed: list[str] = []
    for bucket, objects in doc["buckets"].items():
        try:
            client.create_bucket(Bucket=bucket)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "BucketAlreadyOwnedByYou":
                raise SnapshotError(f"creating bucket {bucket} to restore {src} failed: "
                                    f"{exc}") from exc
        jobs = [(client, bucket, obj, src) for obj in objects]
        changed.extend(c for c in _run(_load_object, jobs, threads) if c)
    objs = [o for objects in doc["buckets"].values() for o in objects]
    if changed:
        log.warning("%d restored object(s) got a new ETag, e.g. %s", len(changed), changed[:3])
    return SnapshotSummary(str(src), len(doc["buckets"]), len(objs),
                           sum(o["size"] for o in objs), round(time.monotonic() - t0, 2),
                           doc["taken_at"], changed)
