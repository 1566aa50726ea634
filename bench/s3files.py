"""A read-only S3 endpoint over a local folder, for bench/remote.py: the requests pyarrow's S3FileSystem makes
to list and read (HeadBucket, HeadObject, ListObjectsV2, ranged GetObject), answered from the folder's files,
the bytes of a range sent by the kernel (``os.sendfile``), one thread per connection, HTTP/1.1 keep-alive.

Why beside moto: moto answers a ranged GET by reading the whole object under a per-object lock (an 8 MiB
range of a 64 MiB object takes 44 ms), so a remote/local ratio measured against it is moto's, not the
reader's. An object store serves a range without reading the object; so does this. No signatures are
checked and nothing can be written: a benchmark's stand-in, not a test server (tests use moto).

    with FileS3("/tmp/data", bucket="kstore-data") as server:
        options = server.options()   # storage options for s3://kstore-data/<path under /tmp/data>
"""

from __future__ import annotations

import os
import threading
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Dict, List, Optional, Tuple
from urllib.parse import parse_qs, unquote, urlparse
from xml.sax.saxutils import escape

_NS = "http://s3.amazonaws.com/doc/2006-03-01/"


class FileS3:
    """The endpoint on 127.0.0.1 (a free port), serving `root` as the bucket `bucket`."""

    def __init__(self, root: str, bucket: str = "kstore-data") -> None:
        self.root = os.path.abspath(root)
        self.bucket = bucket
        handler = type("Handler", (_Handler,), {"root": self.root, "bucket": bucket})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> "FileS3":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    def uri(self, relative: str = "") -> str:
        return f"s3://{self.bucket}/{relative}".rstrip("/")

    def options(self) -> Dict[str, str]:
        return {"endpoint_override": self.endpoint, "region": "us-east-1", "scheme": "http",
                "access_key": "testing", "secret_key": "testing"}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    root = ""
    bucket = ""

    def log_message(self, *args) -> None:  # quiet
        pass

    def _target(self) -> Tuple[str, str, Dict[str, List[str]]]:
        url = urlparse(self.path)
        bucket, _, key = unquote(url.path).lstrip("/").partition("/")
        return bucket, key, parse_qs(url.query, keep_blank_values=True)

    def _file(self, key: str) -> Optional[str]:
        path = os.path.realpath(os.path.join(self.root, key))
        if not key or not path.startswith(self.root + os.sep) or not os.path.isfile(path):
            return None
        return path

    def _send(self, status: int, body: bytes = b"", headers: Optional[Dict[str, str]] = None,
              head: bool = False) -> None:
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body and not head:
            self.wfile.write(body)

    def _missing(self, head: bool, code: str = "NoSuchKey") -> None:
        body = f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code></Error>'.encode()
        self._send(404, body, {"Content-Type": "application/xml"}, head)

    def do_HEAD(self) -> None:
        self._object(head=True)

    def do_GET(self) -> None:
        bucket, key, query = self._target()
        if bucket != self.bucket:
            self._missing(False, "NoSuchBucket")
        elif not key and ("list-type" in query or "prefix" in query or not query):
            self._list(query)
        else:
            self._object(head=False)

    def _object(self, head: bool) -> None:
        bucket, key, _ = self._target()
        if bucket != self.bucket:
            self._missing(head, "NoSuchBucket")
            return
        if not key:  # HeadBucket
            self._send(200, head=head)
            return
        path = self._file(key)
        if path is None:
            self._missing(head)
            return
        stat = os.stat(path)
        size = stat.st_size
        start, end = 0, size - 1
        status = 200
        ranged = self.headers.get("Range")
        if ranged and ranged.startswith("bytes="):
            first, _, last = ranged[6:].partition("-")
            start = int(first) if first else max(size - int(last), 0)
            end = min(int(last), size - 1) if first and last else size - 1
            status = 206
        length = max(end - start + 1, 0)
        self.send_response(status)
        self.send_header("Content-Length", str(length))
        self.send_header("ETag", f'"{stat.st_mtime_ns:x}-{size:x}"')
        self.send_header("Last-Modified", formatdate(stat.st_mtime, usegmt=True))
        self.send_header("Content-Type", "application/octet-stream")
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.end_headers()
        if head or not length:
            return
        self.wfile.flush()
        with open(path, "rb") as f:
            sent = 0
            while sent < length:
                done = os.sendfile(self.connection.fileno(), f.fileno(), start + sent, length - sent)
                if done == 0:
                    break
                sent += done

    def _list(self, query: Dict[str, List[str]]) -> None:
        prefix = query.get("prefix", [""])[0]
        delimiter = query.get("delimiter", [""])[0]
        keys, prefixes = [], set()
        for folder, _dirs, files in os.walk(self.root):
            for name in files:
                key = os.path.relpath(os.path.join(folder, name), self.root).replace(os.sep, "/")
                if not key.startswith(prefix):
                    continue
                rest = key[len(prefix):]
                if delimiter and delimiter in rest:
                    prefixes.add(prefix + rest.split(delimiter, 1)[0] + delimiter)
                else:
                    keys.append(key)
        keys.sort()
        parts = [f'<?xml version="1.0" encoding="UTF-8"?><ListBucketResult xmlns="{_NS}">',
                 f"<Name>{self.bucket}</Name><Prefix>{escape(prefix)}</Prefix>",
                 f"<KeyCount>{len(keys) + len(prefixes)}</KeyCount><MaxKeys>100000</MaxKeys>",
                 "<IsTruncated>false</IsTruncated>"]
        for key in keys:
            stat = os.stat(os.path.join(self.root, key))
            parts.append(f"<Contents><Key>{escape(key)}</Key><LastModified>2026-11-28T00:00:00.000Z</LastModified>"
                         f'<ETag>"{stat.st_mtime_ns:x}-{stat.st_size:x}"</ETag><Size>{stat.st_size}</Size>'
                         "<StorageClass>STANDARD</StorageClass></Contents>")
        for common in sorted(prefixes):
            parts.append(f"<CommonPrefixes><Prefix>{escape(common)}</Prefix></CommonPrefixes>")
        parts.append("</ListBucketResult>")
        self._send(200, "".join(parts).encode(), {"Content-Type": "application/xml"})
