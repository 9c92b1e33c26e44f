#!/usr/bin/env python3
"""Generate standalone, strict JSON schemas for kubeconform, offline.

Inputs are files fetched through the Go module proxy (no GitHub access needed):
  * the Kubernetes OpenAPI v2 spec (`api/openapi-spec/swagger.json` of the
    `k8s.io/kubernetes` module), and
  * CustomResourceDefinition YAML files (e.g. the prometheus-operator CRDs in
    `example/prometheus-operator-crd/` of the `github.com/prometheus-operator/prometheus-operator`
    module).

Output: one file per group/version/kind, named the way kubeconform's
`{{ .ResourceKind }}{{ .KindSuffix }}.json` schema-location template expects
(`statefulset-apps-v1.json`, `service-v1.json`, `servicemonitor-monitoring-v1.json`).

The conversion follows openapi2jsonschema's `--kubernetes --strict --stand-alone`:
  * every object schema that lists `properties` and says nothing about
    `additionalProperties` gets `additionalProperties: false` (strict: typos are errors);
  * IntOrString accepts a string or an integer, Quantity a string or a number;
  * every type also admits `null` (the API server accepts explicit nulls);
  * `apiVersion` and `kind` are pinned with `enum`;
  * the file is self-contained: the definitions it uses are copied under `definitions`
    (recursive types such as JSONSchemaProps work through internal `$ref`s).
Descriptions are dropped to keep the files small.
"""
import argparse
import copy
import json
import os
import sys

try:
    import yaml
except ImportError:  # only needed for CRDs
    yaml = None

INT_OR_STRING = {"oneOf": [{"type": "string"}, {"type": "integer"}]}
QUANTITY = {"oneOf": [{"type": "string"}, {"type": "number"}]}
DROP_KEYS = {"description"}


def file_name(kind, group, version):
    suffix = "-" + group.split(".")[0].lower() if group else ""
    return f"{kind.lower()}{suffix}-{version.lower()}.json"


def api_version(group, version):
    return f"{group}/{version}" if group else version


def nullable_type(t):
    if isinstance(t, list):
        return t if "null" in t else t + ["null"]
    return [t, "null"]


def transform(node, strict=True, crd=False):
    """Returns a converted copy of one schema node (recursively)."""
    if isinstance(node, list):
        return [transform(x, strict, crd) for x in node]
    if not isinstance(node, dict):
        return node
    out = {}
    for k, v in node.items():
        if k in DROP_KEYS or k.startswith("x-") or k == "nullable":
            continue
        if k in ("properties", "patternProperties", "definitions"):
            out[k] = {name: transform(s, strict, crd) for name, s in v.items()}
        elif k == "example" or k == "default" or k == "enum":
            out[k] = copy.deepcopy(v)
        else:
            out[k] = transform(v, strict, crd)
    if node.get("x-kubernetes-int-or-string") and "oneOf" not in out and "anyOf" not in out:
        out.pop("type", None)
        out.pop("format", None)
        out["oneOf"] = copy.deepcopy(INT_OR_STRING["oneOf"])
    if "type" in out and (not crd or node.get("nullable") or not strict):
        # Built-in types: the API server accepts nulls. CRDs: only where `nullable: true`.
        out["type"] = nullable_type(out["type"])
    if "enum" in out and "null" not in out["enum"] and isinstance(out.get("type"), list) and "null" in out["type"]:
        out["enum"] = out["enum"] + [None]
    if strict and "properties" in out and "additionalProperties" not in out \
            and not node.get("x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False
    return out


def refs_in(node, acc):
    if isinstance(node, dict):
        r = node.get("$ref")
        if isinstance(r, str) and r.startswith("#/definitions/"):
            acc.add(r[len("#/definitions/"):])
        for v in node.values():
            refs_in(v, acc)
    elif isinstance(node, list):
        for v in node:
            refs_in(v, acc)


def closure(defs, root):
    seen, todo = set(), [root]
    while todo:
        name = todo.pop()
        if name in seen or name not in defs:
            continue
        seen.add(name)
        acc = set()
        refs_in(defs[name], acc)
        todo.extend(acc - seen)
    return seen


def pin(schema, group, version, kind):
    props = schema.setdefault("properties", {})
    props["apiVersion"] = {"type": "string", "enum": [api_version(group, version)]}
    props["kind"] = {"type": "string", "enum": [kind]}


def from_swagger(path, outdir, strict):
    with open(path) as f:
        spec = json.load(f)
    raw = spec["definitions"]
    defs = {}
    for name, d in raw.items():
        if name == "io.k8s.apimachinery.pkg.util.intstr.IntOrString":
            defs[name] = copy.deepcopy(INT_OR_STRING)
        elif name == "io.k8s.apimachinery.pkg.api.resource.Quantity":
            defs[name] = copy.deepcopy(QUANTITY)
        else:
            defs[name] = transform(d, strict)
    n = 0
    for name, d in raw.items():
        for gvk in d.get("x-kubernetes-group-version-kind", []):
            if len(d.get("x-kubernetes-group-version-kind", [])) != 1:
                continue  # DeleteOptions, WatchEvent...: not resources one writes
            group, version, kind = gvk.get("group", ""), gvk["version"], gvk["kind"]
            schema = copy.deepcopy(defs[name])
            pin(schema, group, version, kind)
            used = closure(defs, name) - {name}
            needed = set()
            for u in used:
                needed |= closure(defs, u)
            if name in needed:  # self-recursive type: keep a copy to refer to
                needed.add(name)
            if needed:
                schema["definitions"] = {u: defs[u] for u in sorted(needed)}
            write(outdir, file_name(kind, group, version), schema)
            n += 1
    return n


def from_crd(path, outdir, strict):
    if yaml is None:
        sys.exit("k8s_schemas.py: PyYAML is needed for CRDs (pip install pyyaml)")
    n = 0
    with open(path) as f:
        docs = list(yaml.safe_load_all(f))
    for doc in docs:
        if not doc or doc.get("kind") != "CustomResourceDefinition":
            continue
        spec = doc["spec"]
        group, kind = spec["group"], spec["names"]["kind"]
        for v in spec.get("versions", []):
            s = (v.get("schema") or {}).get("openAPIV3Schema")
            if s is None:
                continue
            schema = transform(s, strict, crd=True)
            pin(schema, group, v["name"], kind)
            props = schema["properties"]
            # metadata is validated by the API server, not by the CRD schema: accept ObjectMeta fields.
            props["metadata"] = {"type": "object"}
            write(outdir, file_name(kind, group, v["name"]), schema)
            n += 1
    return n


def write(outdir, name, schema):
    with open(os.path.join(outdir, name), "w") as f:
        json.dump(schema, f, separators=(",", ":"), sort_keys=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--swagger", help="Kubernetes OpenAPI v2 swagger.json")
    ap.add_argument("--crd", action="append", default=[], help="CRD YAML file (repeatable)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--no-strict", action="store_true")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    n = 0
    if a.swagger:
        n += from_swagger(a.swagger, a.out, not a.no_strict)
    for c in a.crd:
        n += from_crd(c, a.out, not a.no_strict)
    print(f"k8s_schemas.py: wrote {n} schemas to {a.out}")


if __name__ == "__main__":
    main()
