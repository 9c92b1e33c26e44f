#!/usr/bin/env python3
"""Copies topology/examples/orders.toml into the `topology: |` block of values.yaml.

Run after editing the example topology: helm/test.sh checks the two are identical."""
import pathlib
import sys

root = pathlib.Path(__file__).resolve().parents[2]
values = root / "helm/tidemark/values.yaml"
example = (root / "topology/examples/orders.toml").read_text()
lines = values.read_text().splitlines(keepends=True)
start = next(i for i, l in enumerate(lines) if l.rstrip() == "topology: |")
end = next(i for i in range(start + 1, len(lines)) if lines[i][:1].strip() and not lines[i].startswith(" "))
block = ["  " + l if l.strip() else "\n" for l in example.splitlines(keepends=True)]
# Keep one blank line before the next key, as the file had.
values.write_text("".join(lines[: start + 1] + block + ["\n"] + lines[end:]))
print(f"updated {values.relative_to(root)} from topology/examples/orders.toml", file=sys.stderr)
