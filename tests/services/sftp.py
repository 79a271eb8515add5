"""A real SFTP server (asyncssh) in a subprocess, plus a TCP proxy that can cut connections.

OpenSSH's ``sshd`` is not installed on the test image, so the session runs asyncssh's SSH/SFTP
server instead: a separate process speaking the real protocol on a free loopback port, with a
temporary host key, one user (password ``exports`` / ``s3cret`` or a temporary client key),
chrooted to a temp directory. Run as a module it *is* that server process::

    python -m tests.services.sftp PORT ROOT HOST_KEY CLIENT_PUBKEY

:class:`CuttingProxy` sits between client and server and closes both sides after a set number
of client→server bytes, which is how tests drop a connection in the middle of an upload.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

from tests.services.ports import free_port, stop_process, wait_for_port

USER = "exports"
PASSWORD = "s3cret"


@dataclass
class SftpServer:
    port: int
    root: Path
    process: subprocess.Popen[bytes]
    host_public_key: str
    client_key_file: Path

    def connection_uri(self, *, port: int | None = None, password: str | None = PASSWORD,
                       key: bool = False) -> str:
        auth = f"{USER}:{quote(password, safe='')}" if password and not key else USER
        query = f"host_key={quote(self.host_public_key, safe='')}"
        if key:
            query += f"&key_file={quote(str(self.client_key_file), safe='')}"
        return f"sftp://{auth}@127.0.0.1:{port or self.port}/?{query}"


def start_sftp() -> SftpServer:
    import asyncssh

    work = Path(tempfile.mkdtemp(prefix="export-sftp-"))
    root = work / "root"
    root.mkdir()
    host_key = asyncssh.generate_private_key("ssh-ed25519")
    host_key.write_private_key(work / "host_key")
    client_key = asyncssh.generate_private_key("ssh-ed25519")
    client_key.write_private_key(work / "client_key")
    client_key.write_public_key(work / "client_key.pub")
    port = free_port()
    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(repo), *filter(None, [os.environ.get("PYTHONPATH")])])}
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.services.sftp", str(port), str(root),
         str(work / "host_key"), str(work / "client_key.pub")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=repo, env=env,
    )
    server = SftpServer(
        port=port, root=root, process=process,
        host_public_key=host_key.export_public_key().decode().strip(),
        client_key_file=work / "client_key",
    )
    try:
        wait_for_port(port, what="SFTP server")
    except BaseException:
        stop_sftp(server)
        raise
    return server


def stop_sftp(server: SftpServer) -> None:
    import shutil

    stop_process(server.process)
    shutil.rmtree(server.root.parent, ignore_errors=True)


def _serve(port: int, root: str, host_key: str, client_pubkey: str) -> None:
    import asyncio

    import asyncssh

    class _Server(asyncssh.SSHServer):
        def begin_auth(self, username: str) -> bool:
            return True

        def password_auth_supported(self) -> bool:
            return True

        def validate_password(self, username: str, password: str) -> bool:
            return username == USER and password == PASSWORD

    async def main() -> None:
        await asyncssh.listen(
            "127.0.0.1", port, server_host_keys=[host_key], server_factory=_Server,
            authorized_client_keys=client_pubkey,
            sftp_factory=lambda chan: asyncssh.SFTPServer(chan, chroot=root.encode()),
            allow_scp=False,
        )
        await asyncio.Event().wait()

    asyncio.run(main())


@dataclass
class CuttingProxy:
    """Forwards 127.0.0.1:``port`` to ``target_port``; cuts after ``cut_after`` upstream bytes.

    ``cut_after=None`` forwards everything. ``cuts`` counts connections that were cut.
    """

    target_port: int
    cut_after: int | None = None
    port: int = 0
    cuts: int = 0
    _listener: socket.socket | None = field(default=None, repr=False)

    def start(self) -> CuttingProxy:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._listener is not None:
            self._listener.close()

    def _accept(self) -> None:
        assert self._listener is not None
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            threading.Thread(target=self._pump, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, False),
                             daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, counted: bool) -> None:
        sent = 0
        try:
            while chunk := source.recv(16384):
                if counted and self.cut_after is not None and sent + len(chunk) > self.cut_after:
                    sink.sendall(chunk[: self.cut_after - sent])
                    self.cuts += 1
                    break
                sink.sendall(chunk)
                sent += len(chunk)
        except OSError:
            pass
        for sock in (source, sink):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()


if __name__ == "__main__":
    _serve(int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4])
