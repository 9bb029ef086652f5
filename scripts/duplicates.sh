#!/usr/bin/env bash
# Counts the repeated code of this tree with the `duplicates` tool of the
# development machines, with Go import lines passed over.
#
# The tool's README says it passes over import lines, and it does for a
# Python `import x` or a Go `import "x"` line; but the lines of a Go grouped
# import block ("fmt" alone on its line) are counted as code, so two test
# files of one package that import the same eight packages make a pair. This
# script copies the tracked tree to a temporary folder with every Go import
# line blanked (line numbers kept, so the rows point at the real files) and
# runs the tool there.
#
# Usage: scripts/duplicates.sh [duplicates options, e.g. --most 200]
set -euo pipefail
cd "$(dirname "$0")/.."
command -v duplicates >/dev/null || { echo "duplicates: not on PATH (a tool of the development machines)" >&2; exit 1; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
git ls-files -z --cached --others --exclude-standard |
  while IFS= read -r -d '' f; do
    [ -f "$f" ] || continue
    mkdir -p "$tmp/$(dirname "$f")"
    cp "$f" "$tmp/$f"
  done
python3 - "$tmp" <<'EOF'
# Blank every Go import line; the tool itself runs on python3.
import pathlib, sys
for p in pathlib.Path(sys.argv[1]).rglob("*.go"):
    out, inblock = [], False
    for line in p.read_text().split("\n"):
        if line == "import (":
            inblock = True; out.append(""); continue
        if inblock:
            inblock = line != ")"; out.append(""); continue
        out.append("" if line.startswith("import ") else line)
    p.write_text("\n".join(out))
EOF
duplicates --repo "$tmp" "$@" | sed "s|$tmp/||g"
