"""A real S3-compatible server for the remote tests: moto in server mode on 127.0.0.1 (port 0), data
dirs uploaded with boto3, and a TCP proxy in front of it that drops connections in the middle of ranged
GETs (the first `faults` of them).

moto 5.2.x names the root element of its CompleteMultipartUpload answer ``CompleteMultipartUploadResponse``
(getmoto/moto#10055, fixed by #10056); S3 names it ``CompleteMultipartUploadResult``. Arrow's S3 client
(``CompleteMultipartUploadWithErrorFixup`` in s3fs.cc) takes any other root for an error embedded in a
200 OK, so every pyarrow write (each one a multipart upload) failed with ``AWS Error INTERNAL_FAILURE
during CompleteMultipartUpload operation:``. :func:`_fix_complete_multipart_root` renames the element
in the server (it runs in this process), as S3 answers; a moto with the fix is left as it is."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from pathlib import Path
from typing import Dict, Iterator, Optional, Tuple

import pytest

BUCKET = "kstore-data"
#: Credentials moto accepts (any), set for the test process and its children.
AWS_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
           "AWS_EC2_METADATA_DISABLED": "true"}


def _fix_complete_multipart_root() -> None:
    from moto.core import serialize

    original = serialize.S3Serializer._serialized_result_to_response
    if getattr(original, "kstore_fixed", False):
        return

    def fixed(self, resp, result, shape, serialized_result):
        resp = original(self, resp, result, shape, serialized_result)
        if self.operation_model.name == "CompleteMultipartUpload" and isinstance(resp.get("body"), str):
            resp["body"] = resp["body"].replace("CompleteMultipartUploadResponse", "CompleteMultipartUploadResult")
        return resp

    fixed.kstore_fixed = True  # type: ignore[attr-defined]
    serialize.S3Serializer._serialized_result_to_response = fixed


class S3Server:
    """moto's ThreadedMotoServer with a bucket, and helpers to upload folders into it."""

    def __init__(self) -> None:
        pytest.importorskip("moto.server")
        pytest.importorskip("boto3")
        from moto.server import ThreadedMotoServer

        os.environ.update(AWS_ENV)
        _fix_complete_multipart_root()
        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self._server.start()
        host, port = self._server.get_host_and_port()
        self.endpoint = f"http://{host}:{port}"
        self.port = port
        self.client().create_bucket(Bucket=BUCKET)

    def client(self):
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1")

    def upload(self, folder: Path, prefix: str) -> str:
        """Every file under `folder` as s3://BUCKET/prefix/<relative path>; the URI of the prefix."""
        client = self.client()
        for path in sorted(Path(folder).rglob("*")):
            if path.is_file():
                client.upload_file(str(path), BUCKET, f"{prefix}/{path.relative_to(folder).as_posix()}")
        return f"s3://{BUCKET}/{prefix}"

    def options(self, endpoint: Optional[str] = None) -> Dict[str, str]:
        """Storage options that reach this server (or a proxy in front of it)."""
        return {"endpoint_override": endpoint or self.endpoint, "region": "us-east-1", "scheme": "http",
                "access_key": AWS_ENV["AWS_ACCESS_KEY_ID"], "secret_key": AWS_ENV["AWS_SECRET_ACCESS_KEY"]}

    def stop(self) -> None:
        self._server.stop()


class FaultProxy:
    """127.0.0.1:port -> the server; the first `faults` ranged GETs fail (`faults=None`: every one): their
    responses are cut after a few bytes and the connection closed (a dropped connection mid-read), or, with
    `answer=(status, code)`, answered with that S3 error (``(503, "SlowDown")``, ``(403, "AccessDenied")``)
    instead of reaching the server. `method` (``b"PUT"``): that method's requests fail instead of ranged
    GETs. `requests` counts every request, `ranged` those that could fail."""

    def __init__(self, upstream_port: int, faults: Optional[int] = 0,
                 answer: Optional[Tuple[int, str]] = None, method: Optional[bytes] = None) -> None:
        self.upstream_port = upstream_port
        self.faults = faults
        self.answer = answer
        self.method = method
        self.dropped = 0
        self.ranged = 0
        self.requests = 0
        self._lock = threading.Lock()
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self.port = self._sock.getsockname()[1]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._sock.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            state = {"cut": False}
            threading.Thread(target=self._requests, args=(client, upstream, state), daemon=True).start()
            threading.Thread(target=self._responses, args=(upstream, client, state), daemon=True).start()

    def _take_fault(self) -> bool:
        with self._lock:
            self.ranged += 1
            if self.faults is None or self.dropped < self.faults:
                self.dropped += 1
                return True
            return False

    def _requests(self, src: socket.socket, dst: socket.socket, state: dict) -> None:
        with contextlib.suppress(OSError):
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if data.startswith((b"GET ", b"HEAD ", b"PUT ", b"POST ", b"DELETE ")):
                    with self._lock:
                        self.requests += 1
                chosen = data.startswith(self.method + b" ") if self.method else b"\r\nrange:" in data.lower()
                if chosen and self._take_fault():
                    if self.answer is not None:
                        src.sendall(_s3_error(*self.answer))
                        break
                    state["cut"] = True
                dst.sendall(data)
        _close(src, dst)

    def _responses(self, src: socket.socket, dst: socket.socket, state: dict) -> None:
        with contextlib.suppress(OSError):
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if state["cut"]:
                    dst.sendall(data[:300])  # the status line and some headers, then the connection drops
                    break
                dst.sendall(data)
        _close(src, dst)

    def close(self) -> None:
        self._closed = True
        self._sock.close()


def _s3_error(status: int, code: str) -> bytes:
    """An S3 error response (status line, headers, the XML body S3 sends), the connection then closed."""
    body = (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code><Message>{code} from the test '
            f'proxy</Message><RequestId>0</RequestId></Error>').encode()
    head = (f"HTTP/1.1 {status} {code}\r\nContent-Type: application/xml\r\nContent-Length: {len(body)}\r\n"
            f"Connection: close\r\n\r\n").encode()
    return head + body


def _close(*socks: socket.socket) -> None:
    for s in socks:
        with contextlib.suppress(OSError):
            s.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            s.close()


@contextlib.contextmanager
def s3_server() -> Iterator[S3Server]:
    server = S3Server()
    try:
        yield server
    finally:
        server.stop()
