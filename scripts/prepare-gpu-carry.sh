#!/usr/bin/env bash
# prepare-gpu-carry.sh - make .deps/ for a device run (bench/run-gpu.sh).
#
# The GPU machine has no xxhash.h (and no LLVM): fusec is built there with
#   -DFUSEC_WITH_LLVM=OFF -DFUSEC_XXHASH_DIR=$PWD/.deps/xxhash
# which compiles xxHash header-only (XXH_INLINE_ALL). This copies the header
# from this machine's libxxhash-dev (installed with apt-get when missing, as
# root) into .deps/xxhash/. .deps/ is git-ignored, so it travels only when the
# device call names it: carry [".deps"].
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

src=/usr/include/xxhash.h
if [[ ! -f $src ]]; then
    if [[ $(id -u) -ne 0 ]]; then
        echo "prepare-gpu-carry.sh: $src missing; as root run: apt-get install -y libxxhash-dev" >&2
        exit 1
    fi
    echo "prepare-gpu-carry.sh: installing libxxhash-dev"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y --no-install-recommends libxxhash-dev ||
        { apt-get update && apt-get install -y --no-install-recommends libxxhash-dev; }
fi

dst=.deps/xxhash
mkdir -p "$dst"
cp "$src" "$dst/"
# xxh3.h is a shim that includes xxhash.h; copy it too where it exists.
[[ -f /usr/include/xxh3.h ]] && cp /usr/include/xxh3.h "$dst/"

if ! git check-ignore -q .deps 2>/dev/null; then
    echo "prepare-gpu-carry.sh: warning: .deps is not git-ignored; it would travel as untracked files" >&2
fi
ver=$(awk '/#define XXH_VERSION_(MAJOR|MINOR|RELEASE)/ {v = v (v ? "." : "") $3} END {print v}' "$dst/xxhash.h")
echo "prepare-gpu-carry.sh: $dst/ ready (xxHash $ver, $(du -sh "$dst" | cut -f1)); device run with carry [\".deps\"]"
