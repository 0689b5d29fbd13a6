#!/usr/bin/env bash
# Lists the longest C functions: bash scripts/longest-functions.sh [N] [DIR...]
# (default: the 10 longest in tools/ and libcommon/). A function runs from a line that starts a
# definition in column 0 to the next line that is a lone "}"; printed as LINES FILE:LINE NAME.
n=${1:-10}; shift 2>/dev/null
dirs=("$@"); [ ${#dirs[@]} -gt 0 ] || dirs=(tools libcommon)
cd "$(dirname "$0")/.." || exit 1
find "${dirs[@]}" -name '*.c' | sort | xargs awk '
    FNR == 1 { start = 0 }
    /^[A-Za-z_][^;]*\(/ && !/^(typedef|struct [a-z_]+ *\{|enum|union)/ && !start {
        start = FNR; name = $0; sub(/\(.*/, "", name); sub(/.*[ *]/, "", name)
    }
    /^}/ && start { printf "%d %s:%d %s\n", FNR - start + 1, FILENAME, start, name; start = 0 }
    /;[ \t]*$/ && start == FNR { start = 0 }
' | sort -rn | head -n "$n"
