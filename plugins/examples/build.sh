#!/usr/bin/env bash
# Builds the example retention plugins written in other languages:
#
#   OUT_DIR/retention-python.wasm   retention-python/app.py, by componentize-py
#   OUT_DIR/retention-js.wasm       retention-js/retention.js, by jco + ComponentizeJS
#
# Usage: plugins/examples/build.sh OUT_DIR   (from any directory)
#
# The pinned tools (retention-python/requirements.txt,
# retention-js/package-lock.json) are installed into caches outside the
# repository, under ${CUSTODIAN_CI_CACHE:-~/.cache}, and reinstalled only
# when their pins change. A component is rebuilt only when its inputs (its
# source, its tool's pins and version, the WIT) changed or the output is
# missing or was replaced: neither tool builds byte-for-byte reproducibly,
# and every new hash makes the host compile the plugin again (10-20 s).
set -euo pipefail

if [ $# -ne 1 ] || [ "${1#-}" != "$1" ]; then
    echo "usage: $0 OUT_DIR" >&2
    exit 2
fi
mkdir -p "$1"
out="$(cd "$1" && pwd)"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
wit="$(cd "$here/../../sdk/wit" && pwd)"
cache="${CUSTODIAN_CI_CACHE:-$HOME/.cache}"
mkdir -p "$cache"

staging="$(mktemp -d)"
trap 'rm -rf "$staging"' EXIT

# A hash of the WIT (every file of the package and its deps), names included.
wit_hash="$(cd "$wit" && find . -type f -name '*.wit' | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -d' ' -f1)"

# up_to_date NAME INPUTS: whether OUT_DIR/NAME was built from INPUTS (a
# hash) and is still the file that build wrote.
up_to_date() {
    local stamp="$out/.$1.stamp"
    [ -f "$out/$1" ] && [ -f "$stamp" ] &&
        [ "$(cat "$stamp")" = "$2 $(sha256sum < "$out/$1" | cut -d' ' -f1)" ]
}
# stamp NAME INPUTS: records that OUT_DIR/NAME was just built from INPUTS.
stamp() {
    echo "$2 $(sha256sum < "$out/$1" | cut -d' ' -f1)" > "$out/.$1.stamp"
}

# --- Python: componentize-py in a venv --------------------------------------
venv="$cache/custodian-ci-componentize-py"
requirements="$here/retention-python/requirements.txt"
# A venv whose Python no longer runs (the interpreter was upgraded) is made
# anew; the requirements it was installed from are kept in it, so an
# unchanged pin costs nothing.
if ! "$venv/bin/python" -c '' 2>/dev/null; then
    rm -rf "$venv"
    python3 -m venv "$venv"
fi
if ! cmp -s "$requirements" "$venv/custodian-requirements.txt"; then
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps -r "$requirements"
    cp "$requirements" "$venv/custodian-requirements.txt"
fi
py_version="$("$venv/bin/componentize-py" --version)"
echo "using $py_version ($venv)"

py_inputs="$( (echo "$py_version"; echo "$wit_hash"; cat "$requirements" "$here/retention-python/app.py") | sha256sum | cut -d' ' -f1)"
if up_to_date retention-python.wasm "$py_inputs"; then
    echo "retention-python.wasm is up to date"
else
    # Built from a copy, so that nothing but the app is on the Python path
    # (componentize-py bundles what is there) and no __pycache__ is left in
    # the repository.
    mkdir "$staging/python"
    cp "$here/retention-python/app.py" "$staging/python/"
    # componentize-py falls back on $VIRTUAL_ENV's site-packages; the
    # policy needs none.
    env -u VIRTUAL_ENV "$venv/bin/componentize-py" --quiet \
        --wit-path "$wit" --world retention \
        componentize app --python-path "$staging/python" \
        --output "$staging/retention-python.wasm"
    mv "$staging/retention-python.wasm" "$out/retention-python.wasm"
    stamp retention-python.wasm "$py_inputs"
    echo "built $out/retention-python.wasm"
fi

# --- JavaScript: jco + ComponentizeJS from npm ------------------------------
# npm installs into a copy of package.json and the lock kept in the cache,
# so the repository never gets a node_modules. `npm ci` installs exactly
# the lock, and runs again only when the lock changes.
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    echo "error: node and npm are needed for the JavaScript plugin" >&2
    exit 1
fi
js_tools="$cache/custodian-ci-componentize-js"
mkdir -p "$js_tools"
for f in package.json package-lock.json; do
    cmp -s "$here/retention-js/$f" "$js_tools/$f" || cp "$here/retention-js/$f" "$js_tools/$f"
done
if ! cmp -s "$js_tools/package-lock.json" "$js_tools/node_modules/.custodian-lock.json"; then
    (cd "$js_tools" && npm ci --no-audit --no-fund)
    cp "$js_tools/package-lock.json" "$js_tools/node_modules/.custodian-lock.json"
fi
version_of() { # npm package name
    node -p "require(process.argv[1]).version" "$js_tools/node_modules/$1/package.json"
}
js_version="node $(node --version), jco $(version_of @bytecodealliance/jco), componentize-js $(version_of @bytecodealliance/componentize-js)"
echo "using $js_version ($js_tools)"

js_inputs="$( (echo "$js_version"; echo "$wit_hash"; cat "$here/retention-js/package-lock.json" "$here/retention-js/retention.js") | sha256sum | cut -d' ' -f1)"
if up_to_date retention-js.wasm "$js_inputs"; then
    echo "retention-js.wasm is up to date"
else
    # --disable all: the policy needs no WASI at all (no console, clocks,
    # randomness or fetch), so the component imports only its world.
    "$js_tools/node_modules/.bin/jco" componentize "$here/retention-js/retention.js" \
        --wit "$wit" --world-name retention --disable all \
        --out "$staging/retention-js.wasm" >/dev/null
    mv "$staging/retention-js.wasm" "$out/retention-js.wasm"
    stamp retention-js.wasm "$js_inputs"
    echo "built $out/retention-js.wasm"
fi
