#!/usr/bin/env bash
# The build finds its dependencies instead of assuming Debian's paths (tools/configure, Makefile):
#  1. HDF5 and OpenBLAS copied into a private prefix and found only through PKG_CONFIG_PATH
#     (.pc files written here, pointing at the copy): configure names the copy, and a complete
#     build of ./train with CUDNN_HOME=/nonexistent NCCL_HOME=/nonexistent links against the copy
#     (ldd), has no libcudnn/libnccl (readelf NEEDED), says "cuDNN off" in its summary and in
#     ./train --version, and summarizes a config (--summary). Where nvcc is absent the same build is CPU-only.
#  2. HDF5_DIR= names the prefix directly; HDF5_DIR=/nonexistent and BLAS=nonexistent fail with
#     exit 1 and a message naming the missing dependency and the package that provides it.
#  3. tools/install-deps --list names the Python modules a bare Python lacks, and exits 1.
#  4. make clean removes ./train and ./tokenize; the version header carries git describe.
#  5. Where Debian's BLIS is installed (libblis-openmp-dev; make test's install-deps adds it):
#     BLAS=blis finds it without a .pc file, and a BLIS build's BLAS follows --threads.
set -u
cd "$(dirname "$0")/.."
ROOT=$(pwd)
S=$ROOT/build/scratch/test_build_config
rm -rf "$S"; mkdir -p "$S"
T=build_config
fails=0
ok() { echo "ok - $T: $1"; }
bad() { echo "not ok - $T: $1"; fails=$((fails + 1)); }
check() { if eval "$2"; then ok "$1"; else bad "$1${3:+: $3}"; fi; }

only() { pkg-config "$1" "$2" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$3//p" | head -n 1; }
hdf5_inc=$(only --cflags-only-I hdf5 -I); hdf5_lib=$(only --libs-only-L hdf5 -L)
blas_inc=$(only --cflags-only-I openblas -I); blas_lib=$(only --libs-only-L openblas -L)
if [ -z "$hdf5_inc" ] || [ -z "$hdf5_lib" ] || [ -z "$blas_lib" ] || [ ! -e "$blas_lib/libopenblas.so" ]; then
  echo "skip - $T: skipped: no pkg-config hdf5/openblas on this machine to copy from"
  exit 0
fi
# copy_lib LINK DIR: the library file LINK resolves to, under LINK's name and under its SONAME
copy_lib() {
  local real soname; real=$(readlink -f "$1"); soname=$(objdump -p "$real" 2>/dev/null | awk '/SONAME/{print $2}')
  cp "$real" "$2/$(basename "$1")"; [ -n "$soname" ] && cp "$real" "$2/$soname"
}

# ---- 1. a private prefix, found through PKG_CONFIG_PATH only ---------------------------------
P=$S/prefix
mkdir -p "$P/hdf5/include" "$P/hdf5/lib" "$P/openblas/include" "$P/openblas/lib" "$P/pkgconfig"
cp -a "$hdf5_inc"/. "$P/hdf5/include/"
copy_lib "$hdf5_lib/libhdf5.so" "$P/hdf5/lib"; copy_lib "$hdf5_lib/libhdf5_hl.so" "$P/hdf5/lib"
cp -a "$blas_inc"/. "$P/openblas/include/"
copy_lib "$blas_lib/libopenblas.so" "$P/openblas/lib"
cat >"$P/pkgconfig/hdf5.pc" <<EOF
prefix=$P/hdf5
Name: hdf5
Description: HDF5 copied for the build test
Version: 1.10
Cflags: -I\${prefix}/include
Libs: -L\${prefix}/lib -lhdf5
EOF
cat >"$P/pkgconfig/openblas.pc" <<EOF
prefix=$P/openblas
Name: openblas
Description: OpenBLAS copied for the build test
Version: 0.3
Cflags: -I\${prefix}/include
Libs: -L\${prefix}/lib -lopenblas
EOF
# a copy of the source tree, so that its ./train does not replace this checkout's
SRC=$S/src; mkdir -p "$SRC"
for d in Makefile mk common model kernels trainer analysis cli data tools tests configs docs; do [ -e "$d" ] && cp -r "$d" "$SRC/"; done
rm -rf "$SRC/tests/cuemu" "$SRC/tests/gpu"
B=$SRC/build
log=$S/make.log
(cd "$SRC" && PKG_CONFIG_PATH=$P/pkgconfig make -j2 CUDNN_HOME=/nonexistent NCCL_HOME=/nonexistent train) >"$log" 2>&1
rc=$?
check "build of ./train with HDF5/OpenBLAS from a PKG_CONFIG_PATH prefix and cuDNN/NCCL hidden succeeds" "[ $rc -eq 0 ]" "exit $rc: $(tail -n 3 "$log" | tr '\n' ' ')"
summary=$(cat "$B/config.summary" 2>/dev/null)
check "summary names the prefix's HDF5" "grep -q 'HDF5 *$P/hdf5/lib' <<<\"\$summary\"" "$(grep HDF5 <<<"$summary")"
check "summary names the prefix's OpenBLAS" "grep -q 'BLAS *openblas ($P/openblas/lib' <<<\"\$summary\"" "$(grep BLAS <<<"$summary")"
cflags=$(grep '^CONFIG_CFLAGS' "$B/config.mk" 2>/dev/null)
check "no Debian include path for HDF5/OpenBLAS in the flags" "! grep -qE '/usr/include/hdf5|/usr/include/[a-z0-9_]+-linux-gnu/openblas' <<<\"\$cflags\"" "$cflags"
if [ $rc -eq 0 ]; then
  deps=$(ldd "$SRC/train" 2>/dev/null)
  check "./train loads libhdf5 from the prefix" "grep -q 'libhdf5[a-z_]*.so.* => $P/hdf5/lib/' <<<\"\$deps\"" "$(grep hdf5 <<<"$deps" | head -n 2)"
  check "./train loads libopenblas from the prefix" "grep -q 'libopenblas.so.* => $P/openblas/lib/' <<<\"\$deps\"" "$(grep openblas <<<"$deps")"
  needed=$(readelf -d "$SRC/train" 2>/dev/null | grep NEEDED)
  check "./train does not link cuDNN or NCCL" "! grep -qE 'libcudnn|libnccl' <<<\"\$needed\"" "$(grep -E 'cudnn|nccl' <<<"$needed")"
  if grep -q '^CONFIG_HAVE_CUDA := 1' "$B/config.mk"; then
    check "summary says cuDNN is off and why" "grep -q 'cuDNN *off (no cudnn.h + libcudnn in /nonexistent' <<<\"\$summary\"" "$(grep cuDNN <<<"$summary")"
    check "summary says NCCL is off" "grep -q 'NCCL *off' <<<\"\$summary\"" "$(grep NCCL <<<"$summary")"
    v=$("$SRC/train" --version 2>&1)
    check "./train --version says CUDA on, cuDNN off, NCCL off" "grep -q 'CUDA sm_.*cuDNN off; NCCL off' <<<\"\$v\"" "$v"
  else
    echo "skip - $T: cuDNN off in a CUDA build: skipped: no nvcc here"
  fi
  out=$("$SRC/train" --summary configs/test/tiny.ini 2>&1); drc=$?
  check "that ./train summarizes a config" "[ $drc -eq 0 ]" "exit $drc: $(tail -n 2 <<<"$out")"
fi

# ---- 2. explicit prefix; missing dependencies ------------------------------------------------
out=$(HDF5_DIR=$P/hdf5 CUDA=0 tools/configure --out "$S/c2.mk" 2>&1); rc=$?
check "HDF5_DIR= prefix is used and named" "[ $rc -eq 0 ] && grep -q 'HDF5 *$P/hdf5/lib (from HDF5_DIR)' <<<\"\$out\"" "exit $rc: $(grep HDF5 <<<"$out")"
out=$(HDF5_DIR=/nonexistent CUDA=0 tools/configure --out "$S/c3.mk" 2>&1); rc=$?
check "HDF5_DIR=/nonexistent: exit 1 naming HDF5 and libhdf5-dev" "[ $rc -eq 1 ] && grep -q 'HDF5.*MISSING' <<<\"\$out\" && grep -q 'libhdf5-dev' <<<\"\$out\"" "exit $rc: $out"
out=$(BLAS=nonexistent-blas CUDA=0 tools/configure --out "$S/c4.mk" 2>&1); rc=$?
check "BLAS=nonexistent-blas: exit 1 naming BLAS" "[ $rc -eq 1 ] && grep -q 'BLAS.*MISSING.*nonexistent-blas' <<<\"\$out\"" "exit $rc: $out"
check "a failed configure writes no config" "[ ! -s '$S/c3.mk' ] && [ ! -s '$S/c4.mk' ]"

# ---- 3. install-deps on a Python without the modules ----------------------------------------
if python3 -m venv --without-pip "$S/venv" >/dev/null 2>&1; then
  out=$(PYTHON=$S/venv/bin/python3 tools/install-deps run --list 2>&1); rc=$?
  check "install-deps --list names numpy, h5py, matplotlib for a bare Python, exit 1" \
    "[ $rc -eq 1 ] && grep -q 'Python modules for .*venv/bin/python3: numpy h5py matplotlib' <<<\"\$out\"" "exit $rc: $out"
else
  echo "skip - $T: install-deps --list on a bare venv: skipped: python3 -m venv unavailable"
fi
out=$(tools/install-deps build --list 2>&1); rc=$?
check "install-deps build --list: nothing missing here, exit 0" "[ $rc -eq 0 ] && [ -z \"\$out\" ]" "exit $rc: $out"

# ---- 4. clean and version --------------------------------------------------------------------
C=$S/cleandir; mkdir -p "$C"; touch "$C/train" "$C/tokenize"; mkdir -p "$C/b"
make -s -C "$C" -f "$ROOT/Makefile" BUILD=b clean >/dev/null 2>&1
check "make clean removes ./train, ./tokenize and the build directory" "[ ! -e '$C/train' ] && [ ! -e '$C/tokenize' ] && [ ! -e '$C/b' ]"
want=$(git describe --always --dirty 2>/dev/null || echo unknown)
hdr=$(cat "$B/gen/phaselab_version.h" 2>/dev/null)
check "the generated version header carries git describe ($want)" "grep -q \"PHASELAB_VERSION \\\"$want\\\"\" <<<\"\$hdr\"" "$hdr"

# ---- 5. BLAS=blis from Debian's multiarch directories (no .pc file) ---------------------------
# configure must find it by itself, define PHASELAB_BLIS, and the backend must set BLIS's own
# thread count (tests/test_blas_threads.c, built against BLIS here; BLIS ignores --threads
# otherwise and runs on one thread)
triplet=$(cc -print-multiarch 2>/dev/null)
if [ -n "$triplet" ] && [ -e "/usr/include/$triplet/blis-openmp/cblas.h" ]; then
  out=$(cd "$SRC" && BLAS=blis CUDA=0 tools/configure --out "$S/blis.mk" 2>&1); rc=$?
  check "BLAS=blis finds Debian's BLIS under /usr/lib/$triplet/blis-openmp" \
    "[ $rc -eq 0 ] && grep -q 'BLAS *blis (/usr/lib/$triplet/blis-openmp)' <<<\"\$out\"" "exit $rc: $(grep BLAS <<<"$out")"
  check "BLAS=blis builds with -DPHASELAB_BLIS" "grep -q -- '-DPHASELAB_BLIS' '$S/blis.mk'" "$(grep CONFIG_CFLAGS "$S/blis.mk")"
  (cd "$SRC" && BLAS=blis make -j2 CUDA=0 BUILD=blisb blisb/tests/test_blas_threads) >"$S/blis.log" 2>&1; rc=$?
  check "the BLIS build of test_blas_threads links" "[ $rc -eq 0 ]" "exit $rc: $(tail -n 3 "$S/blis.log" | tr '\n' ' ')"
  if [ $rc -eq 0 ]; then
    out=$("$SRC/blisb/tests/test_blas_threads" 2>&1); rc=$?
    check "against BLIS, --threads reaches the BLAS (test_blas_threads)" "[ $rc -eq 0 ] && ! grep -q '^not ok' <<<\"\$out\" && grep -q '^ok - a 2-thread backend' <<<\"\$out\"" "exit $rc: $(grep -v '^ok' <<<"$out" | head -n 3 | tr '\n' ' ')"
  fi
else
  echo "skip - $T: BLAS=blis: skipped: no Debian BLIS (libblis-openmp-dev) here"
fi

rm -rf "$S/src" "$S/prefix"
[ $fails -eq 0 ]
