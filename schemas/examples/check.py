#!/usr/bin/env python3
"""Check the fleetmesh JSON Schemas against their examples.

Usage: python3 schemas/examples/check.py [-v]

For every schema under schemas/json/ (except common.json) there must be an
example file at the same relative path under schemas/examples/ holding
{"valid": [...], "invalid": [{"why", "path", "instance"}, ...]}.

* Every schema must itself be valid against the Draft 2020-12 metaschema and
  its $id must match its path.
* Valid instances must produce no error.
* Invalid instances must produce at least one error whose instance location
  (a JSON pointer) equals the stated "path".

Event content: when the schema declares properties.content.contentSchema, the
content string is parsed as JSON and validated against contentSchema (as the
Rust code does); those errors are reported under "/content" + the pointer
inside the decoded document. A content that is not JSON is an error at
"/content". With "x-fleetmesh": {"contentOptional": true} an empty content is
valid and not decoded.

Requires the `jsonschema` package (pip install jsonschema).
"""
import json
import sys
from pathlib import Path

from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

HERE = Path(__file__).resolve().parent
SCHEMAS = HERE.parent / "json"
BASE = "https://fleetmesh.org/schemas/v1alpha1/"


def pointer(parts):
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def load_schemas():
    schemas = {}
    for path in sorted(SCHEMAS.rglob("*.json")):
        rel = path.relative_to(SCHEMAS).as_posix()
        schemas[rel] = json.loads(path.read_text())
    return schemas


class Checker:
    def __init__(self, schemas):
        self.schemas = schemas
        self.registry = Registry().with_resources(
            (s["$id"], Resource.from_contents(s, default_specification=DRAFT202012))
            for s in schemas.values()
        )

    def validator(self, schema):
        return Draft202012Validator(schema, registry=self.registry)

    def errors(self, schema, instance):
        """(pointer, message) for every error, content errors included."""
        out = [(pointer(e.absolute_path), e.message)
               for e in self.validator(schema).iter_errors(instance)]
        content_schema = (schema.get("properties", {}).get("content", {})
                          .get("contentSchema"))
        if content_schema is None or not isinstance(instance, dict):
            return out
        content = instance.get("content")
        if not isinstance(content, str):
            return out
        if content == "" and schema.get("x-fleetmesh", {}).get("contentOptional"):
            return out
        try:
            decoded = json.loads(content)
        except ValueError as exc:
            return out + [("/content", f"content is not JSON: {exc}")]
        out += [("/content" + pointer(e.absolute_path), e.message)
                for e in self.validator(content_schema).iter_errors(decoded)]
        return out


def main():
    verbose = "-v" in sys.argv[1:]
    passed = failed = 0

    def report(ok, what, detail=""):
        nonlocal passed, failed
        if ok:
            passed += 1
            if verbose:
                print(f"ok    {what}{detail}")
        else:
            failed += 1
            print(f"FAIL  {what}{detail}")

    schemas = load_schemas()
    checker = Checker(schemas)

    for rel, schema in schemas.items():
        problems = [e.message for e in
                    Draft202012Validator(Draft202012Validator.META_SCHEMA).iter_errors(schema)]
        if schema.get("$schema") != "https://json-schema.org/draft/2020-12/schema":
            problems.append("$schema is not Draft 2020-12")
        if schema.get("$id") != BASE + rel:
            problems.append(f"$id is {schema.get('$id')!r}, expected {BASE + rel!r}")
        if "x-fleetmesh" not in schema:
            problems.append("no x-fleetmesh annotation")
        report(not problems, f"schema {rel}", "" if not problems else ": " + "; ".join(problems))

    for rel, schema in schemas.items():
        if rel == "common.json":
            continue
        example_path = HERE / rel
        if not example_path.exists():
            report(False, f"examples/{rel}", ": missing")
            continue
        ex = json.loads(example_path.read_text())
        if len(ex.get("valid", [])) < 1 or len(ex.get("invalid", [])) < 2:
            report(False, f"examples/{rel}", ": needs >= 1 valid and >= 2 invalid")
        for i, inst in enumerate(ex.get("valid", [])):
            errs = checker.errors(schema, inst)
            report(not errs, f"{rel} valid[{i}]",
                   "" if not errs else ": " + "; ".join(f"{p or '/'}: {m}" for p, m in errs))
        for i, case in enumerate(ex.get("invalid", [])):
            errs = checker.errors(schema, case["instance"])
            where = f"{rel} invalid[{i}] ({case['why']})"
            if not errs:
                report(False, where, ": no error")
            elif case["path"] not in [p for p, _ in errs]:
                report(False, where, f": expected an error at {case['path']!r}, got "
                       + "; ".join(f"{p or '/'}: {m}" for p, m in errs))
            else:
                report(True, where, (" -> " + "; ".join(f"{p or '/'}: {m[:100]}" for p, m in errs))
                       if verbose else "")

    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
