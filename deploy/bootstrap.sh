#!/usr/bin/env bash
# Set-up steps shared by `make test` and `make up` on a fresh Debian/Ubuntu machine.
#   bootstrap.sh venv      create .venv (installing python3-venv with apt when missing) and
#                          install toposcope editable with its test extra
#   bootstrap.sh os-deps   install the OS packages the tests and the local stack run, when missing
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${VENV:-.venv}
PYTHON=${PYTHON:-python3}
# Binaries and the Debian packages that provide them.
OS_DEPS=(
  "prometheus:prometheus"
  "promtool:prometheus"
  "prometheus-alertmanager:prometheus-alertmanager"
  "prometheus-node-exporter:prometheus-node-exporter"
  "lstopo:hwloc"
  "victoria-metrics:victoria-metrics"
  "chromium:chromium"
  "chromedriver:chromium-driver"
  "slurmctld:slurm-wlm"
  "slurmd:slurm-wlm"
  "sbatch:slurm-wlm"
  "slurmrestd:slurmrestd"
  "munged:munge"
)
# Files (shell patterns) that are no binary, and the Debian packages that provide them.
OS_FILES=(
  "/usr/lib/*/slurm-wlm/auth_jwt.so:slurm-wlm-jwt-plugin"
)

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"
  elif command -v sudo >/dev/null 2>&1; then sudo "$@"
  else echo "need root (or sudo) to run: $*" >&2; return 1
  fi
}

apt_install() {
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "apt-get not found: install these packages by hand: $*" >&2
    return 1
  fi
  echo "installing OS packages: $*"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@"
}

make_venv() {
  if [ ! -x "$VENV/bin/python" ]; then
    if ! "$PYTHON" -m venv "$VENV" 2>/dev/null; then
      rm -rf "$VENV"
      apt_install python3-venv python3-pip
      "$PYTHON" -m venv "$VENV"
    fi
  fi
  "$VENV/bin/python" -m pip install -q --upgrade pip
  "$VENV/bin/python" -m pip install -q -e '.[all,test]'
  touch "$VENV/.installed"
}

os_deps() {
  local missing=()
  for pair in "${OS_DEPS[@]}"; do
    local bin=${pair%%:*} pkg=${pair#*:}
    if ! command -v "$bin" >/dev/null 2>&1; then
      case " ${missing[*]-} " in *" $pkg "*) ;; *) missing+=("$pkg") ;; esac
    fi
  done
  for pair in "${OS_FILES[@]}"; do
    local pattern=${pair%%:*} pkg=${pair#*:}
    if ! compgen -G "$pattern" >/dev/null; then
      missing+=("$pkg")
    fi
  done
  if [ ${#missing[@]} -gt 0 ]; then
    apt_install "${missing[@]}"
  fi
}

case "${1:-}" in
  venv) make_venv ;;
  os-deps) os_deps ;;
  *) echo "usage: $0 venv|os-deps" >&2; exit 2 ;;
esac
