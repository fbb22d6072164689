#!/usr/bin/env bash
# Cut a release from a clean checkout of the commit to release (docs/release.md):
#   bash tools/release.sh [--dry-run]
# 1. refuses a working tree with uncommitted changes or untracked files;
# 2. checks that the version's three places agree: autotune_cache/version.py's __version__,
#    MODULE.bazel's module(version = ...), CHANGELOG.md's first `## [X.Y.Z]` heading;
# 3. builds the sdist and the wheel into dist/ with `python -m build`, and runs
#    `twine check --strict` on them, both from tools/dev.sh's virtualenv (its test extra has
#    build and twine; $AUTOTUNE_VENV picks another, as for dev.sh). The build is not isolated,
#    as in dev.sh's package stage, so it needs no network;
# 4. creates the annotated tag vX.Y.Z, refusing if it exists or if the changelog's heading has
#    no release date, and prints the push command. It pushes and uploads nothing.
# --dry-run does all of this but the tag, and says what would stop a real run.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${AUTOTUNE_VENV:-$ROOT/.venv}"
PY="$VENV/bin/python"

die() { printf 'release.sh: %s\n' "$*" >&2; exit 1; }

dry_run=0
case "${1:-}" in
  "") ;;
  --dry-run) dry_run=1 ;;
  *) echo "usage: tools/release.sh [--dry-run]" >&2; exit 2 ;;
esac

cd "$ROOT"
[ "$(git rev-parse --show-toplevel 2>/dev/null)" = "$ROOT" ] || die "$ROOT is not a git checkout"

dirty="$(git status --porcelain)"
if [ -n "$dirty" ]; then
  printf '%s\n' "$dirty" >&2
  die "the working tree is not clean (above: commit or remove each); a release is built from \
the commit it tags"
fi

"$PY" -c "import build, twine" 2>/dev/null \
  || die "$PY lacks build or twine: run 'bash tools/dev.sh setup' (the test extra has both)"

version="$("$PY" - <<'EOF'
import re
import sys
from pathlib import Path

def first(pattern, path, flags=0):
    match = re.search(pattern, Path(path).read_text(encoding="utf-8"), flags)
    return match[1] if match else None

places = {
    "autotune_cache/version.py __version__": first(r'^__version__ = "([^"]+)"',
                                                    "autotune_cache/version.py", re.M),
    "MODULE.bazel module(version)": first(
        r'module\(\s*name = "rules_autotune",\s*version = "([^"]+)"', "MODULE.bazel"),
    "CHANGELOG.md's first ## [X.Y.Z] heading": first(r"^## \[(\d[^\]]*)\]", "CHANGELOG.md", re.M),
}
if None in places.values() or len(set(places.values())) != 1:
    print("release.sh: the version's three places differ (docs/release.md):", file=sys.stderr)
    for place, found in places.items():
        print(f"  {place}: {found}", file=sys.stderr)
    sys.exit(1)
print(places.popitem()[1])
EOF
)"
tag="v$version"

# What stops the tag; a dry run reports it at the end instead.
blockers=()
git rev-parse -q --verify "refs/tags/$tag" >/dev/null && blockers+=("the tag $tag exists")
heading="$(grep -m1 -E '^## \[[0-9]' CHANGELOG.md)"
[[ "$heading" =~ \ -\ [0-9]{4}-[0-9]{2}-[0-9]{2}$ ]] \
  || blockers+=("CHANGELOG.md's '$heading' has no release date (## [$version] - YYYY-MM-DD)")
if [ "$dry_run" -eq 0 ] && [ ${#blockers[@]} -gt 0 ]; then
  die "$(printf '%s; ' "${blockers[@]}")nothing built"
fi

sdist="dist/autotune_cache-$version.tar.gz"
wheel="dist/autotune_cache-$version-py3-none-any.whl"
rm -f dist/autotune_cache-*
echo "release.sh: building autotune_cache $version into dist/" >&2
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
if ! "$PY" -m build --no-isolation --outdir dist . >"$log" 2>&1; then
  tail -n 40 "$log" >&2
  die "the build failed (its last lines are above)"
fi
[ -f "$sdist" ] && [ -f "$wheel" ] || die "the build did not write $sdist and $wheel"
"$PY" -m twine check --strict "$sdist" "$wheel"

if [ "$dry_run" -eq 1 ]; then
  echo "release.sh: dry run: built and checked $sdist and $wheel; made no tag"
  for blocker in ${blockers[@]+"${blockers[@]}"}; do
    echo "release.sh: a real run would refuse: $blocker"
  done
  exit 0
fi

git tag -a "$tag" -m "autotune_cache $version"
echo "release.sh: tagged $(git rev-parse --short HEAD) as $tag, and built $sdist and $wheel."
echo "Publish the tag (the README's install lines name it):"
echo "  git push origin $tag"
