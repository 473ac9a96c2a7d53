#!/bin/bash
# check-layers.sh: the include check of issue 14.  The library's folders are
# layers, from the bottom: base/; core/ and ipoib_fallback/ (siblings);
# preload/; tools/.  An include that goes up a layer, or across to the
# sibling, is a crossing.  Every crossing must be listed in
# tests/layers.allow ("FILE -> HEADER"), and every listed one must still
# exist.  The list is empty now.  Prints each offending line; exits 1 if there is one.
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
ALLOW=tests/layers.allow

# One awk over every file: FILE -> HEADER for each include that goes up a
# layer or across (rank: 1 base, 2 core and ipoib_fallback, 3 preload, 4 tools).
crossings() {
  awk '
    function rank(d) {
      if (d == "base") return 1
      if (d == "core" || d == "ipoib_fallback") return 2
      if (d == "preload") return 3
      if (d == "tools") return 4
      return 0
    }
    /^#include "[a-z_]*\/[a-z_]*\.h"/ {
      hdr = $0
      sub(/^#include "/, "", hdr)
      sub(/".*/, "", hdr)
      split(FILENAME, from, "/")
      split(hdr, to, "/")
      if (to[1] != from[1] && rank(to[1]) && rank(to[1]) >= rank(from[1]))
        print FILENAME " -> " hdr
    }' base/*.[ch] core/*.[ch] ipoib_fallback/*.[ch] preload/*.[ch] tools/*.[ch] | sort -u
}

bad=0
now=$(crossings)
allowed=$(grep -v '^#' "$ALLOW" | sed '/^$/d' | sort -u)
while read -r line; do
  [ -n "$line" ] || continue
  echo "new crossing (an include up a layer or across): $line"
  bad=1
done < <(comm -23 <(echo "$now") <(echo "$allowed"))
while read -r line; do
  [ -n "$line" ] || continue
  echo "gone, remove it from $ALLOW: $line"
  bad=1
done < <(comm -13 <(echo "$now") <(echo "$allowed"))
[ "$bad" -eq 0 ] && echo "layers: $(echo "$now" | sed '/^$/d' | wc -l) crossings left, all listed in $ALLOW"
exit $bad
