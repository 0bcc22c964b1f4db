// The libc/libm functions a cpu image may import (targets/cpu/image.py IMPORTS: the same names;
// test_executorch_backend.py checks that the two lists agree). Only these are ever resolved:
// a blob cannot make the backend look up any other symbol of the process.
#include <math.h>
#include <sched.h>
#include <string.h>

#include <cstring>

#include "image_loader.h"

namespace etc_backend {
namespace {

using F1 = float (*)(float);
using D1 = double (*)(double);
using F2 = float (*)(float, float);
using D2 = double (*)(double, double);
using F3 = float (*)(float, float, float);
using D3 = double (*)(double, double, double);

struct Entry {
  const char* name;
  void* address;
};

#define FN(type, name) {#name, reinterpret_cast<void*>(static_cast<type>(&::name))}

const Entry kImports[] = {
    {"memcpy", reinterpret_cast<void*>(&::memcpy)},
    {"memmove", reinterpret_cast<void*>(&::memmove)},
    {"memset", reinterpret_cast<void*>(&::memset)},
    {"sched_yield", reinterpret_cast<void*>(&::sched_yield)},
    FN(F1, expf),
    FN(D1, exp),
    FN(F1, exp2f),
    FN(D1, exp2),
    FN(F1, logf),
    FN(D1, log),
    FN(F1, log2f),
    FN(D1, log2),
    FN(F1, log10f),
    FN(D1, log10),
    FN(F1, log1pf),
    FN(D1, log1p),
    FN(F1, expm1f),
    FN(D1, expm1),
    FN(F2, powf),
    FN(D2, pow),
    FN(F1, sinf),
    FN(D1, sin),
    FN(F1, cosf),
    FN(D1, cos),
    FN(F1, tanf),
    FN(D1, tan),
    FN(F1, asinf),
    FN(D1, asin),
    FN(F1, acosf),
    FN(D1, acos),
    FN(F1, atanf),
    FN(D1, atan),
    FN(F2, atan2f),
    FN(D2, atan2),
    FN(F1, sinhf),
    FN(D1, sinh),
    FN(F1, coshf),
    FN(D1, cosh),
    FN(F1, tanhf),
    FN(D1, tanh),
    FN(F1, asinhf),
    FN(D1, asinh),
    FN(F1, acoshf),
    FN(D1, acosh),
    FN(F1, atanhf),
    FN(D1, atanh),
    FN(F1, erff),
    FN(D1, erf),
    FN(F1, erfcf),
    FN(D1, erfc),
    FN(F1, sqrtf),
    FN(D1, sqrt),
    FN(F1, cbrtf),
    FN(D1, cbrt),
    FN(F2, fmodf),
    FN(D2, fmod),
    FN(F1, roundf),
    FN(D1, round),
    FN(F1, roundevenf),
    FN(D1, roundeven),
    FN(F1, truncf),
    FN(D1, trunc),
    FN(F1, floorf),
    FN(D1, floor),
    FN(F1, ceilf),
    FN(D1, ceil),
    FN(F1, fabsf),
    FN(D1, fabs),
    FN(F2, copysignf),
    FN(D2, copysign),
    FN(F3, fmaf),
    FN(D3, fma),
    FN(F2, fminf),
    FN(D2, fmin),
    FN(F2, fmaxf),
    FN(D2, fmax),
    FN(F1, rintf),
    FN(D1, rint),
    FN(F1, nearbyintf),
    FN(D1, nearbyint),
    FN(F1, tgammaf),
    FN(F1, lgammaf),
};

#undef FN

}  // namespace

void* import_address(const std::string& name) {
  for (const Entry& e : kImports) {
    if (name == e.name) return e.address;
  }
  return nullptr;
}

}  // namespace etc_backend
