"""Validates documents against one of vigil's JSON Schemas in docs/schema/ as a stock validator would.

The schema is read on its own (Draft 2020-12, no registry, no other file): a `$ref` that leaves
the file fails here. Documents are read with PyYAML's `safe_load`, a YAML 1.1 loader (the one
LiteLLM reads its proxy config with), so a timestamp left unquoted comes back as a datetime and
fails its `"type": "string"`; JSON is YAML too.

usage: validate_schema.py SCHEMA_DIR SCHEMA_NAME FILE... ; exits 1 naming each violation.
"""

import json
import pathlib
import sys

import jsonschema
import yaml


def refs(node):
    """Every `$ref` in a schema."""
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "$ref":
                yield v
            else:
                yield from refs(v)
    elif isinstance(node, list):
        for v in node:
            yield from refs(v)


schema_dir, name, files = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3:]
schema = json.loads((schema_dir / name).read_text())
outside = [r for r in refs(schema) if not r.startswith("#")]
if outside:
    print(f"{name}: $ref outside the file: {outside}")
    sys.exit(1)
jsonschema.Draft202012Validator.check_schema(schema)
validator = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
bad = 0
for f in files:
    doc = yaml.safe_load(pathlib.Path(f).read_text())
    for e in validator.iter_errors(doc):
        bad += 1
        print(f"{f}: {'/'.join(map(str, e.absolute_path)) or '(root)'}: {e.message}")
print(f"{len(files)} document(s) checked against {name}, {bad} violation(s)")
sys.exit(1 if bad else 0)
