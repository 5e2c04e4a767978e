#!/usr/bin/env python3
"""Checks that the host's crates import only crates below them.

The workspace Cargo.toml lists the layers, lowest first, under
`[workspace.metadata.layers] order`. Every workspace crate named there may
depend (a normal or build dependency; tests may reach further up) only on
crates of strictly lower layers; crates of one layer do not know each
other. Cargo already refuses a cycle between crates; this refuses an arrow
that points up or sideways, which a cycle check cannot see.

Usage: .ci/layers.py   (from anywhere in the workspace; exits 1 on a
violation, printing each)
"""

import json
import subprocess
import sys


def main() -> int:
    metadata = json.loads(
        subprocess.run(
            ["cargo", "metadata", "--format-version", "1", "--no-deps"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    )
    order = metadata["metadata"]["layers"]["order"]
    layer = {name: i for i, names in enumerate(order) for name in names}
    packages = {p["name"]: p for p in metadata["packages"]}
    missing = [name for name in layer if name not in packages]
    if missing:
        print(f"layers name crates that are not in the workspace: {missing}")
        return 1
    wrong = []
    for name, level in layer.items():
        for dep in packages[name]["dependencies"]:
            if dep["kind"] == "dev" or dep["name"] not in layer:
                continue
            if layer[dep["name"]] >= level:
                wrong.append(f"{name} (layer {level}) depends on {dep['name']} (layer {layer[dep['name']]})")
    for line in wrong:
        print(line)
    print(f"{len(layer)} crates in {len(order)} layers, " + (f"{len(wrong)} arrows pointing up" if wrong else "every arrow points down"))
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
