# Sourced by the trainer's shell tests: the system LibTorch (Debian's libtorch-dev:
# LIBDIR/cmake/Torch/TorchConfig.cmake beside LIBDIR/libtorch_cpu.so) seen as a LibTorch tree of
# symbolic links, in the layout of a PyTorch wheel's torch/ folder (include/, lib/,
# share/cmake/Torch/). Sets $config and $libdir. torch_tree DIR [ABI] makes such a tree in DIR;
# with ABI its TorchConfig.cmake claims _GLIBCXX_USE_CXX11_ABI=ABI.
config=$(find /usr/lib -path '*/cmake/Torch/TorchConfig.cmake' 2>/dev/null | head -n 1)
[[ -n "$config" ]] || { echo "FAIL: no system TorchConfig.cmake to mirror"; exit 1; }
libdir=$(cd "$(dirname "$config")/../.." && pwd)

torch_tree() {
  mkdir -p "$1/share/cmake/Torch"
  ln -s /usr/include "$1/include"
  ln -s "$libdir" "$1/lib"
  if (($# > 1)); then
    sed "s/_GLIBCXX_USE_CXX11_ABI=[01]/_GLIBCXX_USE_CXX11_ABI=$2/" "$config" \
      > "$1/share/cmake/Torch/TorchConfig.cmake"
  else
    cp "$config" "$1/share/cmake/Torch/"
  fi
}
