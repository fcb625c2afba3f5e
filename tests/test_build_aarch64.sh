#!/usr/bin/env bash
# The host code compiles for aarch64 (GH200 / Grace clusters): every C file of the CPU build,
# compiled with Debian's cross compiler (gcc-aarch64-linux-gnu) for -mcpu=neoverse-v1, with
# -Werror=implicit-function-declaration (an x86-only intrinsic or builtin would fail here). The
# library headers come from this machine (they are architecture-independent apart from the
# config headers, which only size types identically on both 64-bit targets). Compile only: there
# are no aarch64 libraries to link against here. Skipped without the cross compiler.
set -u
cd "$(dirname "$0")/.."
T=build_aarch64
XCC=${XCC:-aarch64-linux-gnu-gcc}
if ! command -v "$XCC" >/dev/null; then
  echo "skip - $T: skipped: no $XCC (Debian package gcc-aarch64-linux-gnu)"
  exit 0
fi
S=build/scratch/test_build_aarch64; rm -rf "$S"; mkdir -p "$S/inc/cjson"
# the dependencies' headers without the rest of /usr/include (whose glibc headers are x86's)
for h in ini.h pcre2.h utf8proc.h zlib.h zconf.h zstd.h zstd_errors.h; do
  p=$(ls /usr/include/$h /usr/include/*-linux-gnu/$h 2>/dev/null | head -n 1)
  [ -n "$p" ] && ln -s "$p" "$S/inc/$h"
done
ln -s /usr/include/cjson/cJSON.h "$S/inc/cjson/cJSON.h"
inc=$(pkg-config --cflags-only-I hdf5 openblas ompi-c 2>/dev/null)
mkdir -p "$S/gen"; printf '#define PHASELAB_VERSION "cross"\n#define PHASELAB_BUILD_FEATURES "cross"\n' >"$S/gen/phaselab_version.h"
n=0; bad=0; first=""
for f in common/*.c model/*.c kernels/*.c kernels/cpu/*.c data/*.c trainer/*.c analysis/*.c cli/*.c; do
  n=$((n + 1))
  # shellcheck disable=SC2086
  if ! "$XCC" -std=c11 -D_GNU_SOURCE -fopenmp -mcpu=neoverse-v1 -O2 -Werror=implicit-function-declaration \
       -I. -I"$S/gen" -I"$S/inc" $inc -DPHASELAB_OPENBLAS -c "$f" -o "$S/x.o" 2>"$S/err.txt"; then
    bad=$((bad + 1)); [ -n "$first" ] || first="$f: $(grep -m1 error "$S/err.txt")"
  fi
done
if [ $bad -eq 0 ] && [ $n -gt 20 ]; then
  echo "ok - $T: all $n host C files compile for aarch64 (-mcpu=neoverse-v1)"
else
  echo "not ok - $T: $bad of $n files fail for aarch64; first: $first"
fi
# ELF e_machine (bytes 18-19, little-endian) is 0xb7 = EM_AARCH64
[ "$(od -An -tx1 -j18 -N2 "$S/x.o" 2>/dev/null | tr -d ' ')" = b700 ] && echo "ok - $T: the objects are aarch64 code" \
  || echo "not ok - $T: the cross compiler did not produce aarch64 objects"
