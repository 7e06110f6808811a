"""A local S3 server for the benchmarks: moto in server mode on 127.0.0.1, counting what it sends.

moto's WSGI application (``DomainDispatcherApplication``) is wrapped in a middleware that
counts, per object (``bucket/key``) and per HTTP method, the requests and the response body
bytes, i.e. what a reader fetched from "the network". Two extra paths (not valid bucket names,
so they never reach moto):

* ``GET /__counters``: ``{"total": {...}, "methods": {...}, "objects": {"bucket/key": {...}}}``;
* ``POST /__counters/reset``: zero every counter.

moto answers a ranged ``GET`` by reading the whole object and slicing it, so one ranged read of
a 2.8 GB file costs seconds and gigabytes of the server's memory: the cost of a reader that makes
many small ranged reads of a big object would be moto's, not the reader's. Unless
``--moto-ranges``, a single-range ``GET`` (``Range: bytes=A-B`` or ``bytes=A-``) of an existing
object without query parameters is answered here, straight from moto's stored copy of the object
(seek + read of the range, under the object's lock), with S3's status and headers (206,
``Content-Range``, ``Content-Length``, ``ETag``, ``Last-Modified``, ``Accept-Ranges``); every other
request goes to moto as is.

Only 127.0.0.1 is served. The server stops by itself after ``--max-seconds`` or as soon as the
process ``--parent-pid`` is gone, whichever comes first.

    python benchmarks/s3_server.py --port 0 --ready-file /tmp/s3.json   # port 0: any free port
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote

HOST = "127.0.0.1"
COUNTERS = "/__counters"
RANGE = re.compile(r"^bytes=(\d+)-(\d*)$")
CHUNK = 1 << 20


class Counters:
    """Requests and body bytes per object and per method, thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        with self._lock:
            self._objects: dict[str, dict[str, int]] = {}
            self._methods: dict[str, dict[str, int]] = {}
            self._since = time.time()

    def add(self, method: str, name: str, nbytes: int, ranged: bool) -> None:
        with self._lock:
            for table, key in ((self._objects, name), (self._methods, method)):
                entry = table.setdefault(key, {"requests": 0, "bytes": 0, "ranged": 0})
                entry["requests"] += 1
                entry["bytes"] += nbytes
                entry["ranged"] += int(ranged)

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            objects = {k: dict(v) for k, v in self._objects.items()}
            methods = {k: dict(v) for k, v in self._methods.items()}
            since = self._since
        total = {
            "requests": sum(v["requests"] for v in methods.values()),
            "bytes": sum(v["bytes"] for v in methods.values()),
            "get_bytes": methods.get("GET", {}).get("bytes", 0),
            "get_requests": methods.get("GET", {}).get("requests", 0),
        }
        return {"since": since, "total": total, "methods": methods, "objects": objects}


class _Counted:
    """The response body of one request, counted as the server hands it out."""

    def __init__(self, body: Iterable[bytes], done: Callable[[int], None]) -> None:
        self._body = body
        self._done = done
        self._bytes = 0

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self._body:
            self._bytes += len(chunk)
            yield chunk

    def close(self) -> None:
        try:
            close = getattr(self._body, "close", None)
            if close is not None:
                close()
        finally:
            self._done(self._bytes)


def _object_name(environ: dict[str, Any]) -> str:
    """``bucket/key`` of a path-style request (what pyarrow, boto3 and obstore send to an IP endpoint)."""
    return unquote(environ.get("PATH_INFO", "/")).lstrip("/")


class CountingApp:
    """WSGI middleware around moto's application (see the module docstring)."""

    def __init__(self, app: Callable[..., Any], moto_ranges: bool = False) -> None:
        self.app = app
        self.counters = Counters()
        self.moto_ranges = moto_ranges

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "/")
        if path == COUNTERS or path.startswith(COUNTERS + "/"):
            return self._counters(environ, start_response)
        method = environ.get("REQUEST_METHOD", "GET")
        name = _object_name(environ)
        ranged = "HTTP_RANGE" in environ
        served = None if self.moto_ranges else self._ranged_get(environ, start_response, name)
        body = served if served is not None else self.app(environ, start_response)
        return _Counted(body, lambda n: self.counters.add(method, name, n, ranged))

    def _counters(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        if environ.get("REQUEST_METHOD") == "POST" and environ["PATH_INFO"].endswith("/reset"):
            self.counters.reset()
        body = json.dumps(self.counters.snapshot()).encode()
        start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
        return [body]

    def _ranged_get(
        self, environ: dict[str, Any], start_response: Callable[..., Any], name: str
    ) -> Iterable[bytes] | None:
        """A single-range GET served from moto's stored object; None: let moto answer."""
        if environ.get("REQUEST_METHOD") != "GET" or environ.get("QUERY_STRING"):
            return None
        match = RANGE.match(environ.get("HTTP_RANGE", "").strip())
        bucket, _, key_name = name.partition("/")
        if match is None or not key_name:
            return None
        key = _moto_object(bucket, key_name)
        if key is None:
            return None
        size = key.size
        begin = int(match.group(1))
        end = min(int(match.group(2)), size - 1) if match.group(2) else size - 1
        if begin >= size or begin > end:
            return None  # moto answers 416 / the whole object, as S3 does
        headers = [
            ("Content-Type", key.metadata.get("Content-Type", "binary/octet-stream")),
            ("Content-Length", str(end - begin + 1)),
            ("Content-Range", f"bytes {begin}-{end}/{size}"),
            ("Accept-Ranges", "bytes"),
            ("ETag", key.etag),
            ("Last-Modified", key.last_modified_RFC1123),
        ]
        start_response("206 Partial Content", headers)
        return _read_range(key, begin, end + 1)


def _moto_object(bucket: str, key_name: str) -> Any:
    """moto's ``FakeKey`` for ``bucket/key_name`` (its latest version), or None."""
    from moto.s3.models import FakeKey, s3_backends

    where = s3_backends.bucket_accounts.get(bucket)
    if where is None:
        return None
    partition, account = where
    found = s3_backends[account][partition].buckets.get(bucket)
    if found is None:
        return None
    key = found.keys.get(key_name)
    return key if isinstance(key, FakeKey) else None


def _read_range(key: Any, begin: int, stop: int) -> Iterator[bytes]:
    """Bytes ``[begin, stop)`` of a moto object, read from its buffer a MiB at a time."""
    position = begin
    while position < stop:
        with key.lock:
            buffer = key._value_buffer  # moto's storage of the object's bytes (a SpooledTemporaryFile)
            buffer.seek(position)
            chunk = buffer.read(min(CHUNK, stop - position))
        if not chunk:
            return
        position += len(chunk)
        yield chunk


def _watchdog(server: Any, parent_pid: int | None, max_seconds: float) -> None:
    deadline = time.monotonic() + max_seconds
    while time.monotonic() < deadline:
        if parent_pid is not None and not _alive(parent_pid):
            print("s3_server: parent gone, stopping", file=sys.stderr, flush=True)
            break
        time.sleep(1.0)
    else:
        print(f"s3_server: {max_seconds:.0f} s up, stopping", file=sys.stderr, flush=True)
    server.shutdown()


def keep_alive_handler() -> type:
    """moto's request handler speaking HTTP/1.1, as S3 does: a client's connection serves request after request
    (werkzeug's HTTP/1.0 default closes it after each, so every request would also pay a TCP connection and
    a new server thread)."""
    from moto.moto_server.werkzeug_app import MotoRequestHandler

    return type("KeepAliveHandler", (MotoRequestHandler,), {"protocol_version": "HTTP/1.1"})


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: any free one)")
    p.add_argument("--ready-file", type=Path, help="write {'endpoint': ..., 'pid': ...} here once listening")
    p.add_argument("--max-seconds", type=float, default=4 * 3600.0, help="stop after this long")
    p.add_argument("--parent-pid", type=int, help="stop as soon as this process is gone")
    p.add_argument("--moto-ranges", action="store_true", help="let moto answer ranged GETs (whole object read)")
    p.add_argument(
        "--http10", action="store_true", help="HTTP/1.0 (moto's default): a connection and a thread per request"
    )
    args = p.parse_args(argv)

    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
    from werkzeug.serving import make_server

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request (hundreds of thousands)

    app = CountingApp(DomainDispatcherApplication(create_backend_app), moto_ranges=args.moto_ranges)
    handler = MotoRequestHandler if args.http10 else keep_alive_handler()
    server = make_server(HOST, args.port, app, threaded=True, request_handler=handler)
    endpoint = f"http://{HOST}:{server.server_address[1]}"
    threading.Thread(target=_watchdog, args=(server, args.parent_pid, args.max_seconds), daemon=True).start()
    if args.ready_file:
        tmp = args.ready_file.with_suffix(".tmp")
        tmp.write_text(json.dumps({"endpoint": endpoint, "pid": os.getpid()}))
        tmp.replace(args.ready_file)
    print(f"s3_server: {endpoint}", file=sys.stderr, flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
