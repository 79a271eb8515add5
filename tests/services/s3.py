"""moto's standalone S3 server in a subprocess, with IAM authentication switched on.

Moto accepts any credentials by default, which would make "wrong credentials" untestable. So
the starter creates an IAM user with an S3 policy and an access key while auth is still off,
then POSTs ``/moto-api/reset-auth`` with ``0``: from then on every request must be signed with
that key, and a wrong secret is refused with 403 just as AWS would.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from dataclasses import dataclass
from typing import Any

from tests.services.ports import free_port, stop_process, wait_for_port

REGION = "us-east-1"


@dataclass
class S3Server:
    port: int
    process: subprocess.Popen[bytes]
    access_key: str = ""
    secret_key: str = ""

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def client(self, service: str = "s3", *, access_key: str | None = None,
               secret_key: str | None = None) -> Any:
        import boto3

        return boto3.session.Session().client(
            service, endpoint_url=self.endpoint, region_name=REGION,
            aws_access_key_id=access_key or self.access_key,
            aws_secret_access_key=secret_key or self.secret_key,
        )

    def connection_uri(self, *, secret: str | None = None) -> str:
        from urllib.parse import quote

        return (f"aws://{quote(self.access_key, safe='')}:"
                f"{quote(secret or self.secret_key, safe='')}@/?"
                f"endpoint_url={quote(self.endpoint, safe='')}&region_name={REGION}")


def _enable_auth(server: S3Server) -> None:
    iam = server.client("iam", access_key="bootstrap", secret_key="bootstrap")
    iam.create_user(UserName="exports")
    iam.put_user_policy(
        UserName="exports", PolicyName="s3-all",
        PolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": [
            {"Effect": "Allow", "Action": ["s3:*"], "Resource": "*"}]}),
    )
    key = iam.create_access_key(UserName="exports")["AccessKey"]
    server.access_key, server.secret_key = key["AccessKeyId"], key["SecretAccessKey"]
    # octet-stream: a form content type would make Flask swallow the body.
    request = urllib.request.Request(
        f"{server.endpoint}/moto-api/reset-auth", data=b"0", method="POST",
        headers={"Content-Type": "application/octet-stream"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        response.read()


def start_s3() -> S3Server:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    server = S3Server(port=port, process=process)
    try:
        wait_for_port(port, what="moto S3 server")
        _enable_auth(server)
    except BaseException:
        stop_s3(server)
        raise
    return server


def stop_s3(server: S3Server) -> None:
    stop_process(server.process)
