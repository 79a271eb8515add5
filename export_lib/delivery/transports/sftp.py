"""SFTP destination through paramiko: temp name, then rename, never a partial final file.

Connection forms (``AIRFLOW_CONN_<ID>``)::

    sftp://alice:s3cret@sftp.example.com:22/?host_key=ssh-ed25519%20AAAAC3Nz...
    sftp://alice@sftp.example.com:2222/?key_file=%2Fsecrets%2Fid_ed25519&host_key=...
    {"conn_type": "sftp", "host": "sftp.example.com", "login": "alice",
     "extra": {"private_key": "-----BEGIN OPENSSH PRIVATE KEY-----...", "host_key": "..."}}

Host keys are verified: ``extra.host_key`` (``<type> <base64>``, as in ``known_hosts``) pins the
server's key; without it the system ``known_hosts`` (or ``extra.known_hosts`` file) must know the
host. ``no_host_key_check=true`` disables the check, for test rigs only; every connection
made so logs a warning.

Who opens the session: inside Airflow the edge resolves the connection with an ``sftp`` client
opener (``Connection.clients["sftp"]``: the SFTP provider's ``SFTPHook``), so the connection's
extras are read the way Airflow's SSH/SFTP hooks read them (``key_file``, ``private_key`` and
``private_key_passphrase``, ``host_key``, ``no_host_key_check``, ``allow_host_key_change``,
``conn_timeout``, ``ciphers``, ``disabled_algorithms``, a proxy command from ``~/.ssh/config``).
Without an opener (``exportctl``, the environment resolver) this module connects with paramiko
itself from the fields above. Either way the upload protocol below is the same.

Upload protocol, per attempt:

1. ``stat`` the final name: present with the artifact's size and a matching ``<name>.sha256``
   sidecar (or, without a sidecar, a matching streamed hash) → acknowledged, nothing written.
2. Remove our own stale temp file ``.<name>.part-<delivery id>`` (left by a dropped attempt).
3. Upload to that temp name, confirm its size, ``posix_rename`` it to the final name, then
   write the sidecar the same way. A connection dropped at any point leaves at most the temp
   name, which the next attempt removes; the final name only ever holds a complete file.
"""

from __future__ import annotations

import base64
import io
import posixpath
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from export_lib.checksums import sha256_stream
from export_lib.config.destinations import SftpDestination
from export_lib.delivery.artifact import DeliverableArtifact
from export_lib.delivery.transports.base import (
    DeliveryContext,
    Transport,
    auth_failure,
    conflict,
    flag,
    network_failure,
    resolve_connection,
)
from export_lib.errors import DeliveryError
from export_lib.logfmt import get_logger
from export_lib.source.connections import Connection, ConnectionResolver

if TYPE_CHECKING:
    import paramiko

T = TypeVar("T")
log = get_logger(__name__)


def _pinned_key(value: str) -> tuple[str, Any]:
    import paramiko

    parts = value.split()
    blob = base64.b64decode(parts[-1])
    key_type = parts[0] if len(parts) > 1 else paramiko.Message(blob).get_text()
    return key_type, paramiko.PKey.from_type_string(key_type, blob)


def _private_key(text: str) -> Any:
    import paramiko

    for cls in (paramiko.Ed25519Key, paramiko.ECDSAKey, paramiko.RSAKey):
        try:
            return cls.from_private_key(io.StringIO(str(text)))
        except (paramiko.SSHException, ValueError, TypeError, IndexError):
            continue
    raise DeliveryError("extra.private_key is not an OpenSSH/PEM private key (ed25519, ecdsa, rsa)")


class SftpTransport(Transport):
    kind = "sftp"
    can_withdraw = True

    def __init__(self, destination: SftpDestination, *,
                 resolver: ConnectionResolver | None = None) -> None:
        self.destination = destination
        self._resolver = resolver
        self._conn: Connection | None = None
        self._ssh: paramiko.SSHClient | None = None
        self._sftp: paramiko.SFTPClient | None = None

    def target(self, artifact: DeliverableArtifact) -> str:
        # Connection-independent, so the ledger's target is stable across credential changes.
        return f"sftp (connection {self.destination.conn_id!r}) {self._path(artifact.name)}"

    def _path(self, name: str) -> str:
        return posixpath.join(self.destination.path, name)

    def __enter__(self) -> SftpTransport:
        conn = resolve_connection(self.destination.conn_id, self.destination.id,
                                  self._resolver)
        self._conn = conn
        opener = conn.clients.get("sftp")
        if opener is not None:
            self._sftp = self._guard(opener)
        else:
            self._connect(conn)
        self._sftp.get_channel().settimeout(float(conn.extra.get("timeout", 60)))
        return self

    def _connect(self, conn: Connection) -> None:
        """Our own paramiko session from the connection's fields (no opener given)."""
        import paramiko

        ssh = paramiko.SSHClient()
        extra = conn.extra
        try:
            self._trust(ssh, conn)
        except (ValueError, TypeError, IndexError, paramiko.SSHException) as exc:
            raise DeliveryError(
                f"connection {conn.conn_id!r}: extra.host_key is not '<type> <base64 key>' as in "
                f"known_hosts ({len(str(extra.get('host_key')))} characters, not shown; "
                f"{type(exc).__name__}); copy the server's line from ssh-keyscan") from None
        pkey = _private_key(extra["private_key"]) if extra.get("private_key") else None
        self._ssh = ssh
        self._guard(lambda: ssh.connect(
            conn.host or "localhost", port=conn.port or 22, username=conn.login,
            password=conn.password, pkey=pkey, key_filename=extra.get("key_file") or None,
            timeout=15, banner_timeout=15, auth_timeout=15, look_for_keys=False,
            allow_agent=False,
        ))
        self._sftp = self._guard(ssh.open_sftp)

    @staticmethod
    def _trust(ssh: paramiko.SSHClient, conn: Connection) -> None:
        import paramiko

        extra = conn.extra
        if flag(extra.get("no_host_key_check")):
            log.warning("connection %r (%s): no_host_key_check is set, so the SFTP server's host "
                        "key is NOT verified and anyone on the path can pose as it; pin it with "
                        "extra.host_key", conn.conn_id, conn.masked_uri())
            ssh.set_missing_host_key_policy(paramiko.AutoAddPolicy())
            return
        ssh.set_missing_host_key_policy(paramiko.RejectPolicy())
        if extra.get("host_key"):
            host = conn.host or "localhost"
            name = host if (conn.port or 22) == 22 else f"[{host}]:{conn.port}"
            key_type, key = _pinned_key(extra["host_key"])
            ssh.get_host_keys().add(name, key_type, key)
        elif extra.get("known_hosts"):
            ssh.load_host_keys(extra["known_hosts"])
        else:
            ssh.load_system_host_keys()

    def close(self) -> None:
        # An opener's session has no SSHClient of ours: closing its SSH transport ends it.
        session = self._ssh
        if session is None and self._sftp is not None:
            session = self._sftp.get_channel().get_transport()
        for handle in (self._sftp, session):
            if handle is not None:
                try:
                    handle.close()
                except Exception:  # noqa: BLE001 - closing a dead session must not mask errors
                    pass
        self._sftp = self._ssh = None

    def find_existing(self, artifact: DeliverableArtifact, ctx: DeliveryContext) -> str | None:
        final = self._path(artifact.name)
        try:
            size = self._guard(lambda: self._sftp.stat(final)).st_size
        except FileNotFoundError:
            return None
        found = self._read_sidecar(artifact.name) if size == artifact.bytes else None
        if found is None and size == artifact.bytes:
            found = self._guard(lambda: self._remote_sha256(final))
            if found == artifact.sha256:
                self._write_sidecar(artifact, ctx)
        if found != artifact.sha256 or size != artifact.bytes:
            raise conflict(self.target(artifact), f"{size} bytes, sha256 {found}",
                           f"{artifact.bytes} bytes, sha256 {artifact.sha256}")
        return f"present size={size}"

    def send(self, artifact: DeliverableArtifact, ctx: DeliveryContext) -> str:
        final = self._path(artifact.name)
        temp = self._path(f".{artifact.name}.part-{ctx.delivery_id}")
        self._guard(lambda: self._makedirs(posixpath.dirname(final)))
        self._guard(lambda: self._remove_quietly(temp))
        attrs = self._guard(lambda: self._put(artifact, temp))
        if attrs.st_size != artifact.bytes:
            raise DeliveryError(f"{temp} holds {attrs.st_size} bytes after upload, expected "
                                f"{artifact.bytes}; retrying", retryable=True)
        self._guard(lambda: self._rename(temp, final))
        self._write_sidecar(artifact, ctx)
        return f"size={attrs.st_size}"

    def _put(self, artifact: DeliverableArtifact, temp: str) -> Any:
        # Streamed from where the artifact lives (a file, or the store's response body).
        with artifact.open() as source:
            return self._sftp.putfo(source, temp, file_size=artifact.bytes, confirm=True)

    def withdraw(self, name: str) -> str:
        for path in (self._path(name), self._path(f"{name}.sha256")):
            self._guard(lambda path=path: self._remove_quietly(path))
        return f"deleted {self._path(name)} on {self.destination.conn_id}"

    def _read_sidecar(self, name: str) -> str | None:
        try:
            with self._guard(lambda: self._sftp.open(self._path(f"{name}.sha256"), "r")) as fh:
                return self._guard(lambda: fh.read(4096)).decode().split()[0]
        except (FileNotFoundError, IndexError):
            return None

    def _write_sidecar(self, artifact: DeliverableArtifact, ctx: DeliveryContext) -> None:
        temp = self._path(f".{artifact.name}.sha256.part-{ctx.delivery_id}")
        body = f"{artifact.sha256}  {artifact.name}\n".encode()
        self._guard(lambda: self._sftp.putfo(io.BytesIO(body), temp, confirm=True))
        self._guard(lambda: self._rename(temp, self._path(f"{artifact.name}.sha256")))

    def _remote_sha256(self, path: str) -> str:
        with self._sftp.open(path, "rb") as handle:
            handle.prefetch()
            return sha256_stream(handle)[0]

    def _rename(self, source: str, target: str) -> None:
        """Atomic rename; servers without OpenSSH's posix-rename get remove-then-rename.

        The fallback has a moment where ``target`` is absent, never one where it is partial.
        """
        try:
            self._sftp.posix_rename(source, target)
        except OSError as exc:
            if "unsupported" not in str(exc).lower():
                raise
            self._remove_quietly(target)
            self._sftp.rename(source, target)

    def _remove_quietly(self, path: str) -> None:
        try:
            self._sftp.remove(path)
        except FileNotFoundError:
            pass

    def _makedirs(self, directory: str) -> None:
        if directory in ("", "/", "."):
            return
        try:
            self._sftp.stat(directory)
        except FileNotFoundError:
            self._makedirs(posixpath.dirname(directory))
            self._sftp.mkdir(directory)

    def _guard(self, call: Callable[[], T]) -> T:
        """Run a paramiko call, classifying failures; FileNotFoundError passes through."""
        import paramiko

        conn = self._conn
        assert conn is not None
        try:
            return call()
        except FileNotFoundError:
            raise
        except paramiko.AuthenticationException as exc:
            raise auth_failure(conn, f"SSH authentication failed ({exc})") from exc
        except paramiko.BadHostKeyException as exc:
            host, port = conn.host or "localhost", conn.port or 22
            raise DeliveryError(
                f"connection {conn.conn_id!r}: the SFTP server {host}:{port} presented a host key "
                f"({exc.key.get_name()}) that does not match the connection's extra.host_key, so "
                "nothing was sent: either the server's key changed or something is posing as it. "
                f"Confirm the key with the server's administrator ('ssh-keyscan -p {port} {host}' "
                "shows what it presents), then set extra.host_key to that '<type> <base64>' line"
            ) from exc
        except PermissionError as exc:
            raise DeliveryError(
                f"connection {conn.conn_id!r}: permission denied on the SFTP server ({exc}); "
                f"grant {conn.login!r} write access to {self.destination.path!r}"
            ) from exc
        except paramiko.SSHException as exc:
            if "known_hosts" in str(exc):
                raise DeliveryError(
                    f"connection {conn.conn_id!r}: {exc}; pin the server key in extra.host_key"
                ) from exc
            raise network_failure(conn, exc) from exc
        except (OSError, EOFError) as exc:  # incl. timeouts and resets
            raise network_failure(conn, exc) from exc
