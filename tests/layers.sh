#!/usr/bin/env bash
# Checks the include graph against the layers written in libcommon/README.md:
#   bash tests/layers.sh [ROOT]
# ROOT (default: the source tree) holds libcommon/, plugins/ and tools/. The README's fenced block
# after the line "Allowed dependencies:" lists each layer and the layers it may include, one line a
# layer ("nn: base io"). Rules: a file in libcommon/L/ includes libcommon headers by their layer
# path ("io/stream.h"), only from L or a layer L may use; libcommon/run alone includes the plugin ABI
# ("../../plugins/backend.h", comm.h, devcomm.h); a plugin includes only its own folder's headers and ../backend.h, ../comm.h or ../devcomm.h;
# no two headers under libcommon/ and plugins/ share a file name. Prints one line per violation
# (FILE:LINE: what) and exits 1 if there is any.
set -u -o pipefail
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$root" || exit 2
readme=libcommon/README.md
[ -f "$readme" ] || { echo "layers: $readme not found" >&2; exit 2; }
rules=$(awk '/^Allowed dependencies:/ {f = 1; next} f && /^```/ {n++; if (n == 2) exit; next} f && n == 1' "$readme")
[ -n "$rules" ] || { echo "layers: no 'Allowed dependencies:' block in $readme" >&2; exit 2; }
declare -A allowed
while IFS=: read -r layer deps; do
    layer=$(echo "$layer" | tr -d ' ')
    [ -n "$layer" ] && allowed[$layer]=" $layer $deps "
done <<< "$rules"
bad=0
report() { echo "$1"; bad=1; }
for f in libcommon/*/*.c libcommon/*/*.h; do
    [ -e "$f" ] || continue
    layer=$(basename "$(dirname "$f")")
    if [ -z "${allowed[$layer]+x}" ]; then
        report "$f: folder libcommon/$layer is not a layer of $readme"; continue
    fi
    while IFS=: read -r line inc; do
        case $inc in
        ../../plugins/backend.h|../../plugins/comm.h|../../plugins/devcomm.h)
            [ "$layer" = run ] || report "$f:$line: includes the plugin ABI (only libcommon/run may)";;
        */*)
            dep=${inc%%/*}
            [ -f "libcommon/$inc" ] || { report "$f:$line: includes \"$inc\", which is not a libcommon header"; continue; }
            case ${allowed[$layer]} in
            *" $dep "*) ;;
            *) report "$f:$line: layer $layer includes \"$inc\" (layer $dep; $layer may use:${allowed[$layer]% })";;
            esac;;
        *) report "$f:$line: includes \"$inc\" without its layer (write \"LAYER/$inc\")";;
        esac
    done < <(grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$f" | sed 's/^\([0-9]*\):[^"]*"\([^"]*\)".*/\1:\2/')
done
for f in plugins/*/*.c plugins/*/*.h plugins/*/*.cu; do
    [ -e "$f" ] || continue
    dir=$(dirname "$f")
    grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$f" | while IFS=: read -r line text; do
        inc=$(echo "$text" | sed 's/.*"\(.*\)".*/\1/')
        case $inc in ../backend.h|../comm.h|../devcomm.h) continue;; esac
        [ -f "$dir/$inc" ] && [ "${inc#*/}" = "$inc" ] ||
            echo "$f:$line: a plugin includes only its own headers and ../backend.h, ../comm.h or ../devcomm.h, not \"$inc\""
    done | grep . && bad=1
done
dups=$(find libcommon plugins -name '*.h' -printf '%f\n' | sort | uniq -d)
for d in $dups; do
    report "headers share the name $d: $(find libcommon plugins -name "$d" | tr '\n' ' ')"
done
exit $bad
