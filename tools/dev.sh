#!/usr/bin/env bash
# Developer entry point: `tools/dev.sh setup|test|demo|lint`.
# setup  installs everything the project needs on a fresh Debian/Ubuntu machine (idempotent):
#        Bazel 4.2.3 (Debian bazel-bootstrap) and zip for the integration tests, redis-server for
#        the remote-tier tests, a virtualenv
#        with the package and its extras, and buildifier from npm.
# test   runs lint and the whole test suite (unit, Triton, stress, fuzz, real-Bazel integration),
#        then the Triton tests again with the newest Triton release (version matrix); prints
#        each stage's time.
# demo   tunes the example kernels, dumps a cache, reloads it and prints hit statistics; then runs
#        the Bazel ruleset's cycle on Bazel 4.2.3 in a scratch copy of e2e/workspace.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${AUTOTUNE_VENV:-$ROOT/.venv}"
PY="$VENV/bin/python"
TOOLS="$ROOT/.tools"
export PATH="$TOOLS/node_modules/.bin:$PATH"

log() { printf '\033[1m[dev.sh] %s\033[0m\n' "$*" >&2; }

apt_install() {
  local missing=()
  command -v bazel-4 >/dev/null 2>&1 || missing+=(bazel-bootstrap)
  command -v zip >/dev/null 2>&1 || missing+=(zip)
  command -v unzip >/dev/null 2>&1 || missing+=(unzip)
  command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
  [ ${#missing[@]} -eq 0 ] && return 0
  log "installing ${missing[*]} with apt-get"
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
}

setup() {
  apt_install
  if [ ! -x "$PY" ]; then
    log "creating virtualenv $VENV"
    python3 -m venv "$VENV"
  fi
  if ! "$PY" -c "import autotune_cache, torch, triton, jax, pytest, filelock, redis" 2>/dev/null \
      || [ "$ROOT/pyproject.toml" -nt "$VENV/.installed" ]; then
    log "installing Python packages"
    "$PY" -m pip install -q --upgrade pip
    # The CPU wheel of torch; an unpinned torch would pull a multi-GB CUDA build.
    # Triton is pinned to the release the committed example caches were tuned with (their keys
    # name it); a newer Triton correctly reports those caches as stale.
    "$PY" -m pip install -q "torch==2.13.0" "triton==3.6.0"
    # compat mode: a path entry instead of an import hook, so mypy finds the package and its
    # stubs from the checkout (tests/packaging).
    "$PY" -m pip install -q -e "$ROOT[triton,jax,redis,test]" "triton==3.6.0" \
      --config-settings editable_mode=compat
    # grpcio-tools 1.62.3 writes protobuf-4.25 gencode, which every runtime from 4.25 to 7.x
    # loads (GPU images ship older protobuf than PyPI). --no-deps keeps our newer protobuf.
    "$PY" -m pip install -q grpcio
    "$PY" -m pip install -q --no-deps "grpcio-tools==1.62.3"
    touch "$VENV/.installed"
  fi
  if [ ! -x "$TOOLS/node_modules/.bin/buildifier" ]; then
    log "installing buildifier from npm"
    npm install --silent --prefix "$TOOLS" @bazel/buildifier >/dev/null
  fi
}

lint() {
  "$PY" -m ruff check "$ROOT"
  mapfile -t starlark < <(cd "$ROOT" && git ls-files --cached --others --exclude-standard \
    '*.bzl' '*.bazel' 'WORKSPACE' '*/WORKSPACE' 'MODULE.bazel' '*/MODULE.bazel' | sort -u)
  if [ ${#starlark[@]} -gt 0 ]; then
    (cd "$ROOT" && buildifier -mode=check -lint=warn "${starlark[@]}")
  fi
}

# Triton version matrix. The main venv holds the oldest Triton we claim (3.6.0, which the
# committed example caches are keyed to); this stage runs the Triton tests on the interpreter
# with the newest release on PyPI too (bump after `pip index versions triton`).
# The matrix venv holds only that Triton: a .pth file adds the main venv's site directory after
# its own (with the main venv's .pth files, so the editable package too), so every other
# package, torch included, is the main venv's, and its own Triton shadows the main one. A copy
# of torch (about 40 s of a fresh machine's CI) would differ in nothing the matrix tests.
TRITON_LATEST="3.9.0"
triton_latest_tests() {
  local venv="$ROOT/.venv-triton-latest"
  if ! "$venv/bin/python" -c "import sys, triton, autotune_cache, pytest, torch
sys.exit(triton.__version__ != '$TRITON_LATEST' or torch.__file__.startswith('$venv'))" \
      2>/dev/null; then
    log "creating $venv (triton $TRITON_LATEST over $VENV's packages)"
    rm -rf "$venv"
    python3 -m venv --without-pip "$venv"
    local site main_site
    site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')"
    main_site="$("$PY" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')"
    printf 'import site; site.addsitedir(%s)\n' "'$main_site'" > "$site/zz_main_venv.pth"
    "$PY" -m pip install -q --no-deps --target "$site" "triton==$TRITON_LATEST"
  fi
  # -u: its "N worker(s) [M items]" line reaches package_beside's log at once.
  (cd "$ROOT" && "$venv/bin/python" -u -m pytest -ra -n auto -p no:cacheprovider tests/triton)
}

# The packaging checks run beside the Triton matrix: they are one pytest process (a build, a pip
# install into a fresh venv, mypy), at most one core of two, and the matrix alone leaves about a
# third of two cores idle. One after the other they took 86 s + 134 s on 2 cores; side by side
# 134 s for both (251 CPU-s). They start once the matrix's xdist workers have collected: their
# build rewrites autotune_cache.egg-info in the checkout, which a pytest process started in the
# checkout reads its plugins from, and the matrix starts no other pytest.
PACKAGE_STAGE="package: build, twine check, wheel in a fresh venv, mypy --strict"
PACKAGE_PID=""
PACKAGE_OUT=""
package_beside() {  # $1: the log whose "N workers [M items]" line starts the checks
  PACKAGE_OUT="$(mktemp -t dev-package.XXXXXX)"
  (
    for _ in $(seq 1200); do
      grep -qE '^[0-9]+ workers? \[' "$1" 2>/dev/null && break
      sleep 0.5
    done
    date +%s >"$PACKAGE_OUT.start"
    exec "$PY" -m pytest -ra -p no:cacheprovider -m package tests/packaging \
      </dev/null >"$PACKAGE_OUT" 2>&1
  ) &
  PACKAGE_PID=$!
}
package_result() {  # prints the checks' output and time; fails as their pytest failed
  local rc=0
  wait "$PACKAGE_PID" || rc=$?
  PACKAGE_PID=""
  cat "$PACKAGE_OUT"
  local took=$(( $(date +%s) - $(cat "$PACKAGE_OUT.start") ))
  rm -f "$PACKAGE_OUT" "$PACKAGE_OUT.start"
  if [ "$rc" -ne 0 ]; then
    log "stage '$PACKAGE_STAGE' FAILED after $took s (beside the Triton tests)"
    return "$rc"
  fi
  log "stage '$PACKAGE_STAGE': $took s (beside the Triton tests)"
}
triton_latest_tests_beside_package() {
  local matrix_log
  matrix_log="$(mktemp -t dev-matrix.XXXXXX)"
  package_beside "$matrix_log"
  triton_latest_tests 2>&1 | tee "$matrix_log"
  rm -f "$matrix_log"
}

# Runs "$@" as a named stage and prints how long it took; a failing stage is reported by the
# EXIT trap. Not called in an `||`/`&&`/`if` condition, so `set -e` stays in force inside it.
STAGE_NAME=""
STAGE_START=0
stage() {
  STAGE_NAME="$1"
  STAGE_START=$SECONDS
  shift
  "$@"
  log "stage '$STAGE_NAME': $((SECONDS - STAGE_START)) s"
  STAGE_NAME=""
}
trap '[ -z "$STAGE_NAME" ] || log "stage '"'"'$STAGE_NAME'"'"' FAILED after $((SECONDS - STAGE_START)) s"
      [ -z "$PACKAGE_PID" ] || kill "$PACKAGE_PID" 2>/dev/null || true' EXIT

cmd="${1:-}"
shift || true
case "$cmd" in
  setup) setup ;;
  lint) setup; lint ;;
  test)
    stage setup setup
    stage lint lint
    cd "$ROOT"
    # The tests write bytecode, as on a developer's machine, even where the CI image sets
    # PYTHONDONTWRITEBYTECODE: pytest caches its assertion-rewritten modules only where bytecode
    # may be written, and it rewrites every module of a distribution that registers a pytest
    # plugin (hypothesis, autotune_cache, xdist). Without the cache every pytest process of the
    # suite (pytester runs, their xdist workers, the wrapper's, Bazel's and the third-party
    # pytest runs) rewrote hypothesis from source at its terminal summary: 2.7 CPU-s for an
    # empty `pytest --co` against 1.1 with the cache; tests/pytest_plugin/test_pytest_plugin.py
    # 90 s -> 43 s, tests/rules 39 s -> 21 s. Tests that must not write bytecode set it.
    unset PYTHONDONTWRITEBYTECODE
    # Byte-compile the checkout once, in parallel, before the suite's processes would each
    # compile what they import first.
    "$PY" -m compileall -q -j 0 autotune_cache tests bench tools examples >/dev/null
    log "running the test suite"
    if [ $# -eq 0 ]; then
      # One pytest-xdist worker per CPU: the suite is mostly subprocesses (Bazel, pytest, Python
      # children) waiting on each other, and every test is independent of the others.
      stage "test suite (Triton $("$PY" -c 'import triton; print(triton.__version__)'))" \
        "$PY" -m pytest -ra -n auto -m "not package"
      # The packaging checks (sdist, wheel, a fresh venv) and the version matrix run on a full
      # run only, not when pytest arguments pick tests; side by side (package_beside).
      stage "Triton tests with Triton $TRITON_LATEST" triton_latest_tests_beside_package
      package_result
    else
      stage "tests" "$PY" -m pytest -ra "$@"
    fi
    ;;
  demo)
    setup
    cd "$ROOT"
    "$PY" tools/demo.py "$@"
    ;;
  *)
    echo "usage: tools/dev.sh setup|test|demo|lint [args...]" >&2
    exit 2
    ;;
esac
