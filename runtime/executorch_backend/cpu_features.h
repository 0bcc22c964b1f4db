// Whether this CPU has the features a cpu blob's code was compiled for, by the probes the blob
// carries (targets/cpu/cpu_features.py: CPUID bits on x86-64, HWCAP bits on AArch64 Linux).
#pragma once

#include <string>
#include <vector>

#include "blob.h"

namespace etc_backend {

// The ELF machine this backend was built for (62 x86-64, 183 AArch64).
uint16_t host_machine();

// "" when this CPU has every feature, else the names of those it lacks ("+avx512f, +avx512bw") or
// cannot check (a feature the blob has no probe for).
std::string missing_features(const std::vector<Feature>& features);

}  // namespace etc_backend
