// Evaluating a cpu blob's feature probes on this CPU (see cpu_features.h).
#include "cpu_features.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif
#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#endif

namespace etc_backend {
namespace {

enum ProbeKind : uint8_t { kNoProbe = 0, kX86Cpuid = 1, kLinuxHwcap = 2 };

#if defined(__x86_64__)
// LLVM's rule (sys::getHostCPUFeatures): a feature using wide registers counts only when the OS
// saves them, i.e. XCR0 has their state bits; XGETBV exists when CPUID.1:ECX.OSXSAVE is set.
uint64_t xcr0() {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return 0;
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (uint64_t(hi) << 32) | lo;
}

bool has(const Feature& f) {
  unsigned max_leaf = __get_cpuid_max(f.leaf & 0x80000000u, nullptr);
  if (f.leaf > max_leaf) return false;
  unsigned regs[4];
  __cpuid_count(f.leaf, f.subleaf, regs[0], regs[1], regs[2], regs[3]);
  if (f.reg > 3 || f.bit > 31 || !(regs[f.reg] >> f.bit & 1)) return false;
  return (xcr0() & f.os_state) == f.os_state;
}
#elif defined(__aarch64__) && defined(__linux__)
bool has(const Feature& f) {
  if ((f.leaf != 1 && f.leaf != 2) || f.bit > 63) return false;
  unsigned long word = getauxval(f.leaf == 1 ? AT_HWCAP : AT_HWCAP2);
  return word >> f.bit & 1;
}
#else
bool has(const Feature&) { return false; }
#endif

}  // namespace

uint16_t host_machine() {
#if defined(__x86_64__)
  return kMachineX86_64;
#elif defined(__aarch64__)
  return kMachineAArch64;
#else
  return 0;
#endif
}

std::string missing_features(const std::vector<Feature>& features) {
  std::string missing;
  for (const Feature& f : features) {
#if defined(__x86_64__)
    bool native_probe = f.kind == kX86Cpuid;
#elif defined(__aarch64__) && defined(__linux__)
    bool native_probe = f.kind == kLinuxHwcap;
#else
    bool native_probe = false;
#endif
    if (native_probe && has(f)) continue;
    if (!missing.empty()) missing += ", ";
    missing += "+" + f.name + (native_probe ? "" : " (no probe this backend can check)");
  }
  return missing;
}

}  // namespace etc_backend
