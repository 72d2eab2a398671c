"""A real Kafka broker for the tests: ``noida-db`` through testcontainers, or as a process.

Order of preference (first that works wins):

1. **container via docker**: a reachable Docker engine (``DOCKER_HOST`` or
   ``/var/run/docker.sock``) runs the local broker image with testcontainers;
2. **container via podman**: a podman API socket (``IVMFLOW_PODMAN_SOCKET``, else the
   one ``.ci/podman_setup.sh`` starts, ``/run/ivmflow-podman/podman.sock``, else
   ``/run/podman/podman.sock``) runs the same image through testcontainers'
   ``DockerContainer`` (podman serves the Docker API);
3. **process**: ``noida-db`` from the Python environment as a subprocess on a free
   loopback port with a temporary data directory, only when no container runtime can
   run the image.

The broker advertises the address it binds (it has no separate "advertised listener"
flag), so the container uses host networking and binds ``127.0.0.1:PORT`` on a port
chosen free on the host: clients then reach exactly the address the broker advertises.

The image (``ivmflow/noida-db:<version>`` by default, override with
``IVMFLOW_KAFKA_IMAGE``) is built locally by ``.ci/kafka_image.sh`` (the broker binary
from the ``noida-db`` wheel plus the shared libraries ``ldd`` lists). No image is pulled.
Set ``IVMFLOW_KAFKA_MODE`` to ``container`` or ``process`` to force one path
(``container`` then fails instead of falling back).

Example (needs ``noida-db`` and ``kafka-python`` installed)::

    with start_broker() as broker:
        topic = unique_name("demo")
        create_topic(broker.bootstrap, topic, partitions=2)
        print(broker.mode, broker.bootstrap)
"""

from __future__ import annotations

import contextlib
import http.client
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.parse
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from importlib import metadata, resources
from pathlib import Path

# How long a starting broker may take to answer a metadata request.
START_TIMEOUT_S = 30.0
# Where .ci/run starts `podman system service` (a fixed path both sides know).
CI_PODMAN_SOCKET = Path("/run/ivmflow-podman/podman.sock")
DEFAULT_PODMAN_SOCKETS = (CI_PODMAN_SOCKET, Path("/run/podman/podman.sock"))
# Finite ulimits: here podman's defaults make runc fail with "error setting rlimit
# type 7 (nofile): operation not permitted" (the runtime, runc, is set by containers.conf).
_CONTAINER_ULIMITS = {"nofile": (1024, 1024), "nproc": (1024, 1024)}


class BrokerUnavailable(RuntimeError):
    """No way to run a Kafka broker here (neither a container runtime nor ``noida-db``)."""


@dataclass
class KafkaBroker:
    """A running broker: ``bootstrap`` is ``"127.0.0.1:PORT"``.

    ``mode`` says how it runs: ``"container:docker"``, ``"container:podman"`` or
    ``"process"``; ``notes`` records why other paths were not taken.
    """

    bootstrap: str
    mode: str
    notes: list[str] = field(default_factory=list)
    start_seconds: float = 0.0
    pid: int | None = None
    """The broker process (``"process"`` mode), for tests that freeze it."""


def noida_version() -> str | None:
    """The installed ``noida-db`` version, or None when it is not installed."""
    try:
        return metadata.version("noida-db")
    except metadata.PackageNotFoundError:
        return None


def noida_binary() -> Path:
    """Path of the native broker binary inside the ``noida-db`` wheel.

    The wheel ships it as package data ``noida_db/noida-db``; its ``noida-db`` console
    script is only a Python wrapper that execs that file.
    """
    if noida_version() is None:
        raise BrokerUnavailable(
            "noida-db is not installed: expected the PyPI package 'noida-db' in this "
            "environment; install it with `pip install -e .[dev]`"
        )
    path = Path(str(resources.files("noida_db").joinpath("noida-db")))
    if not path.is_file():
        raise BrokerUnavailable(
            f"noida-db {noida_version()} is installed but its broker binary is missing: "
            f"expected {path}; reinstall the package"
        )
    if not os.access(path, os.X_OK):
        path.chmod(0o755)
    return path


def default_image() -> str:
    """Name of the locally built broker image (see ``.ci/kafka_image.sh``)."""
    return os.environ.get("IVMFLOW_KAFKA_IMAGE", f"ivmflow/noida-db:{noida_version()}")


def unique_name(prefix: str) -> str:
    """A topic or consumer-group name no other test (or earlier run) uses.

    >>> unique_name("updates").startswith("updates-")
    True
    """
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def free_port() -> int:
    """A TCP port that is free on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def create_topic(bootstrap: str, name: str, partitions: int = 1) -> None:
    """Create topic ``name`` with ``partitions`` partitions and wait until it is visible."""
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id=unique_name("admin"))
    try:
        admin.create_topics([NewTopic(name, partitions, 1)])
        deadline = time.monotonic() + 10
        while True:
            described = admin.describe_topics([name])
            parts = described[0]["partitions"] if described else []
            if described and described[0]["error_code"] == 0 and len(parts) == partitions:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"topic {name!r} on {bootstrap}: expected {partitions} partitions "
                    f"after creation, found {described!r}"
                )
            time.sleep(0.05)
    finally:
        admin.close()


def wait_for_broker(bootstrap: str, timeout: float = START_TIMEOUT_S) -> None:
    """Block until kafka-python can fetch cluster metadata from ``bootstrap``."""
    from kafka import KafkaAdminClient
    from kafka.errors import KafkaError

    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=2000)
            try:
                admin.list_topics()
                return
            finally:
                admin.close()
        except (KafkaError, OSError) as e:  # not up yet: refused, no brokers available
            last = e
            time.sleep(0.1)
    raise TimeoutError(
        f"Kafka broker at {bootstrap} gave no metadata within {timeout:.0f} s: {last!r}"
    )


# --- container runtime discovery -------------------------------------------------------


class _UnixHTTPConnection(http.client.HTTPConnection):
    """HTTP over a unix socket (the Docker API's usual transport)."""

    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self._path)
        self.sock = sock


def _api_get(url: str, path: str, timeout: float = 5.0) -> tuple[int, dict[str, str]] | None:
    """``(status, headers)`` of ``GET path`` on the Docker-API endpoint ``url``, or None.

    Plain HTTP rather than docker-py: its client asks ``/version`` first, which takes
    ~0.5 s on podman, and probing should stay cheap when several endpoints are tried.
    """
    conn: http.client.HTTPConnection
    if url.startswith("unix://"):
        conn = _UnixHTTPConnection(url[len("unix://") :], timeout)
    elif url.startswith(("tcp://", "http://")):
        conn = http.client.HTTPConnection(url.split("://", 1)[1].rstrip("/"), timeout=timeout)
    else:
        return None
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        resp.read()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}
    except OSError:
        return None
    finally:
        conn.close()


def find_container_runtime(notes: list[str]) -> tuple[str, str] | None:
    """``(kind, docker_host)`` of a working Docker-API endpoint, or None.

    ``kind`` is ``"podman"`` when podman serves the API (its ``/_ping`` answer carries a
    ``Libpod-Api-Version`` header), else ``"docker"``. Candidates: ``DOCKER_HOST``, the
    default docker socket, then podman sockets (``IVMFLOW_PODMAN_SOCKET``, the one
    ``.ci/podman_setup.sh`` starts, podman's default). Each one that does not answer is
    noted in ``notes``.
    """
    candidates: list[str] = []
    if os.environ.get("DOCKER_HOST"):
        candidates.append(os.environ["DOCKER_HOST"])
    candidates.append("unix:///var/run/docker.sock")
    podman = [os.environ.get("IVMFLOW_PODMAN_SOCKET", "")]
    podman += [str(p) for p in DEFAULT_PODMAN_SOCKETS]
    candidates += [f"unix://{p}" for p in podman if p]
    seen: set[str] = set()
    for url in candidates:
        if url in seen:
            continue
        seen.add(url)
        if url.startswith("unix://") and not Path(url[len("unix://") :]).exists():
            notes.append(f"{url}: no socket")
            continue
        answer = _api_get(url, "/_ping")
        if answer is None or answer[0] != 200:
            notes.append(f"{url}: no Docker API answers")
            continue
        return ("podman" if "libpod-api-version" in answer[1] else "docker"), url
    return None


def _image_present(url: str, image: str) -> bool:
    """True when the engine at ``url`` has ``image`` locally (nothing is ever pulled)."""
    answer = _api_get(url, f"/images/{urllib.parse.quote(image, safe='')}/json")
    return answer is not None and answer[0] == 200


# --- the two ways to run the broker ----------------------------------------------------
# Each starter returns the running broker and a stop function, so that start_broker can
# fall back when *starting* fails without ever catching errors of the code under test.


def _start_container(kind: str, url: str, image: str) -> tuple[KafkaBroker, Callable[[], None]]:
    """Run ``image`` with testcontainers' ``DockerContainer`` on the endpoint ``url``."""
    from testcontainers.core.config import testcontainers_config
    from testcontainers.core.container import DockerContainer

    # No reaper (Ryuk): its image cannot be pulled here, and stop() below removes the
    # container. The setting is cached on first read, hence the explicit assignment.
    testcontainers_config.ryuk_disabled = True
    # testcontainers resolves DOCKER_HOST (and writes it back to the environment) when it
    # builds its client: point it at the endpoint found, and restore the variables after.
    saved = {k: os.environ.get(k) for k in ("DOCKER_HOST", "TESTCONTAINERS_RYUK_DISABLED")}
    os.environ["DOCKER_HOST"] = url
    os.environ["TESTCONTAINERS_RYUK_DISABLED"] = "true"

    def restore_env() -> None:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v

    port = free_port()
    t0 = time.monotonic()
    # Host networking: the broker advertises the address it binds, so it must bind the
    # very 127.0.0.1:PORT the tests connect to (noida-db has no advertised-listener flag).
    container = (
        DockerContainer(image, docker_client_kw={"environment": {"DOCKER_HOST": url}})
        .with_command(f"start --data-dir /data --host 127.0.0.1 --only kafka --kafka-port {port}")
        .with_kwargs(network_mode="host", ulimits=_ulimits())
    )

    def stop() -> None:
        try:
            with contextlib.suppress(Exception):
                container.stop()
        finally:
            restore_env()

    try:
        container.start()
        bootstrap = f"127.0.0.1:{port}"
        try:
            wait_for_broker(bootstrap)
        except TimeoutError as e:
            raise TimeoutError(f"{e}\ncontainer logs:\n{_container_logs(container)}") from e
    except BaseException:
        stop()
        raise
    broker = KafkaBroker(bootstrap, f"container:{kind}", start_seconds=time.monotonic() - t0)
    return broker, stop


def _ulimits() -> list[object]:
    import docker.types

    return [
        docker.types.Ulimit(name=name, soft=soft, hard=hard)
        for name, (soft, hard) in _CONTAINER_ULIMITS.items()
    ]


def _container_logs(container: object) -> str:
    try:
        out, err = container.get_logs()  # type: ignore[attr-defined]
        return str((out + err).decode(errors="replace")[-4000:])
    except Exception as e:
        return f"(no logs: {e})"


def _start_process() -> tuple[KafkaBroker, Callable[[], None]]:
    """Run the ``noida-db`` binary as a subprocess on a free loopback port."""
    binary = noida_binary()
    data_dir = Path(tempfile.mkdtemp(prefix="ivmflow-kafka-"))
    port = free_port()
    log_path = data_dir / "broker.log"
    t0 = time.monotonic()
    cmd = [str(binary), "start", "--data-dir", str(data_dir / "data"), "--host", "127.0.0.1",
           "--only", "kafka", "--kafka-port", str(port)]  # fmt: skip
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def stop() -> None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(data_dir, ignore_errors=True)

    bootstrap = f"127.0.0.1:{port}"
    try:
        wait_for_broker(bootstrap)
    except TimeoutError as e:
        tail = log_path.read_text(errors="replace")[-4000:]
        stop()
        raise TimeoutError(f"{e}\nbroker exit code {proc.poll()}; log:\n{tail}") from e
    except BaseException:
        stop()
        raise
    return KafkaBroker(bootstrap, "process", start_seconds=time.monotonic() - t0,
                       pid=proc.pid), stop


def launch_broker(mode: str | None = None) -> tuple[KafkaBroker, Callable[[], None]]:
    """Start a broker the best way available; return it and the function that stops it.

    ``mode`` (default: ``IVMFLOW_KAFKA_MODE`` or ``"auto"``) is ``"auto"``,
    ``"container"`` or ``"process"``. Raises :class:`BrokerUnavailable` with the reasons
    when nothing can run a broker.
    """
    mode = mode or os.environ.get("IVMFLOW_KAFKA_MODE", "auto")
    if mode not in ("auto", "container", "process"):
        raise ValueError(f"IVMFLOW_KAFKA_MODE: expected auto, container or process, found {mode!r}")
    notes: list[str] = []
    if mode in ("auto", "container"):
        runtime = find_container_runtime(notes)
        image = default_image()
        if runtime is not None and not _image_present(runtime[1], image):
            notes.append(f"{runtime[1]}: image {image} not built (run .ci/kafka_image.sh)")
            runtime = None
        if runtime is not None:
            try:
                broker, stop = _start_container(runtime[0], runtime[1], image)
                broker.notes = notes
                return broker, stop
            except Exception as e:
                if mode == "container":
                    raise
                notes.append(f"container on {runtime[1]} failed: {e}")
        elif mode == "container":
            raise BrokerUnavailable(
                "IVMFLOW_KAFKA_MODE=container but no container runtime can run the broker "
                "image: " + "; ".join(notes)
            )
    try:
        broker, stop = _start_process()
    except BrokerUnavailable as e:
        raise BrokerUnavailable(f"{e}; container paths: {'; '.join(notes) or 'not tried'}") from e
    broker.notes = notes
    return broker, stop


@contextlib.contextmanager
def start_broker(mode: str | None = None) -> Iterator[KafkaBroker]:
    """:func:`launch_broker` as a context manager: the broker stops on exit."""
    broker, stop = launch_broker(mode)
    try:
        yield broker
    finally:
        stop()
