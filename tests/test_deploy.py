"""Offline validation of the Kubernetes manifests in deploy/k8s.

Custom resources (FlinkDeployment, SparkApplication, Strimzi Kafka, KafkaNodePool,
KafkaTopic) are checked with jsonschema against the CRD schemas the project carries in
tests/fixtures/k8s-crds: compact JSON derived from the operators' CRDs in
../shared/k8s-crds by tests/fixtures/k8s-crds/derive.py, plus a hand-written minimal CRD
for the two Strimzi kinds ../shared lacks. So every test here runs on a fresh clone (no
silent skips), the negative tests prove the schemas still reject broken manifests, and,
where ../shared/k8s-crds exists, a test re-derives the fixtures and fails if they are
stale. Built-in kinds are checked with kubernetes-validate.
"""

from __future__ import annotations

import copy
import functools
import importlib.util
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "k8s-crds"
MANIFESTS = sorted((ROOT / "deploy" / "k8s").rglob("*.yaml"))


def _load_derive() -> ModuleType:
    # tests/fixtures/k8s-crds is not a package (the hyphen): load the script by path.
    spec = importlib.util.spec_from_file_location("k8s_crds_derive", FIXTURES / "derive.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


derive = _load_derive()
BUILTIN_GROUPS = derive.BUILTIN_API_VERSIONS


def _docs() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for path in MANIFESTS:
        for i, doc in enumerate(yaml.safe_load_all(path.read_text())):
            if doc:
                out.append((f"{path.relative_to(ROOT)}#{i}", doc))
    return out


@functools.cache
def _crd_schemas() -> dict[tuple[str, str], dict[str, Any]]:
    return derive.load_schemas(FIXTURES)


# One validator per schema, without jsonschema.validate's meta-schema check on every call
# (seconds for the 177 kB Flink schema); test_derived_fixture_is_a_sound_schema does it once.
VALIDATOR = jsonschema.Draft202012Validator


@functools.cache
def _validator(api: str, kind: str) -> jsonschema.protocols.Validator:
    return VALIDATOR(_crd_schemas()[(api, kind)])


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
    assert (api, kind) in _crd_schemas(), f"{where}: no CRD schema for {api} {kind}"
    _validator(api, kind).validate(doc)
    # Every argument the driver gets must be one the CLI accepts.
    from dataflow.cli import build_parser

    if kind == "SparkApplication":
        build_parser().parse_args(doc["spec"]["arguments"])
        # The state store the job needs (transformWithState on RocksDB) is set there too.
        from dataflow.runners.spark.state import STATE_STORE_CONF

        assert STATE_STORE_CONF.items() <= doc["spec"]["sparkConf"].items()
    if kind == "FlinkDeployment":
        args = doc["spec"]["job"]["args"]
        assert args[:2] == ["-pym", "dataflow.cli"]
        build_parser().parse_args(args[2:])


def test_schema_rejects_a_broken_manifest() -> None:
    doc = next(d for _, d in DOCS if d["kind"] == "SparkApplication")
    broken = {**doc, "spec": {**doc["spec"], "type": "Cobol"}}
    with pytest.raises(jsonschema.ValidationError):
        _validator(doc["apiVersion"], "SparkApplication").validate(broken)


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
    _assert_rejected(_strimzi(kind)[0], path, value)


def _assert_rejected(doc: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    """``doc`` is valid, and invalid once the field at ``path`` is set to ``value``."""
    validator = _validator(doc["apiVersion"], doc["kind"])
    validator.validate(doc)  # so the rejection below is the mutation's doing
    broken = copy.deepcopy(doc)
    node = broken
    for step in path[:-1]:
        node = node[step]
    node[path[-1]] = value
    with pytest.raises(jsonschema.ValidationError):
        validator.validate(broken)


@pytest.mark.parametrize(
    ("kind", "path", "value"),
    [
        ("FlinkDeployment", ("spec", "job", "parallelism"), "2"),  # a string, not an integer
        ("FlinkDeployment", ("spec", "job", "upgradeMode"), "last_state"),  # not in the enum
        ("FlinkDeployment", ("spec", "flinkVersion"), "2.3"),  # the enum spells it v2_3
        ("FlinkDeployment", ("spec", "jobManager", "resource", "cpu"), "1 core"),
        ("SparkApplication", ("spec", "driver", "cores"), 0),  # minimum 1
        ("SparkApplication", ("spec", "executor", "instances"), "2"),
        ("SparkApplication", ("spec", "restartPolicy", "type"), "OnError"),
        ("SparkApplication", ("spec", "mode"), "local"),
    ],
)
def test_operator_schemas_reject_broken_resources(
    kind: str, path: tuple[str, ...], value: Any
) -> None:
    doc = next(d for _, d in DOCS if d["kind"] == kind)
    _assert_rejected(doc, path, value)


def test_every_custom_kind_has_a_carried_schema() -> None:
    """No manifest's custom kind depends on files outside the repository."""
    custom = {(d["apiVersion"], d["kind"]) for _, d in DOCS} - {
        (d["apiVersion"], d["kind"]) for _, d in DOCS if d["apiVersion"] in BUILTIN_GROUPS
    }
    assert custom >= {
        ("flink.apache.org/v1beta1", "FlinkDeployment"),
        ("sparkoperator.k8s.io/v1beta2", "SparkApplication"),
        ("kafka.strimzi.io/v1", "Kafka"),
    }
    assert custom <= set(_crd_schemas()), custom - set(_crd_schemas())


@pytest.mark.parametrize("name", sorted(derive.read_fixtures(FIXTURES)))
def test_derived_fixture_is_a_sound_schema(name: str) -> None:
    """Each derived fixture says where it came from and is a well-formed schema."""
    doc = derive.read_fixtures(FIXTURES)[name]
    prov = doc["provenance"]
    assert {"source", "source_sha256", "group", "version", "kind", "derived"} <= set(prov)
    assert prov["regenerate"] == derive.REGENERATE
    assert name == derive.fixture_name((doc["apiVersion"], doc["kind"]))
    assert derive.strip_descriptions(doc["openAPIV3Schema"]) == doc["openAPIV3Schema"]
    VALIDATOR.check_schema(doc["openAPIV3Schema"])


def test_derived_fixtures_are_up_to_date() -> None:
    """Where ../shared/k8s-crds exists, re-deriving (in memory) gives the same fixtures."""
    if not derive.SHARED_CRDS.is_dir():
        pytest.skip(f"no {derive.SHARED_CRDS} to re-derive the fixtures from")
    fresh = derive.derive(derive.SHARED_CRDS)
    carried = derive.read_fixtures(FIXTURES)
    regenerate = f"stale CRD fixtures: run `{derive.REGENERATE}`"
    assert sorted(carried) == sorted(fresh), regenerate
    for name, doc in fresh.items():
        assert derive.without_date(carried[name]) == derive.without_date(doc), (
            f"{name}: {regenerate}"
        )


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
