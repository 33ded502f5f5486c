#!/usr/bin/env bash
# `meson install` puts the headers, the libraries and dscache.pc / dscache-ingest.pc in place,
# and programs built only through pkg-config against them serve a real cache and decode its source.
# Args: BUILD_DIR DSCACHE_BINARY SOURCE_ROOT. Env: DSCACHE_SANITIZE, the build's b_sanitize: a
# sanitized library needs its runtime first in the program, so the programs get the same flags.
set -euo pipefail
build=$1 dscache=$2 src=$3
san=()
if [[ -n "${DSCACHE_SANITIZE:-}" && "${DSCACHE_SANITIZE}" != none ]]; then
  san=(-fsanitize="$DSCACHE_SANITIZE")
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

meson install -C "$build" --no-rebuild --destdir "$tmp/root" --quiet >/dev/null
pc=$(find "$tmp/root" -name dscache.pc | head -n 1)
[[ -n "$pc" ]] || { echo "FAIL: dscache.pc was not installed"; exit 1; }
for h in cache.h loader.h error.h manifest.h; do
  [[ -n $(find "$tmp/root" -path "*/include/dscache/$h") ]] || { echo "FAIL: dscache/$h not installed"; exit 1; }
done
# The .pc files are relocatable (prefix=${pcfiledir}/...): the staged install works where it
# lies, with no PKG_CONFIG_SYSROOT_DIR. PKG_CONFIG_LIBDIR holds only them, so a requirement on
# hdf5, libjpeg, opencv4... (which a consumer without their -dev packages cannot meet) fails here.
unset PKG_CONFIG_PATH PKG_CONFIG_SYSROOT_DIR
export PKG_CONFIG_LIBDIR=$(dirname "$pc")
flags=$(pkg-config --cflags --libs dscache)
libdir=$(pkg-config --variable=libdir dscache)
[[ "$(cd "$libdir" && pwd -P)" == "$(cd "$tmp/root" && pwd -P)"/* ]] ||
  { echo "FAIL: dscache.pc's libdir $libdir is not in the staged tree $tmp/root"; exit 1; }
[[ -z "$(pkg-config --print-requires-private dscache)" ]] ||
  { echo "FAIL: dscache.pc has private requirements: $(pkg-config --print-requires-private dscache)"; exit 1; }
# The installed headers must not need anything but the standard library.
c++ -std=c++17 -Wall -Werror "${san[@]}" "$src/docs/example.cpp" $flags -o "$tmp/example"

# A real cache: 40 PNGs in 4 classes.
/usr/bin/python3 "$src/tests/write_pngs.py" "$tmp/src" 4 10 20 24 1
"$dscache" build "$tmp/src" "$tmp/cache" --size 16 --quiet >/dev/null
out=$(LD_LIBRARY_PATH="$libdir" "$tmp/example" "$tmp/cache")
echo "$out"
# 40 samples per epoch; labels 0..3, 10 each: sum 60.
[[ $(grep -c "40 samples, label sum 60" <<<"$out") -eq 2 ]] || { echo "FAIL: unexpected output"; exit 1; }

# The ingest library: installed with its own .pc file; its headers need only the standard library
# too, and a program built against them lists and decodes the same source.
pc_ingest=$(find "$tmp/root" -name dscache-ingest.pc | head -n 1)
[[ -n "$pc_ingest" ]] || { echo "FAIL: dscache-ingest.pc was not installed"; exit 1; }
for h in image_decode.h source_list.h idx.h source_decoder.h; do
  [[ -n $(find "$tmp/root" -path "*/include/dscache/ingest/$h") ]] || { echo "FAIL: dscache/ingest/$h not installed"; exit 1; }
done
cat > "$tmp/ingest.cpp" <<'CPP'
#include <cstdio>
#include <vector>

#include "dscache/ingest/image_decode.h"
#include "dscache/ingest/source_decoder.h"
#include "dscache/ingest/source_list.h"

int main(int argc, char** argv) {
  dscache::SourceListing src = dscache::list_source(argv[1], {});
  dscache::DecodeOptions opt;
  opt.height = opt.width = 8;
  std::vector<uint8_t> file, px(8 * 8 * 3);
  std::string reason;
  int ok = 0;
  for (const auto& e : src.entries) {
    if (!dscache::read_whole_file(e.path, file, reason)) return 1;
    ok += dscache::decode_image(file.data(), file.size(), opt, px.data()).ok;
  }
  std::printf("%zu classes, %zu entries, %d decoded\n", src.classes.size(), src.entries.size(), ok);
}
CPP
c++ -std=c++17 -Wall -Werror "${san[@]}" "$tmp/ingest.cpp" $(pkg-config --cflags --libs dscache-ingest) -o "$tmp/ingest"
out=$(LD_LIBRARY_PATH="$libdir" "$tmp/ingest" "$tmp/src")
echo "$out"
[[ "$out" == "4 classes, 40 entries, 40 decoded" ]] || { echo "FAIL: unexpected ingest output"; exit 1; }
echo "OK"
