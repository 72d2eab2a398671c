"""Offline validation of the Kubernetes manifests in deploy/k8s: custom resources
against the CRD schemas in ../shared/k8s-crds (jsonschema), built-in kinds with
kubernetes-validate."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
CRDS = ROOT.parent / "shared" / "k8s-crds"
MANIFESTS = sorted((ROOT / "deploy" / "k8s").rglob("*.yaml"))
BUILTIN_GROUPS = {"v1", "apps/v1", "batch/v1", "rbac.authorization.k8s.io/v1"}


def _docs() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for path in MANIFESTS:
        for i, doc in enumerate(yaml.safe_load_all(path.read_text())):
            if doc:
                out.append((f"{path.relative_to(ROOT)}#{i}", doc))
    return out


def _crd_schemas() -> dict[tuple[str, str], dict[str, Any]]:
    schemas: dict[tuple[str, str], dict[str, Any]] = {}
    if not CRDS.exists():
        return schemas
    for path in sorted(CRDS.iterdir()):
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc or doc.get("kind") != "CustomResourceDefinition":
                continue
            group = doc["spec"]["group"]
            kind = doc["spec"]["names"]["kind"]
            for version in doc["spec"]["versions"]:
                api = f"{group}/{version['name']}"
                schemas[(api, kind)] = version["schema"]["openAPIV3Schema"]
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
