# base_build.bash: sourced by the benches that compare two revisions of the
# library in one boot (connect_bind.sh, vm_bench.sh -b).
#
# base_build NAME REV: builds git rev REV once into .cache/bench-base/<rev12>
# (git archive + make, under a lock, reused afterwards) and sets BASE_DIR and
# BASE_BUILD_DIR (its build directory).  NAME prefixes the messages.  Exits
# 2 when REV is not a commit or the build fails.
base_build() {
	local name=$1 want=$2 repo rev
	repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
	rev=$(git -C "$repo" rev-parse --verify --quiet "$want^{commit}") ||
		{ echo "$name: $want is not a commit" >&2; exit 2; }
	BASE_DIR=$repo/.cache/bench-base/$(git -C "$repo" rev-parse --short=12 "$rev")
	BASE_BUILD_DIR=$BASE_DIR/build
	mkdir -p "$repo/.cache/bench-base"
	(
		flock 9
		if [ ! -f "$BASE_BUILD_DIR/.bench-built" ]; then
			echo "$name: building $want ($rev) into $BASE_DIR" >&2
			rm -rf "$BASE_DIR"
			mkdir -p "$BASE_DIR"
			git -C "$repo" archive "$rev" | tar -x -C "$BASE_DIR"
			# BUILD and SAN on the command line: an exported BUILD must not redirect it.
			if ! make -C "$BASE_DIR" -j"$(nproc)" BUILD=build SAN=0 build/libsdpshim.so build/sdpshim \
				>"$BASE_DIR/make.log" 2>&1; then
				tail -20 "$BASE_DIR/make.log" >&2
				echo "$name: the baseline build failed (log: $BASE_DIR/make.log)" >&2
				exit 2
			fi
			echo "$rev" >"$BASE_BUILD_DIR/.bench-built"
		fi
	) 9>"$repo/.cache/bench-base/.lock" || exit 2
}
