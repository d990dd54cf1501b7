#!/usr/bin/env bash
# Set up a Debian or Ubuntu machine for the workbook, then run one of its workflows:
#
#   scripts/setup.sh            set up, then run the course (cmake --workflow --preset course)
#   scripts/setup.sh test       set up, then run the tests  (cmake --workflow --preset test)
#   scripts/setup.sh none       set up only
#
# It installs what the build needs from the distribution (CMake, Ninja, Doxygen,
# matplotlib) where it is missing. The presets need CMake 3.25 or newer; where the
# distribution's is older (Ubuntu 22.04 has 3.22), it adds CMake 3.31 from PyPI in
# /usr/local/lib/cuda-workbook/cmake and links cmake, ctest and cpack into
# /usr/local/bin, which comes before /usr/bin on the PATH. The CUDA Toolkit (12.4 or
# newer) is yours to install: the configure step says so if it is missing or older.
set -euo pipefail
cd "$(dirname "$0")/.."
preset=${1:-course}
case $preset in course|test|sanitize|exhaustive|none) ;;
  *) echo "setup.sh: unknown workflow '$preset' (allowed: course, test, sanitize, exhaustive, none)" >&2; exit 2 ;;
esac
say() { printf 'setup: %s\n' "$*"; }

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
apt_updated=0
apt_install() {
  [ $apt_updated = 1 ] || { $SUDO apt-get update -qq; apt_updated=1; }
  say "installing $* (apt)"
  $SUDO apt-get install -y -qq "$@" >/dev/null
}

need=()
for tool in cmake:cmake ninja:ninja-build doxygen:doxygen; do
  command -v "${tool%%:*}" >/dev/null || need+=("${tool#*:}")
done
python3 -c 'import matplotlib' 2>/dev/null || need+=(python3-matplotlib)
[ ${#need[@]} = 0 ] || apt_install "${need[@]}"
export PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1
# a python3 that is not the distribution's (pyenv, a venv) does not see its matplotlib: pip's, for the plots
python3 -c 'import matplotlib' 2>/dev/null || python3 -m pip install --quiet matplotlib

# CMake 3.25 or newer: the workflow presets (cmake --workflow) need it.
cmake_version() { "$1" --version | sed -n 's/^cmake version \([0-9][0-9.]*\).*/\1/p'; }
at_least_3_25() { [ "$(printf '%s\n3.25\n' "$1" | sort -V | head -1)" = 3.25 ]; }
cmake_bin=$(command -v cmake)
found=$(cmake_version "$cmake_bin")
if at_least_3_25 "$found"; then
  say "CMake $found ($cmake_bin)"
else
  say "CMake $found ($cmake_bin) is older than 3.25, which the presets need: adding CMake 3.31 from PyPI"
  python3 -m pip --version >/dev/null 2>&1 || apt_install python3-pip
  tools=/usr/local/lib/cuda-workbook/cmake
  # --target installs into a folder of its own, so pip does not refuse a system-wide
  # install where the distribution manages Python's packages (PEP 668: Debian 12, Ubuntu 24.04).
  $SUDO python3 -m pip install --quiet --upgrade --target "$tools" "cmake==3.31.6"
  for t in cmake ctest cpack; do $SUDO ln -sf "$tools/cmake/data/bin/$t" "/usr/local/bin/$t"; done
  cmake_bin=/usr/local/bin/cmake
  hash -r
  say "CMake $(cmake_version "$cmake_bin") ($cmake_bin, linked to $tools)"
  if [ "$(command -v cmake)" != "$cmake_bin" ]; then
    say "note: 'cmake' on your PATH is still $(command -v cmake); put /usr/local/bin first or call $cmake_bin"
  fi
fi

if ! command -v nvcc >/dev/null && [ ! -x /usr/local/cuda/bin/nvcc ]; then
  say "no nvcc on the PATH or in /usr/local/cuda/bin: install the CUDA Toolkit 12.4 or newer" \
      "(https://developer.nvidia.com/cuda-downloads) and put its bin/ on the PATH"
fi
[ "$preset" = none ] && exit 0
say "running: cmake --workflow --preset $preset"
exec "$cmake_bin" --workflow --preset "$preset"
