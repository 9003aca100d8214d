"""Validates documents against vigil's JSON Schemas in docs/schema/ (Draft 2020-12, with cross-file refs).

usage: validate_schema.py SCHEMA_DIR SCHEMA_NAME FILE... (JSON or YAML); exits 1 naming each violation.
"""

import json
import pathlib
import sys

import jsonschema
import yaml
from referencing import Registry, Resource



class NoTimestamps(yaml.SafeLoader):
    """YAML as JSON sees it: timestamps stay strings."""


NoTimestamps.yaml_implicit_resolvers = {
    k: [r for r in v if r[0] != "tag:yaml.org,2002:timestamp"] for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()
}

schema_dir, name, files = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3:]
schemas = {p.name: json.loads(p.read_text()) for p in schema_dir.glob("*.json")}
registry = Registry().with_resources((s["$id"], Resource.from_contents(s)) for s in schemas.values())
jsonschema.Draft202012Validator.check_schema(schemas[name])
validator = jsonschema.Draft202012Validator(
    schemas[name], registry=registry, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
)
bad = 0
for f in files:
    doc = yaml.load(pathlib.Path(f).read_text(), Loader=NoTimestamps)
    for e in validator.iter_errors(doc):
        bad += 1
        print(f"{f}: {'/'.join(map(str, e.absolute_path)) or '(root)'}: {e.message}")
print(f"{len(files)} document(s) checked against {name}, {bad} violation(s)")
sys.exit(1 if bad else 0)
