// --precision auto: which autocast precision this device runs fast, and why (no LibTorch here).
#pragma once

#include <string>

#include "options.h"

namespace dscache {
namespace train {

// What the CPU offers bf16 matrix arithmetic with. LibTorch 1.13 runs CPU bf16 convolutions and
// matmuls through oneDNN; with AVX512_BF16 (VDPBF16PS) or AMX-BF16 they are native dot products
// at about fp32's speed or better, and without them oneDNN or ATen emulate bf16 by converting to
// fp32 and back: measured 7.5x slower than fp32 on an AVX2 CPU (docs/BENCHMARKS.md).
struct CpuBf16 {
  bool avx512_bf16 = false;  // CPUID.(EAX=7,ECX=1):EAX[5], with the OS saving AVX-512 state
  bool amx_bf16 = false;     // CPUID.(EAX=7,ECX=0):EDX[22], with the OS saving AMX tile state
  // ONEDNN_MAX_CPU_ISA (or the older DNNL_MAX_CPU_ISA) when set: oneDNN then uses no instruction
  // beyond that ISA, so bf16 is emulated unless the cap still includes bf16. "" = not set.
  std::string isa_cap;
  bool cap_allows_bf16 = true;  // isa_cap is empty or names an ISA with bf16 (AVX512_CORE_BF16,
                                // AVX512_CORE_AMX, ALL, ...)
  bool native() const { return (avx512_bf16 || amx_bf16) && cap_allows_bf16; }
  std::string describe() const;  // "AVX512_BF16, AMX-BF16" / "no AVX512_BF16 or AMX-BF16" ...
};

// This machine's answer (cpuid and xgetbv on x86-64; on other architectures nothing native).
CpuBf16 detect_cpu_bf16();

// The compute capability major of CUDA device `index` from the driver (libcuda.so.1, opened at
// run time so no CUDA header or library is needed to build); -1 when it cannot be asked.
int cuda_compute_major(int index);

struct PrecisionChoice {
  Precision precision = Precision::kFp32;  // never kAuto
  std::string reason;   // one line: what was chosen and why ("" when not asked: explicit fp32)
  std::string warning;  // an explicit choice that runs slowly here, or ""
};

// auto: bf16 where the device has it natively (a CPU with AVX512_BF16/AMX-BF16, a CUDA device of
// compute capability >= 8), fp16 with loss scaling on an older CUDA device, fp32 elsewhere. An
// explicit precision is kept; bf16 on a CPU without native bf16 gets a warning. cuda_major is
// cuda_compute_major()'s value (-1: unknown, which picks fp16 on CUDA: every CUDA GPU dscache can
// run on computes fp16).
PrecisionChoice choose_precision(Precision requested, DeviceKind device, const CpuBf16& cpu,
                                 int cuda_major);

}  // namespace train
}  // namespace dscache
