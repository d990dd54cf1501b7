#!/usr/bin/env bash
# Lay out the CUDA 12.4 toolkit the course's minimum is proved with, in a prefix of
# its own, from pinned packages (no apt source of the system is touched):
#   Debian 13's nvidia-cuda-toolkit 12.4.131: nvcc, cicc, cudafe++, ptxas, nvlink, fatbinary
#   Debian 13's libcub-dev, libcu++-dev, libthrust-dev 2.3.2: CCCL, as CUDA 12.4 ships it
#   NVIDIA's PyPI wheels 12.4: the runtime's and cuBLAS's headers and libraries, libdevice
# PyPI's CCCL 12.4 wheel lacks libcu++'s cuda/ headers and PyPI's nvcc 12.4 wheel has
# no nvcc, hence the mix. Nothing here has a static cudart: configure with
# -DCMAKE_CUDA_FLAGS="-cudart shared" -DCMAKE_CUDA_RUNTIME_LIBRARY=Shared.
#
# usage: .ci/toolkit-12.4.sh PREFIX    (then PREFIX/bin/nvcc is nvcc 12.4)
# Downloads are kept in ${WB_DOWNLOAD_CACHE:-$HOME/.cache/cuda-workbook} for the next run.
set -euo pipefail
prefix=${1:?usage: .ci/toolkit-12.4.sh PREFIX}
cache=${WB_DOWNLOAD_CACHE:-$HOME/.cache/cuda-workbook}/cuda-12.4
debs=(nvidia-cuda-toolkit=12.4.131~12.4.1-2 libcub-dev=2.3.2-2 libcu++-dev=2.3.2-2 libthrust-dev=2.3.2-2)
wheels=(nvidia-cuda-nvcc-cu12==12.4.131 nvidia-cuda-runtime-cu12==12.4.127 nvidia-cublas-cu12==12.4.5.8)

if [ -x "$prefix/bin/nvcc" ] && "$prefix/bin/nvcc" --version | grep -q "release 12.4"; then
  echo "toolkit-12.4: $prefix/bin/nvcc is already there"; exit 0
fi
mkdir -p "$cache/debs" "$cache/wheels"

# Debian 13's packages through a private apt state: its own sources list, lists and cache.
apt_dir=$cache/apt
mkdir -p "$apt_dir/lists/partial" "$apt_dir/archives/partial"
echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main contrib non-free" \
  > "$apt_dir/sources.list"
touch "$apt_dir/status"
apt_opts=(-o Dir::Etc::SourceList="$apt_dir/sources.list" -o Dir::Etc::SourceParts=/dev/null
          -o Dir::State::Lists="$apt_dir/lists" -o Dir::Cache="$apt_dir" -o Dir::State::Status="$apt_dir/status"
          -o APT::Architecture=amd64 -o APT::Architectures=amd64 -o APT::Sandbox::User=root)
missing=0
for d in "${debs[@]}"; do
  ls "$cache/debs/${d%%=*}_"*.deb >/dev/null 2>&1 || missing=1
done
if [ $missing = 1 ]; then
  apt-get "${apt_opts[@]}" -qq update
  (cd "$cache/debs" && apt-get "${apt_opts[@]}" -qq download "${debs[@]}")
fi
python3 -m pip download --quiet --no-deps --only-binary=:all: --platform manylinux2014_x86_64 \
  --python-version 3.11 -d "$cache/wheels" "${wheels[@]}"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for d in "${debs[@]}"; do dpkg-deb -x "$cache/debs/${d%%=*}_"*.deb "$work/deb"; done
for w in "${wheels[@]}"; do
  name=${w%%==*}; version=${w##*==}
  unzip -q -o "$cache/wheels/${name//-/_}-$version-"*.whl 'nvidia/*' -d "$work/whl"
done

rm -rf "$prefix"
mkdir -p "$prefix/bin" "$prefix/include" "$prefix/lib64" "$prefix/nvvm"
tk=$work/deb/usr/lib/nvidia-cuda-toolkit/bin   # Debian's nvcc and cicc (its /usr/bin/nvcc is a wrapper)
cp "$tk/nvcc" "$tk/cicc" "$prefix/bin/"
cp -r "$tk/crt" "$prefix/bin/"
for t in cudafe++ fatbinary nvlink ptxas bin2c cuobjdump; do cp "$work/deb/usr/bin/$t" "$prefix/bin/"; done
for part in cuda_nvcc cuda_runtime cublas; do cp -a "$work/whl/nvidia/$part/include/." "$prefix/include/"; done
rm -f "$prefix/include/__init__.py"
cp -a "$work/deb/usr/include/cub" "$work/deb/usr/include/cuda" "$work/deb/usr/include/thrust" "$prefix/include/"
cp -a "$work/whl/nvidia/cuda_nvcc/nvvm/." "$prefix/nvvm/"
cp -a "$work/whl/nvidia/cuda_runtime/lib/"lib*.so.* "$work/whl/nvidia/cublas/lib/"lib*.so.* "$prefix/lib64/"
(cd "$prefix/lib64" && for l in lib*.so.12; do ln -sf "$l" "${l%.12}"; done)
# nvcc finds its tools, headers and libraries through nvcc.profile beside it: this prefix's.
cat > "$prefix/bin/nvcc.profile" <<'EOF'
TOP              = $(_HERE_)/..
NVVMIR_LIBRARY_DIR = $(TOP)/nvvm/libdevice
LD_LIBRARY_PATH += $(TOP)/lib64:
PATH            += $(_HERE_):
INCLUDES        +=  "-I$(TOP)/include" $(_SPACE_)
LIBRARIES        =+ $(_SPACE_) "-L$(TOP)/lib64"
CUDAFE_FLAGS    +=
PTXAS_FLAGS     +=
EOF
"$prefix/bin/nvcc" --version | tail -2
