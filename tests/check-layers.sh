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

rank() {   # rank FOLDER: 1 base, 2 core and ipoib_fallback, 3 preload, 4 tools
  case $1 in
    base) echo 1 ;;
    core|ipoib_fallback) echo 2 ;;
    preload) echo 3 ;;
    tools) echo 4 ;;
    *) echo 0 ;;
  esac
}

crossings() {
  local f dir hdr to
  for f in base/*.[ch] core/*.[ch] ipoib_fallback/*.[ch] preload/*.[ch] tools/*.[ch]; do
    dir=${f%%/*}
    while read -r hdr; do
      to=${hdr%%/*}
      [ "$to" = "$dir" ] && continue
      [ "$(rank "$to")" -eq 0 ] && continue
      [ "$(rank "$to")" -ge "$(rank "$dir")" ] && echo "$f -> $hdr"
    done < <(sed -n 's/^#include "\([a-z_]*\/[a-z_]*\.h\)".*/\1/p' "$f")
  done | sort -u
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
