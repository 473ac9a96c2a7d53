#!/usr/bin/env bats
# Native suite, part 50: what ships (issue 18): `make install` and `make
# uninstall` into a DESTDIR, the man pages rendered by man-db with no
# warning, and the Debian package built from a clean clone, listed, unpacked
# and run.  Nothing here writes into $BUILD or the tree: every install and
# build goes to a temporary directory.

load ../helpers

MAN_PAGES=(man1/sdpshim.1 man5/sdpshim.conf.5 man7/libsdpshim.7)

setup() {
  [ -x "$SDPSHIM_BIN" ] || { echo "missing $SDPSHIM_BIN: run make first" >&2; return 1; }
  unset SDPSHIM_CONFIG SDPSHIM_MODE SDPSHIM_LOG LD_PRELOAD
}

# render PAGE: man-db formats PAGE at 80 columns; any warning (groff's
# included) fails, and so does an empty page.
render() {
  local page=$1 out=$BATS_TEST_TMPDIR/man.out err=$BATS_TEST_TMPDIR/man.err rc=0
  LC_ALL=C.UTF-8 MANWIDTH=80 run_timeout 60 man --warnings -l "$page" >"$out" 2>"$err" || rc=$?
  if [ "$rc" -ne 0 ] || [ -s "$err" ]; then
    echo "man --warnings -l $page: rc $rc, stderr:" >&2
    cat "$err" >&2
    return 1
  fi
  grep -q '^NAME' "$out" || { echo "$page: rendered without a NAME section" >&2; return 1; }
  # No line wider than MANWIDTH (a long literal would overflow the terminal).
  perl -CSD -ne 'chomp; if (length > 80) { print STDERR "$ARGV: line $. is ", length, " columns: $_\n"; $bad = 1 }
                 END { exit($bad ? 1 : 0) }' "$out"
}

@test "make install DESTDIR installs the library, sdpshim and three man pages; make uninstall removes them" {
  command -v man >/dev/null || skip "man (man-db) is not installed: run tests/setup-debian.sh"
  local dest=$BATS_TEST_TMPDIR/dest p
  # BUILD is the tree the suite tests, built already, so install only copies;
  # the default PREFIX keeps it so (another PREFIX would rebuild with its
  # LIBDIR anything out of date).
  run run_timeout 120 make -C "$REPO" --no-print-directory BUILD="$BUILD" \
    DESTDIR="$dest" install
  echo "$output"
  [ "$status" -eq 0 ]
  [ -x "$dest/usr/local/bin/sdpshim" ]
  [ -f "$dest/usr/local/lib/sdpshim/libsdpshim.so" ]
  for p in "${MAN_PAGES[@]}"; do
    [ -f "$dest/usr/local/share/man/$p" ] || { echo "missing $dest/usr/local/share/man/$p" >&2; return 1; }
    render "$dest/usr/local/share/man/$p"
  done
  # MANDIR on its own moves only the pages.
  run run_timeout 120 make -C "$REPO" --no-print-directory BUILD="$BUILD" \
    MANDIR=/opt/man DESTDIR="$dest.2" install
  [ "$status" -eq 0 ]
  [ -f "$dest.2/opt/man/man7/libsdpshim.7" ]
  [ ! -e "$dest.2/usr/local/share/man" ]

  run run_timeout 60 make -C "$REPO" --no-print-directory BUILD="$BUILD" \
    DESTDIR="$dest" uninstall
  echo "$output"
  [ "$status" -eq 0 ]
  run find "$dest" -type f
  [ "$status" -eq 0 ]
  [ -z "$output" ] || { echo "left after uninstall: $output" >&2; return 1; }
}

@test "the installed sdpshim finds the installed library (../lib/sdpshim) and doctor names it" {
  local dest=$BATS_TEST_TMPDIR/dest root
  run run_timeout 120 make -C "$REPO" --no-print-directory BUILD="$BUILD" \
    DESTDIR="$dest" install
  [ "$status" -eq 0 ]
  root=$(cd "$dest" && pwd -P)
  # helpers.bash exports SDPSHIM_LIB (the build's library); set empty, it
  # counts as unset, and the tool must find the one installed beside it.
  SDPSHIM_LIB= run run_timeout 30 "$root/usr/local/bin/sdpshim" doctor
  echo "$output"
  [ "$status" -eq 0 ]
  [[ "$output" == *"libsdpshim.so: $root/usr/local/lib/sdpshim/libsdpshim.so (in ../lib/sdpshim of this sdpshim)"* ]]
  # SDPSHIM_LIB wins, and a missing library is named.
  SDPSHIM_LIB=$BATS_TEST_TMPDIR/none.so run run_timeout 30 "$root/usr/local/bin/sdpshim" doctor
  [ "$status" -eq 0 ]
  [[ "$output" == *"libsdpshim.so: not found (tried $BATS_TEST_TMPDIR/none.so; set SDPSHIM_LIB)"* ]]
}

# The .deb, from a clean clone of the committed HEAD (uncommitted changes
# are not in it), with dpkg-buildpackage through `make deb`.  It is then
# installed by `dpkg --root` into an empty root with a dpkg database of its
# own, run from there without chroot, and purged.  The package has no
# maintainer scripts (checked below), and the tool looks for the library in
# ../lib/sdpshim of its own directory before the built-in /usr/lib/sdpshim,
# so the root's files are what run (doctor names the library it found;
# /usr/lib/sdpshim does not exist on a host without the package, checked).
# The dependencies, libibverbs1 and librdmacm1, are the host's.
@test "the Debian package builds from a clean clone, holds lib, tool and man pages, installs with dpkg into an empty root, and its doctor runs" {
  local tool
  for tool in git dpkg-buildpackage dh dpkg-deb; do
    command -v "$tool" >/dev/null || skip "$tool is not installed: run tests/setup-debian.sh"
  done
  git -C "$REPO" rev-parse HEAD >/dev/null 2>&1 || skip "$REPO is not a git checkout"
  [ ! -e /usr/lib/sdpshim ] || skip "/usr/lib/sdpshim exists: the package is installed on this host"
  local work=$BATS_TEST_TMPDIR/deb src root deb t0=$SECONDS
  src=$work/sdpshim
  mkdir -p "$work"
  git clone -q --no-checkout "$REPO" "$src"
  git -C "$src" fetch -q "$REPO" HEAD             # this checkout's HEAD, even detached
  git -C "$src" checkout -q FETCH_HEAD
  run run_timeout 900 env -u BUILD -u MAKEFLAGS -u CFLAGS -u CPPFLAGS -u LDFLAGS \
    make -C "$src" --no-print-directory deb
  show "make deb (dpkg-buildpackage -us -uc -b) in a clean clone: rc $status, $((SECONDS - t0)) s"
  [ "$status" -eq 0 ] || { echo "$output" | tail -40; return 1; }
  deb=$(ls "$src"/build/deb/sdpshim_*_*.deb)
  [ -f "$deb" ]
  # dpkg-buildpackage's own files left the parent directory (make deb moved them).
  run ls "$work"
  [ "$output" = sdpshim ]

  run dpkg-deb -c "$deb"
  echo "$output"
  [ "$status" -eq 0 ]
  [[ "$output" == *" ./usr/bin/sdpshim"* ]]
  [[ "$output" == *" ./usr/lib/sdpshim/libsdpshim.so"* ]]
  [[ "$output" == *" ./usr/share/man/man1/sdpshim.1.gz"* ]]
  [[ "$output" == *" ./usr/share/man/man5/sdpshim.conf.5.gz"* ]]
  [[ "$output" == *" ./usr/share/man/man7/libsdpshim.7.gz"* ]]
  [[ "$output" == *" ./usr/share/doc/sdpshim/copyright"* ]]
  [[ "$output" != *"/usr/local"* ]]
  [[ "$output" != *"tests/progs"* ]]
  run dpkg-deb -f "$deb" Package Architecture Depends
  echo "$output"
  [[ "$output" == *"Package: sdpshim"* ]]
  [[ "$output" == *"libibverbs1"* ]]
  [[ "$output" == *"librdmacm1"* ]]
  # Control files only: no preinst/postinst/prerm/postrm/triggers.
  run bash -c "dpkg-deb --ctrl-tarfile '$deb' | tar -t | sed 's|^\./||' | grep -v '^$' | sort"
  [ "$status" -eq 0 ]
  [ "$(echo $output)" = "control md5sums" ] || { echo "control members: $output" >&2; return 1; }

  # Installed by dpkg itself into an empty root with a database of its own
  # (--root: files and admin dir under it).  The package has no maintainer
  # scripts, so nothing needs a chroot; its dependencies live in the host's
  # database, not this one (--force-depends).
  mkdir -p "$work/root/var/lib/dpkg/info" "$work/root/var/lib/dpkg/updates"
  root=$(cd "$work/root" && pwd -P)
  : >"$root/var/lib/dpkg/status"
  : >"$root/var/lib/dpkg/available"
  run dpkg --root="$root" --log=/dev/null --force-depends --force-not-root -i "$deb"
  echo "$output"
  [ "$status" -eq 0 ]
  run dpkg-query --admindir="$root/var/lib/dpkg" -W -f '${Status} ${Version}' sdpshim
  [ "$output" = "install ok installed $(dpkg-deb -f "$deb" Version)" ]
  for p in "${MAN_PAGES[@]}"; do
    if command -v man >/dev/null; then render "$root/usr/share/man/$p.gz"; fi
  done
  # The package's tool was built for /usr/lib/sdpshim (PREFIX=/usr).
  grep -q /usr/lib/sdpshim "$root/usr/bin/sdpshim"
  SDPSHIM_LIB= run run_timeout 30 "$root/usr/bin/sdpshim" version
  [ "$status" -eq 0 ]
  [[ "$output" == "sdpshim $(dpkg-deb -f "$deb" Version)" ]]
  SDPSHIM_LIB= run run_timeout 30 "$root/usr/bin/sdpshim" doctor
  echo "$output"
  [ "$status" -eq 0 ]
  [[ "$output" == *"libsdpshim.so: $root/usr/lib/sdpshim/libsdpshim.so (in ../lib/sdpshim of this sdpshim)"* ]]
  [[ "$output" =~ "RLIMIT_MEMLOCK: soft "(unlimited|[0-9.]+" "[KMGTP]?i?B) ]]
  if [ -z "$(ls /sys/class/infiniband 2>/dev/null)" ]; then
    [[ "$output" == *"no RDMA device: every connection will use kernel TCP, reason no_device"* ]]
  fi
  # `run` preloads the packaged library: the child maps it.
  SDPSHIM_LIB= run run_timeout 30 "$root/usr/bin/sdpshim" run -- cat /proc/self/maps
  [ "$status" -eq 0 ]
  [[ "$output" == *"$root/usr/lib/sdpshim/libsdpshim.so"* ]]
  # Removed by dpkg: the files go, the database forgets it.
  run dpkg --root="$root" --log=/dev/null --force-not-root -P sdpshim
  echo "$output"
  [ "$status" -eq 0 ]
  [ ! -e "$root/usr/bin/sdpshim" ] && [ ! -e "$root/usr/lib/sdpshim/libsdpshim.so" ]
  run dpkg-query --admindir="$root/var/lib/dpkg" -W sdpshim
  [ "$status" -ne 0 ]
  show "deb test: $((SECONDS - t0)) s in all"
}
