#!/usr/bin/env bash
# Modelplane developer entry point: sets up what it needs, then runs one job.
#   ./dev.sh demo   on a fresh copy of the bundled example cluster, offline (no cluster, no Prefect server): fill the
#                   example model cache, run the AIM lifecycles, roll out the Kthena Model, then one optimization cycle
#   ./dev.sh test   install the test services (Debian packages) and run the full test suite (what CI runs), on
#                   $MODELPLANE_TEST_WORKERS pytest-xdist workers (default 4; `-n 0` runs it in one process); a run of
#                   the whole suite (no test path given) also runs the fast tier on $MODELPLANE_TEST_PYTHONS meanwhile
#   ./dev.sh test-fast   the fast tier: engine and unit tests, no servers, no flow runs (2 workers)
#   ./dev.sh test-pythons [3.12 ...]   `pip install .` and the fast tier on other Pythons ($MODELPLANE_TEST_PYTHONS,
#                   default 3.12 3.13)
#   ./dev.sh lock   pin every dependency again (constraints.txt) from fresh installs on Python 3.11, 3.12 and 3.13
set -euo pipefail
cd "$(dirname "$0")"

VENV="${MODELPLANE_VENV:-.venv}"
# The versions CI tested, every package pinned: each install takes them (`pip install -c constraints.txt`), so a
# fresh machine gets what CI ran; `./dev.sh lock` makes the file again after a change to pyproject.toml.
CONSTRAINTS=constraints.txt
# The Pythons besides the virtualenv's that the project supports (pyproject.toml's requires-python): the whole
# suite runs on the virtualenv's (3.11), and the fast tier on each of these alongside it (set it empty for none).
read -r -a OTHER_PYTHONS <<<"${MODELPLANE_TEST_PYTHONS-3.12 3.13}"

# The fast tier: the engine's tests and the unit tests of the API models (their views and identity checks), AIM
# resolution and planning, the cluster helpers and the downloader's parts; no test server, no Prefect API, no flow
# run (CONTRIBUTING.md, "Tests"). It also runs on every other Python beside the full suite, on the same cores.
FAST_TESTS=(
  tests/engine
  tests/api/test_meta.py tests/api/test_models.py tests/api/test_crds.py tests/api/test_bad_inputs.py
  tests/api/test_docstring_parse.py tests/api/test_views.py tests/api/test_identity.py
  tests/aim/test_resolution.py tests/aim/test_discovery.py tests/aim/test_plans.py
  tests/cluster/test_helpers.py tests/cluster/test_yaml_compiled.py tests/downloader/test_parts.py tests/test_boundary.py
)

# Every install builds the compiled YAML reader (setup.py: optional for a user's install, so `pip install` works
# without a compiler); in the tests it must be there, so a failed build fails a test instead of leaving the Python
# reader to run alone unnoticed (tests/conftest.py).
export MODELPLANE_REQUIRE_COMPILED_YAML=1

# The interpreter the virtualenvs are made from: $MODELPLANE_PYTHON, else the distribution's Python 3.11 when it
# can make a virtualenv (Debian's python3.11-venv), else the first python3.11 or python3 on PATH. Debian's
# /usr/bin/python3.11 is a static, PGO- and LTO-built interpreter; a python3.11 a version manager built on PATH
# (pyenv's, on this project's machines) is a shared-library build without either. The suite starts a few hundred
# Python processes (commands, flow runs, servers, workers) and took about 18 % less CPU on Debian's
# (docs/benchmarks.md, "The interpreter").
can_make_venv() {  # can_make_venv PYTHON: whether PYTHON exists and has venv's ensurepip
  command -v "$1" >/dev/null 2>&1 && "$1" -c 'import ensurepip' 2>/dev/null
}

venv_python() {
  if [ -n "${MODELPLANE_PYTHON:-}" ]; then
    can_make_venv "$MODELPLANE_PYTHON" \
      || { echo "error: MODELPLANE_PYTHON=$MODELPLANE_PYTHON cannot make a virtualenv" >&2; return 1; }
    echo "$MODELPLANE_PYTHON"
    return
  fi
  local candidate
  for candidate in /usr/bin/python3.11 python3.11 python3; do
    if can_make_venv "$candidate"; then
      echo "$candidate"
      return
    fi
  done
  echo "error: no Python 3 that can make a virtualenv (install python3.11-venv or set MODELPLANE_PYTHON)" >&2
  return 1
}

make_venv() {  # make_venv DIR: a virtualenv in DIR from venv_python's interpreter
  local python
  python="$(venv_python)"
  "$python" -m venv "$1"
}

setup_python() {
  if [ ! -x "$VENV/bin/python" ]; then
    make_venv "$VENV"
  fi
  # Re-install only when pyproject.toml or the pins changed since the last install. --no-compile: Python writes the
  # bytecode of the modules it imports when it first imports them; compiling every installed module ahead took
  # about three times the install's CPU (134 s against 42 s of user time for the test extra).
  if needs_install "$VENV"; then
    setup_build_tools "$VENV/bin/python"
    "$VENV/bin/python" -m pip install -q --upgrade pip
    "$VENV/bin/python" -m pip install -q --no-compile -c "$CONSTRAINTS" -e '.[test]'
    touch "$VENV/.modelplane-installed"
  fi
}

needs_install() {  # needs_install VENV: whether VENV has no install of the project newer than what it builds from
  local stamp="$1/.modelplane-installed" source
  [ ! -f "$stamp" ] && return 0
  # the compiled YAML reader's source too: an editable install builds it once, in place
  for source in pyproject.toml "$CONSTRAINTS" setup.py tasks/clients/cluster/yamlcompiled.c; do
    [ "$source" -nt "$stamp" ] && return 0
  done
  return 1
}

apt_install() {  # apt_install PACKAGE...: install Debian packages, as root only (fails, installing nothing, otherwise)
  [ "$(id -u)" = 0 ] || return 1
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "$@"
}

setup_build_tools() {  # setup_build_tools PYTHON: what building the compiled YAML reader for PYTHON needs
  local need=()
  command -v gcc >/dev/null 2>&1 || need+=(gcc)
  [ -f /usr/include/yaml.h ] || need+=(libyaml-dev)
  "$1" -c 'import os, sys, sysconfig; sys.exit(not os.path.exists(sysconfig.get_paths()["include"] + "/Python.h"))' \
    || need+=(python3-dev)
  if [ ${#need[@]} -gt 0 ] && ! apt_install "${need[@]}"; then
    echo "missing Debian packages: ${need[*]} (the install reads YAML without its compiled reader)" >&2
  fi
}

python_version_path() {  # python_version_path X.Y: an interpreter of Python X.Y that can make a virtualenv
  # pythonX.Y on PATH (pyenv's shim answers only when X.Y is a selected version), else pyenv's newest X.Y.
  local candidate
  if can_make_venv "python$1"; then
    command -v "python$1"
    return
  fi
  for candidate in $(ls -d "${PYENV_ROOT:-$HOME/.pyenv}/versions/$1".* 2>/dev/null | sort -V -r); do
    if can_make_venv "$candidate/bin/python$1"; then
      echo "$candidate/bin/python$1"
      return
    fi
  done
  echo "error: no Python $1 that can make a virtualenv (pyenv install $1, or leave $1 out: MODELPLANE_TEST_PYTHONS)" >&2
  return 1
}

snapshot_checkout() {  # snapshot_checkout DIR: the checkout's files (tracked, and new ones git does not ignore) in DIR
  # Building from a copy leaves no build/ in the checkout (the running suite reads it) and no stale module in a wheel.
  mkdir -p "$1"
  git ls-files -z --cached --others --exclude-standard | tar --null -T - --ignore-failed-read -cf - 2>/dev/null \
    | tar -xf - -C "$1"
}

test_on_python() {  # test_on_python X.Y SOURCE: `pip install SOURCE` (pinned, test extra) in .venv-X.Y, then the fast tier
  local python venv=".venv-$1"
  python="$(python_version_path "$1")" || return 2
  if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv"
  fi
  if needs_install "$venv"; then
    setup_build_tools "$venv/bin/python"
    "$venv/bin/python" -m pip install -q --upgrade pip
    # Not editable: the install a user makes. The tests import the checkout (pytest runs in it): the same code.
    "$venv/bin/python" -m pip install -q --no-compile -c "$CONSTRAINTS" "$2[test]"
    touch "$venv/.modelplane-installed"
  fi
  # One process: it runs beside the full suite's workers (./dev.sh test), with no pytest cache shared with them.
  "$venv/bin/python" -m pytest -q -n 0 -p no:cacheprovider "${FAST_TESTS[@]}"
}

test_on_pythons() {  # test_on_pythons LOGDIR X.Y...: test_on_python on each in turn, a log each; fails if any failed
  local logdir="$1" version failed=0
  shift
  snapshot_checkout "$logdir/modelplane"
  for version in "$@"; do
    if test_on_python "$version" "$logdir/modelplane" >"$logdir/python$version.log" 2>&1; then
      echo "Python $version: pip install . and the fast tier passed: $(tail -n 1 "$logdir/python$version.log")"
    else
      tail -n 40 "$logdir/python$version.log" >&2
      echo "error: Python $version failed (pip install . or the fast tier; its log: $logdir/python$version.log)" >&2
      failed=1
    fi
  done
  return "$failed"
}

lock() {  # lock: constraints.txt again, from fresh installs (the newest versions pyproject.toml allows) on every Python
  local dir python version pythons
  pythons=("$(venv_python)")
  for version in "${OTHER_PYTHONS[@]}"; do
    pythons+=("$(python_version_path "$version")")
  done
  dir="$(mktemp -d)"
  snapshot_checkout "$dir/modelplane"
  for python in "${pythons[@]}"; do
    version="$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
    echo "resolving on Python $version ($python)"
    "$python" -m venv "$dir/venv-$version"
    "$dir/venv-$version/bin/python" -m pip install -q --upgrade pip
    "$dir/venv-$version/bin/python" -m pip install -q --no-compile "$dir/modelplane[test]"
    "$dir/venv-$version/bin/python" -m pip freeze --exclude-editable >"$dir/freeze-$version.txt"
  done
  # One pin per package and version, with a python_version marker unless every Python resolved that version.
  "$dir/venv-$version/bin/python" - "$CONSTRAINTS" "$dir"/freeze-*.txt <<'PY'
import pathlib, re, sys

target, *freezes = sys.argv[1:]
pins: dict[str, dict[str, str]] = {}
for freeze in freezes:
    python = re.search(r"freeze-(\d+\.\d+)\.txt$", freeze).group(1)
    for line in pathlib.Path(freeze).read_text().splitlines():
        name, _, version = line.partition("==")
        if version and re.sub(r"[-_.]+", "-", name).lower() != "modelplane":
            pins.setdefault(re.sub(r"[-_.]+", "-", name).lower(), {})[python] = line.strip()
pythons = sorted({p for by in pins.values() for p in by}, key=lambda v: tuple(map(int, v.split("."))))
lines = []
for _, by in sorted(pins.items()):
    for pin in sorted(set(by.values())):
        on = [p for p in pythons if by.get(p) == pin]
        lines.append(pin if on == pythons else pin + "; " + " or ".join(f'python_version == "{p}"' for p in on))
header = pathlib.Path(target).read_text().split("\n\n", 1)[0] if pathlib.Path(target).exists() else ""
pathlib.Path(target).write_text(header + "\n\n" + "\n".join(lines) + "\n")
print(f"{target}: {len(lines)} pins for Python {', '.join(pythons)}")
PY
  rm -rf "$dir"
}

names_a_test_path() {  # names_a_test_path ARG...: whether any pytest argument is an existing file or directory
  local arg
  for arg in "$@"; do
    [ -e "${arg%%::*}" ] && return 0
  done
  return 1
}

setup_olah() {
  # olah (the tests' Hugging Face protocol server) needs a newer fastapi than Prefect allows: its own venv.
  local venv="${MODELPLANE_OLAH_VENV:-.venv-olah}"
  if [ ! -x "$venv/bin/olah-cli" ]; then
    make_venv "$venv"
    "$venv/bin/python" -m pip install -q olah==0.5.4
  fi
}

setup_services() {
  # Real components the tests start on 127.0.0.1 (see DESIGN.md).
  local need=()
  command -v prometheus >/dev/null 2>&1 || need+=(prometheus)
  command -v prometheus-pushgateway >/dev/null 2>&1 || need+=(prometheus-pushgateway)  # metrics actuation (tests/servers/promtest)
  command -v git >/dev/null 2>&1 || need+=(git)  # the HF test server serves git repositories
  command -v chromium >/dev/null 2>&1 || need+=(chromium)
  command -v chromedriver >/dev/null 2>&1 || need+=(chromium-driver)
  command -v docker-registry >/dev/null 2>&1 || need+=(docker-registry)
  command -v skopeo >/dev/null 2>&1 || need+=(skopeo)
  command -v htpasswd >/dev/null 2>&1 || need+=(apache2-utils)
  if [ ${#need[@]} -gt 0 ] && ! apt_install "${need[@]}"; then
    echo "missing Debian packages: ${need[*]} (run as root or install them)" >&2
    exit 1
  fi
  # Debian starts services on install; the tests start their own on random ports.
  if command -v systemctl >/dev/null 2>&1; then systemctl stop prometheus 2>/dev/null || true; fi
  if command -v systemctl >/dev/null 2>&1; then systemctl stop prometheus-pushgateway 2>/dev/null || true; fi
  if command -v systemctl >/dev/null 2>&1; then systemctl stop docker-registry 2>/dev/null || true; fi
}

keep_bytecode() {
  # The suite starts a few hundred Python processes (commands, flow runs, workers, servers). With bytecode
  # writing off (PYTHONDONTWRITEBYTECODE, set in some CI and container images) each of them compiled the
  # project's modules again (about 0.7 s of CPU for a flow command) and every pytest-xdist worker rewrote the
  # asserts of every test module at collection (7 s of its 20 s). The caches are __pycache__ directories,
  # which git ignores.
  unset PYTHONDONTWRITEBYTECODE
}

case "${1:-}" in
  demo)
    setup_python
    shift
    # The demo writes status and scales targets: it works on a fresh copy of the examples, so the
    # checked-in files stay clean and every demo starts from the same state.
    demo_dir="${MODELPLANE_DEMO_DIR:-${TMPDIR:-/tmp}/modelplane-demo}"
    if [ -e "$demo_dir" ] && [ ! -f "$demo_dir/.modelplane-demo" ]; then
      echo "refusing to replace $demo_dir: not a directory this demo created (set MODELPLANE_DEMO_DIR)" >&2
      exit 2
    fi
    rm -rf "$demo_dir"
    mkdir -p "$demo_dir"
    cp -R deployments/examples/. "$demo_dir/"
    touch "$demo_dir/.modelplane-demo"
    echo "demo cluster: a copy of deployments/examples in $demo_dir (the checked-in examples are not touched)"
    # On a manifests directory the commands need no Prefect API (they run untracked); with PREFECT_API_URL set,
    # every run is recorded there.
    # Each step is a modelplane command; exit code 3 (ran degraded) is shown and the demo goes on.
    step() { "$@" || { rc=$?; [ "$rc" = 3 ] || exit "$rc"; }; }
    # 1. Fill the example model cache from a model the demo serves itself on 127.0.0.1 (no network).
    step "$VENV/bin/python" deployments/demo_models.py --cluster "$demo_dir" -- "$VENV/bin/modelplane" warm-caches --cluster "$demo_dir" -n cache-demo
    # 2. AIM: discovery (offline: the image's metadata is an OCI layout in the repository), templates, rollout.
    step "$VENV/bin/modelplane" reconcile-aim --cluster "$demo_dir" --registry-mirror docker.io=oci-layout:deployments/example-images
    # 3. Kthena: the example Model's backend becomes a vLLM Deployment + Service, its policy a binding.
    step "$VENV/bin/modelplane" rollout-models --cluster "$demo_dir"
    # 4. One optimization cycle over the VariantAutoscalings and the new binding.
    "$VENV/bin/modelplane" optimize-allocation --cluster "$demo_dir" --metrics-file deployments/example-metrics.yaml "$@"
    ;;
  test)
    setup_python
    shift
    keep_bytecode
    # A run of the whole suite (no test path given) installs and tests the project on the other Pythons meanwhile, in
    # the background and in one process, so CI's wall time grows little; a failure there fails the run too. They run
    # at a lower priority (nice): they take the CPU the suite leaves idle while its tests wait on servers and
    # subprocesses, instead of an equal share of the 2 cores the suite's workers are busy on.
    others=""
    if [ ${#OTHER_PYTHONS[@]} -gt 0 ] && ! names_a_test_path "$@"; then
      others_log="$(mktemp -d)"
      setsid nice -n 10 ./dev.sh test-pythons "${OTHER_PYTHONS[@]}" >"$others_log/out" 2>"$others_log/err" &
      others=$!  # its own process group (setsid), ended with this script whatever the outcome
      trap 'kill -- -"$others" 2>/dev/null || true' EXIT
    fi
    # The tests' migrated Prefect database (tests/prefect_db.py: about 20 s of CPU, once per machine and Prefect
    # version) is made while the services and olah install, not by the first worker while the others wait on it.
    template_log="$(mktemp)"
    "$VENV/bin/python" -m tests.prefect_db >/dev/null 2>"$template_log" &
    template=$!
    setup_services
    setup_olah
    wait "$template" || echo "the Prefect database template was not made ahead (the tests try again): $(tail -n 1 "$template_log")" >&2
    rm -f "$template_log"
    set +e
    # Tests mostly wait on servers and subprocesses, so more workers than cores pay off; tests of a module
    # that shares a module-scoped server stay on one worker (tests/conftest.py marks them, loadgroup keeps them).
    "$VENV/bin/python" -m pytest -n "${MODELPLANE_TEST_WORKERS:-4}" --dist loadgroup "$@"
    rc=$?
    # pytest exits 5 when nothing was collected; a missing test suite is a failure here.
    if [ "$rc" = 5 ]; then echo "no tests were collected" >&2; rc=1; fi
    if [ -n "$others" ]; then
      wait "$others"
      others_rc=$?
      cat "$others_log/out"
      cat "$others_log/err" >&2
      if [ "$others_rc" != 0 ] && [ "$rc" = 0 ]; then rc=1; fi
    fi
    set -e
    exit "$rc"
    ;;
  test-pythons)
    shift
    [ $# -gt 0 ] || set -- "${OTHER_PYTHONS[@]}"
    keep_bytecode
    test_on_pythons "$(mktemp -d)" "$@"
    ;;
  lock)
    lock
    ;;
  test-fast)
    setup_python
    shift
    keep_bytecode
    # Two workers (one per core of the CI machine): these tests compute, they do not wait.
    exec "$VENV/bin/python" -m pytest -n "${MODELPLANE_TEST_WORKERS:-2}" "${FAST_TESTS[@]}" "$@"
    ;;
  *)
    sed -n '2,9p' "$0"
    exit 2
    ;;
esac
