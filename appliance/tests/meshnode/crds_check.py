#!/usr/bin/env python3
"""Checks `meshnode manifest crds` with independent tools.

    crds_check.py CRDS.yaml EXAMPLES_DIR

- kubernetes-validate (PyPI) --strict: each CRD is a valid apiextensions.k8s.io/v1 object;
- Kubernetes' structural-schema rules: every node typed (or preserving unknown fields), no
  additionalProperties beside properties, metadata only `type: object`;
- Python's jsonschema (draft 4, OpenAPI 3.0's basis): every valid example manifest in
  EXAMPLES_DIR (schemas/examples/manifests) validates against its CRD's openAPIV3Schema,
  and the same manifest with a spec that is not an object does not.
Prints one line per check; exits 1 on the first failure.
"""
import glob
import json
import os
import subprocess
import sys

import jsonschema
import yaml


def fail(msg):
    print(f"crds_check: {msg}", file=sys.stderr)
    sys.exit(1)


def structural(node, path):
    if not isinstance(node, dict):
        fail(f"{path}: not a schema object")
    if "type" not in node and not node.get("x-kubernetes-preserve-unknown-fields"):
        fail(f"{path}: no type")
    if "properties" in node and "additionalProperties" in node:
        fail(f"{path}: additionalProperties beside properties")
    for name, sub in node.get("properties", {}).items():
        structural(sub, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        structural(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        structural(node["additionalProperties"], f"{path}{{}}")


def main():
    crds_file, examples = sys.argv[1], sys.argv[2]
    r = subprocess.run(["kubernetes-validate", "--strict", "--quiet", crds_file],
                       capture_output=True, text=True)
    if r.returncode != 0 or "ERROR" in r.stdout + r.stderr:
        fail(f"kubernetes-validate: {r.stdout}{r.stderr}")
    print("kubernetes-validate: ok")
    with open(crds_file) as f:
        crds = [d for d in yaml.safe_load_all(f) if d]
    by_kind = {c["spec"]["names"]["kind"]: c for c in crds}
    if len(by_kind) != 5:
        fail(f"expected 5 CRDs, got {sorted(by_kind)}")
    for kind, crd in by_kind.items():
        schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        structural(schema, kind)
        if schema["properties"]["metadata"] != {"type": "object"}:
            fail(f"{kind}: metadata must be only type: object")
        print(f"{kind}: structural")
    for path in sorted(glob.glob(os.path.join(examples, "*.json"))):
        with open(path) as f:
            examples_of = json.load(f)
        kind = os.path.basename(path)[: -len(".json")]
        schema = by_kind[kind]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        validator = jsonschema.Draft4Validator(schema)
        for doc in examples_of["valid"]:
            errors = list(validator.iter_errors(doc))
            if errors:
                fail(f"a valid {kind} example does not fit its CRD: {errors[0].message} at {list(errors[0].path)}")
            broken = dict(doc, spec=["not", "an", "object"])
            if validator.is_valid(broken):
                fail(f"{kind}: a spec that is a list passes the CRD")
        # the CRDs are laxer than the schemas (the node checks the rest): count, don't require
        refused = sum(not validator.is_valid(e["instance"]) for e in examples_of["invalid"])
        print(f"{kind}: {len(examples_of['valid'])} valid examples fit; "
              f"{refused} of {len(examples_of['invalid'])} invalid ones refused by the CRD alone")

if __name__ == "__main__":
    main()
