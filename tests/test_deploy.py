"""Offline validation of the Kubernetes manifests in deploy/k8s: custom resources
against the CRD schemas in ../shared/k8s-crds (jsonschema), built-in kinds with
kubernetes-validate."""

from __future__ import annotations

import copy
import functools
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
CRDS = ROOT.parent / "shared" / "k8s-crds"
# Minimal schemas of our own for CRDs that ../shared lacks (Strimzi KafkaNodePool and
# KafkaTopic); a CRD in CRDS always wins.
LOCAL_CRDS = ROOT / "tests" / "fixtures" / "k8s-crds"
MANIFESTS = sorted((ROOT / "deploy" / "k8s").rglob("*.yaml"))
BUILTIN_GROUPS = {"v1", "apps/v1", "batch/v1", "rbac.authorization.k8s.io/v1"}


def _docs() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for path in MANIFESTS:
        for i, doc in enumerate(yaml.safe_load_all(path.read_text())):
            if doc:
                out.append((f"{path.relative_to(ROOT)}#{i}", doc))
    return out


@functools.cache  # parsing the CRDs (2 MB of YAML) takes seconds: once per session
def _crd_schemas() -> dict[tuple[str, str], dict[str, Any]]:
    schemas: dict[tuple[str, str], dict[str, Any]] = {}
    if not CRDS.exists():
        return schemas
    for path in sorted(CRDS.iterdir()) + sorted(LOCAL_CRDS.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc or doc.get("kind") != "CustomResourceDefinition":
                continue
            group = doc["spec"]["group"]
            kind = doc["spec"]["names"]["kind"]
            for version in doc["spec"]["versions"]:
                api = f"{group}/{version['name']}"
                schemas.setdefault((api, kind), version["schema"]["openAPIV3Schema"])
    return schemas


DOCS = _docs()


def test_there_are_manifests() -> None:
    kinds = {doc["kind"] for _, doc in DOCS}
    assert {"SparkApplication", "FlinkDeployment", "ConfigMap"} <= kinds


@pytest.mark.parametrize(("where", "doc"), DOCS, ids=[w for w, _ in DOCS])
def test_manifest_is_valid(where: str, doc: dict[str, Any]) -> None:
    api, kind = doc["apiVersion"], doc["kind"]
    if api in BUILTIN_GROUPS:
        kv = pytest.importorskip("kubernetes_validate")
        kv.validate(doc, kv.latest_version(), strict=True)
        return
    schemas = _crd_schemas()
    if not schemas:
        pytest.skip(f"no CRD schemas at {CRDS}")
    schema = schemas.get((api, kind))
    assert schema is not None, f"{where}: no CRD schema for {api} {kind}"
    jsonschema.validate(doc, schema)
    # Every argument the driver gets must be one the CLI accepts.
    from dataflow.cli import build_parser

    if kind == "SparkApplication":
        build_parser().parse_args(doc["spec"]["arguments"])
    if kind == "FlinkDeployment":
        args = doc["spec"]["job"]["args"]
        assert args[:2] == ["-pym", "dataflow.cli"]
        build_parser().parse_args(args[2:])


def test_schema_rejects_a_broken_manifest() -> None:
    schemas = _crd_schemas()
    if not schemas:
        pytest.skip(f"no CRD schemas at {CRDS}")
    doc = next(d for _, d in DOCS if d["kind"] == "SparkApplication")
    broken = {**doc, "spec": {**doc["spec"], "type": "Cobol"}}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, schemas[(doc["apiVersion"], "SparkApplication")])


def _strimzi(kind: str) -> list[dict[str, Any]]:
    return [d for _, d in DOCS if d["apiVersion"].startswith("kafka.strimzi.io/") and
            d["kind"] == kind]  # fmt: skip


def test_strimzi_resources_fit_together() -> None:
    """Node pools and topics name an existing Kafka cluster; KRaft needs controllers and
    brokers; no topic asks for more replicas than there are brokers."""
    clusters = {(d["metadata"]["namespace"], d["metadata"]["name"]): d for d in _strimzi("Kafka")}
    assert clusters, "deploy/k8s/kafka has no Kafka resource"
    pools = _strimzi("KafkaNodePool")
    brokers: dict[tuple[str, str], int] = {}
    roles: dict[tuple[str, str], set[str]] = {}
    for pool in pools + _strimzi("KafkaTopic"):
        key = (pool["metadata"]["namespace"], pool["metadata"]["labels"]["strimzi.io/cluster"])
        assert key in clusters, f"{pool['kind']} {pool['metadata']['name']}: no Kafka {key}"
    for pool in pools:
        key = (pool["metadata"]["namespace"], pool["metadata"]["labels"]["strimzi.io/cluster"])
        roles.setdefault(key, set()).update(pool["spec"]["roles"])
        if "broker" in pool["spec"]["roles"]:
            brokers[key] = brokers.get(key, 0) + pool["spec"]["replicas"]
    for key, kafka in clusters.items():
        assert roles.get(key) == {"controller", "broker"}, f"Kafka {key}: node pool roles"
        config = kafka["spec"]["kafka"].get("config", {})
        assert config.get("min.insync.replicas", 1) < brokers[key]
        assert "topicOperator" in kafka["spec"].get("entityOperator", {})
    topics = _strimzi("KafkaTopic")
    for topic in topics:
        key = (topic["metadata"]["namespace"], topic["metadata"]["labels"]["strimzi.io/cluster"])
        assert topic["spec"].get("replicas", 1) <= brokers[key], topic["metadata"]["name"]
    names = {t["spec"].get("topicName", t["metadata"]["name"]) for t in topics}
    for role in ("updates", "deltas", "dead-letter"):
        assert any(n.endswith(f"-{role}") for n in names), f"no {role} topic in {names}"


@pytest.mark.parametrize(
    ("kind", "path", "value"),
    [
        ("KafkaNodePool", ("spec", "roles"), ["zookeeper"]),
        ("KafkaTopic", ("spec", "partitions"), 0),
        ("KafkaTopic", ("spec", "replica"), 3),  # a typo of "replicas"
        ("Kafka", ("spec", "kafka", "listeners"), [{"name": "plain", "port": 9092}]),
    ],
)
def test_strimzi_schemas_reject_broken_resources(
    kind: str, path: tuple[str, ...], value: Any
) -> None:
    schemas = _crd_schemas()
    if not schemas:
        pytest.skip(f"no CRD schemas at {CRDS}")
    doc = copy.deepcopy(_strimzi(kind)[0])
    node = doc
    for step in path[:-1]:
        node = node[step]
    node[path[-1]] = value
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, schemas[(doc["apiVersion"], kind)])


def test_kafka_form_of_the_driver_args_matches_the_strimzi_resources() -> None:
    """The kafka:// arguments the Spark/Flink manifests' comments give (K = the Strimzi
    bootstrap Service) parse with the CLI and name the declared topics."""
    from connectors.kafka import parse_kafka_url
    from dataflow.cli import build_parser

    (kafka,) = _strimzi("Kafka")
    meta = kafka["metadata"]
    port = next(x["port"] for x in kafka["spec"]["kafka"]["listeners"] if not x["tls"])
    bootstrap = f"{meta['name']}-kafka-bootstrap.{meta['namespace']}.svc:{port}"
    topics = {t["spec"].get("topicName", t["metadata"]["name"]) for t in _strimzi("KafkaTopic")}
    for path in ("spark/sparkapplication.yaml", "flink/flinkdeployment.yaml"):
        text = (ROOT / "deploy" / "k8s" / path).read_text()
        k = re.search(r"with K = (kafka://\S+)", text)
        assert k is not None, f"{path}: no 'with K = kafka://...' comment"
        assert k.group(1) == f"kafka://{bootstrap}", path
        lines = re.findall(r"#\s+(--(?:updates|deltas) K/.*)", text)
        args = " ".join(lines).replace("K/", f"{k.group(1)}/").split()
        opts = build_parser().parse_args(["run", "q.sql", *args])
        updates, deltas = parse_kafka_url(opts.updates), parse_kafka_url(opts.deltas)
        assert opts.on_error == "skip"
        assert {updates.topic, deltas.topic, updates.dead_letter_topic} <= topics, path
        assert {updates.bootstrap, deltas.bootstrap} == {bootstrap}
