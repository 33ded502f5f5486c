#include "precision.h"

#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdlib>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define DSCACHE_X86 1
#endif

namespace dscache {
namespace train {

namespace {

#ifdef DSCACHE_X86
uint64_t xgetbv0() {
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<uint64_t>(hi) << 32) | lo;
}
#endif

std::string upper(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  return s;
}

// oneDNN's ISA names (dnnl_cpu_isa_t, as ONEDNN_MAX_CPU_ISA spells them) that still include
// bf16 dot products. An unknown name is ignored by oneDNN, so it caps nothing.
bool isa_allows_bf16(const std::string& cap) {
  static const char* const kWithout[] = {
      "SSE41",           "AVX", "AVX2", "AVX2_VNNI", "AVX512_MIC", "AVX512_MIC_4OPS", "AVX512_CORE",
      "AVX512_CORE_VNNI"};
  const std::string c = upper(cap);
  return std::find(std::begin(kWithout), std::end(kWithout), c) == std::end(kWithout);
}

}  // namespace

std::string CpuBf16::describe() const {
  std::string s;
  if (avx512_bf16) s = "AVX512_BF16";
  if (amx_bf16) s += s.empty() ? "AMX-BF16" : ", AMX-BF16";
  if (s.empty()) s = "no AVX512_BF16 or AMX-BF16";
  if (!isa_cap.empty()) {
    s += std::string(cap_allows_bf16 ? ", " : " but ") + "ONEDNN_MAX_CPU_ISA=" + isa_cap;
  }
  return s;
}

CpuBf16 detect_cpu_bf16() {
  CpuBf16 c;
#ifdef DSCACHE_X86
  unsigned a = 0, b = 0, cx = 0, d = 0;
  if (__get_cpuid(1, &a, &b, &cx, &d) && (cx & (1u << 27))) {  // OSXSAVE: xgetbv is allowed
    const uint64_t xcr0 = xgetbv0();
    const bool avx512_state = (xcr0 & 0xe6) == 0xe6;  // SSE, AVX, opmask, ZMM_Hi256, Hi16_ZMM
    const bool amx_state = (xcr0 & (3ull << 17)) == (3ull << 17);  // XTILECFG, XTILEDATA
    if (__get_cpuid_count(7, 0, &a, &b, &cx, &d)) {
      const unsigned max_subleaf = a;
      c.amx_bf16 = amx_state && (d & (1u << 22)) && (d & (1u << 24));  // AMX-BF16 and AMX-TILE
      const bool avx512f = b & (1u << 16);
      if (max_subleaf >= 1 && __get_cpuid_count(7, 1, &a, &b, &cx, &d)) {
        c.avx512_bf16 = avx512_state && avx512f && (a & (1u << 5));
      }
    }
  }
#endif
  for (const char* name : {"ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA"}) {
    const char* v = std::getenv(name);
    if (v && *v) {
      c.isa_cap = v;
      break;
    }
  }
  c.cap_allows_bf16 = c.isa_cap.empty() || isa_allows_bf16(c.isa_cap);
  return c;
}

int cuda_compute_major(int index) {
  // The driver API, which every CUDA machine has as libcuda.so.1 (the runtime library's name
  // and version differ per install). Signatures from cuda.h: CUresult is an int enum, 0 = OK.
  void* lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) return -1;
  using InitFn = int (*)(unsigned);
  using DeviceGetFn = int (*)(int*, int);
  using AttributeFn = int (*)(int*, int, int);
  constexpr int kComputeCapabilityMajor = 75;  // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
  auto init = reinterpret_cast<InitFn>(::dlsym(lib, "cuInit"));
  auto device_get = reinterpret_cast<DeviceGetFn>(::dlsym(lib, "cuDeviceGet"));
  auto attribute = reinterpret_cast<AttributeFn>(::dlsym(lib, "cuDeviceGetAttribute"));
  int major = -1, device = 0;
  if (init && device_get && attribute && init(0) == 0 && device_get(&device, index) == 0 &&
      attribute(&major, kComputeCapabilityMajor, device) != 0) {
    major = -1;
  }
  // Kept open: LibTorch's CUDA backend holds the same library for the life of the process.
  return major;
}

PrecisionChoice choose_precision(Precision requested, DeviceKind device, const CpuBf16& cpu,
                                 int cuda_major) {
  PrecisionChoice ch;
  if (requested != Precision::kAuto) {
    ch.precision = requested;
    if (requested == Precision::kBf16 && device == DeviceKind::kCpu && !cpu.native()) {
      ch.warning =
          "--precision bf16 is emulated on this CPU (" + cpu.describe() +
          "): it converts every bf16 operand through fp32 and ran 7.5x slower than fp32 on an "
          "AVX2 CPU; --precision auto (or fp32) trains faster here";
    }
    if (requested != Precision::kFp32) {
      ch.reason = std::string("precision ") + to_string(requested) + " (as asked)";
    }
    return ch;
  }
  if (device == DeviceKind::kCuda) {
    if (cuda_major >= 8) {
      ch.precision = Precision::kBf16;
      ch.reason = "precision auto: bf16 (CUDA device of compute capability " +
                  std::to_string(cuda_major) + ".x has native bf16)";
    } else {
      ch.precision = Precision::kFp16;
      ch.reason = cuda_major >= 0 ? "precision auto: fp16 with dynamic loss scaling (CUDA device "
                                    "of compute capability " +
                                        std::to_string(cuda_major) + ".x has no native bf16)"
                                  : "precision auto: fp16 with dynamic loss scaling (the CUDA "
                                    "driver did not say whether the device has bf16)";
    }
    return ch;
  }
  if (cpu.native()) {
    ch.precision = Precision::kBf16;
    ch.reason = "precision auto: bf16 (the CPU has " + cpu.describe() + ")";
  } else {
    ch.precision = Precision::kFp32;
    ch.reason = "precision auto: fp32 (the CPU has " + cpu.describe() +
                ", so bf16 would be emulated and slower than fp32; --precision bf16 forces it)";
  }
  return ch;
}

}  // namespace train
}  // namespace dscache
