// etc's `cpu` delegate as an ExecuTorch backend: runs the code etc's CpuPartitioner compiled, inside
// ExecuTorch's runtime (its C++ API, extension::Module, or executorch.runtime from Python).
//
// init:    the blob is checked (blob.cpp: CRC, version, table, image), its machine and the CPU
//          features its code needs are checked against this CPU (cpu_features.cpp), its image is
//          mapped W^X (image_loader.cpp), its constants bound: in place in the program's data when
//          it is 64-byte aligned (the FreeableBuffer is then kept), else copied; a constant stored
//          narrower or trimmed, or derived (8da4w column sums), is rebuilt once, from ExecuTorch's
//          runtime allocator. Every failure is an ExecuTorch Error with a log line saying why.
// execute: each input and output tensor is checked against the compiled argument (dtype, rank,
//          sizes within bounds, contiguous) and bound; dynamic dims go in and out through the
//          `dims` arguments and dynamic outputs are resized; a threaded blob runs on ExecuTorch's
//          threadpool; a profiled blob's regions go to the event tracer (ETDump).
// The same loader design as etc's Python runtime (targets/cpu/runtime.py), in C++.
#include <executorch/runtime/backend/interface.h>
#include <executorch/runtime/core/error.h>
#include <executorch/runtime/core/evalue.h>
#include <executorch/runtime/core/exec_aten/util/dim_order_util.h>
#include <executorch/runtime/core/exec_aten/util/tensor_util.h>
#include <executorch/runtime/kernel/thread_parallel_interface.h>
#include <executorch/runtime/platform/log.h>
#include <executorch/runtime/platform/platform.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <new>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "blob.h"
#include "cpu_features.h"
#include "image_loader.h"

namespace etc_backend {
namespace {

using executorch::aten::SizesType;
using executorch::aten::Tensor;
using executorch::runtime::ArrayRef;
using executorch::runtime::BackendExecutionContext;
using executorch::runtime::BackendInitContext;
using executorch::runtime::BackendInterface;
using executorch::runtime::CompileSpec;
using executorch::runtime::DelegateHandle;
using executorch::runtime::Error;
using executorch::runtime::EValue;
using executorch::runtime::FreeableBuffer;
using executorch::runtime::MemoryAllocator;
using executorch::runtime::Result;
using executorch::runtime::Span;

using FlatEntry = void (*)(void**);
using ThreadedEntry = void (*)(void**, intptr_t, intptr_t, int32_t*);
constexpr size_t kAlign = 64;  // the code lays out its constants and scratch buffers at 64-byte offsets
const char kOpsTag[8] = {'e', 't', 'c', '.', 'o', 'p', 's', 0};  // ETDump metadata of a region: its ops

// One loaded cpu delegate (a method's handle). Allocated from the runtime allocator; its own arrays
// too, so they live as long as the method.
struct Delegate {
  Blob blob;
  LoadedImage image;
  void* entry = nullptr;
  void** ptrs = nullptr;  // the entry's argument array
  std::vector<int> io_slot;  // argument index of input k (k < n_inputs), then of output k
  std::vector<const Arg*> io_arg;
  int64_t* dims[2] = {nullptr, nullptr};  // the `dims` arguments: in, out
  uint8_t* scratch = nullptr;
  int32_t* barrier = nullptr;
  int threads = 1;  // how many threads a call uses
  double ticks_per_count = 0;  // profiled blobs: PAL ticks per counter tick
  std::optional<FreeableBuffer> processed;  // kept when the constants are used in place
  uintptr_t* ranges = nullptr;  // per call: each input's and output's bytes [lo, hi)
  std::vector<uint8_t> input_copy;  // an input overlapping an output it does not pair with
  std::vector<std::vector<uint8_t>> region_metadata;
};

Error fail(Error code, const std::string& message) {
  ET_LOG(Error, "etc cpu backend: %s", message.c_str());
  return code;
}

void* allocate(MemoryAllocator* allocator, size_t size) {
  return allocator->allocate(size ? size : 1, kAlign);
}

// Half -> float, exactly (the stored form of a constant whose values float16 holds).
float half_to_float(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16, exponent = (h >> 10) & 0x1F, mantissa = h & 0x3FF, bits;
  if (exponent == 0x1F) {
    bits = sign | 0x7F800000u | (mantissa << 13);
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    bits = sign;
  } else {  // subnormal: normalize
    int shift = 0;
    while (!(mantissa & 0x400)) {
      mantissa <<= 1;
      ++shift;
    }
    bits = sign | (uint32_t(113 - shift) << 23) | ((mantissa & 0x3FF) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

double stored_value(const uint8_t* p, uint8_t stored) {
  switch (stored) {
    case 1: return double(*reinterpret_cast<const int8_t*>(p));
    case 2: { int16_t v; std::memcpy(&v, p, 2); return v; }
    default: { uint16_t v; std::memcpy(&v, p, 2); return half_to_float(v); }  // float16
  }
}

void store_value(uint8_t* p, uint8_t dtype, double value) {
  switch (dtype) {
    case 3: { int32_t v = int32_t(value); std::memcpy(p, &v, 4); break; }
    case 4: { int64_t v = int64_t(value); std::memcpy(p, &v, 8); break; }
    case 6: { float v = float(value); std::memcpy(p, &v, 4); break; }
    default: std::memcpy(p, &value, 8); break;  // float64
  }
}

// A constant stored narrower and/or without its last panel's zero columns, rebuilt (blob.CpuBlob.constant).
void rebuild(const Constant& c, const uint8_t* stored, uint8_t* out) {
  size_t esize = element_size(c.dtype), ssize = element_size(c.stored);
  uint64_t head = c.numel, panel_rows = 0, cols = 0;
  if (c.tail != kNone32) {
    panel_rows = uint64_t(c.sizes[1]);
    cols = uint64_t(c.sizes[2]);
    head = (uint64_t(c.sizes[0]) - 1) * panel_rows * cols;
  }
  auto copy = [&](uint64_t to, uint64_t from, uint64_t n) {
    if (c.stored == c.dtype) {
      std::memcpy(out + to * esize, stored + from * ssize, n * esize);
      return;
    }
    for (uint64_t i = 0; i < n; ++i) store_value(out + (to + i) * esize, c.dtype, stored_value(stored + (from + i) * ssize, c.stored));
  };
  copy(0, 0, head);
  if (c.tail == kNone32) return;
  std::memset(out + head * esize, 0, panel_rows * cols * esize);  // the last panel: its kept columns, then zeros
  for (uint64_t r = 0; r < panel_rows; ++r) copy(head + r * cols, head + r * c.tail, c.tail);
}

// C[n] = sum_k w[n, k] ws[n, k / group] of an 8da4w weight, from its panels (blob._int4_colsum and
// runtime/kernels/quantized.int4_column_sums, whose order of operations this repeats exactly, so the
// bits are the ones the compiler checked): per group an integer sum (exact), times the group's
// scale in double, summed over the groups in order, rounded to float once.
void int4_colsum(const Constant& c, const Constant& w, const int8_t* panels, const Constant& s, const float* scales,
                 float* out) {
  int64_t kb8 = w.sizes[1], width = s.sizes[2], groups = s.sizes[1];
  int64_t k = kb8 * 8, per_group = k / groups;
  for (int64_t n = 0; n < c.sizes[0]; ++n) {
    int64_t block = n / width, j = n % width;
    double total = 0.0;
    for (int64_t g = 0; g < groups; ++g) {
      int64_t sum = 0;
      for (int64_t kk = g * per_group; kk < (g + 1) * per_group; ++kk) {
        // element kk of row n: nibble kk % 2 of byte kk / 2; byte b of row n is panels[block, b / 4, j * 4 + b % 4]
        int64_t byte = kk / 2;
        uint8_t packed = uint8_t(panels[(block * kb8 + byte / 4) * width * 4 + j * 4 + byte % 4]);
        int nibble = kk % 2 ? packed >> 4 : packed & 0xF;
        sum += nibble > 7 ? nibble - 16 : nibble;
      }
      double product = double(sum) * double(scales[(block * groups + g) * width + j]);
      total = total + product;
    }
    out[n] = float(total);
  }
}

int64_t ticks() { return int64_t(et_pal_current_ticks()); }

// Runs the code once, on zeroed buffers at the arguments' upper bounds, with `threads` threads: what
// the load-time calibrations time (etc's Python runtime does the same).
void run(Delegate* d, int threads);

void call(Delegate* d, int threads) {
  if (!d->blob.threaded) {
    reinterpret_cast<FlatEntry>(d->entry)(d->ptrs);
    return;
  }
  auto threaded = reinterpret_cast<ThreadedEntry>(d->entry);
#ifdef ET_USE_THREADPOOL
  if (threads > 1) {
    // One task per thread, all running at once (the code's barrier waits for every one): the pool has
    // at least `threads` threads (init checked), so parallel_for gives each task its own. Should it run
    // the range serially instead (a call from inside another parallel region), the whole range
    // arrives in one call and runs as one thread.
    bool ok = executorch::extension::parallel_for(0, threads, 1, [&](int64_t begin, int64_t end) {
      if (end - begin == threads) {
        threaded(d->ptrs, 0, 1, d->barrier);
        return;
      }
      for (int64_t t = begin; t < end; ++t) threaded(d->ptrs, t, threads, d->barrier);
    });
    if (ok) return;
  }
#endif
  (void)threads;
  threaded(d->ptrs, 0, 1, d->barrier);
}

void run(Delegate* d, int threads) {
  std::vector<void*> buffers;
  for (size_t k = 0; k < d->io_slot.size(); ++k) {
    void* p = std::aligned_alloc(kAlign, (d->io_arg[k]->nbytes + kAlign) / kAlign * kAlign);
    std::memset(p, 0, d->io_arg[k]->nbytes);
    buffers.push_back(p);
    d->ptrs[d->io_slot[k]] = p;
  }
  size_t n = 0;
  for (int k = 0; k < d->blob.n_inputs; ++k) {
    const Arg& a = *d->io_arg[k];
    for (int dim = 0; dim < a.rank; ++dim) {
      if (a.dynamic >> dim & 1) d->dims[0][n++] = a.sizes[dim];
    }
  }
  call(d, threads);
  for (void* p : buffers) std::free(p);
}

// Times the code on one thread and on `d->threads` (1, n, 1, n, each 3 times) and keeps the faster:
// waking the pool's threads costs tens of microseconds, more than a small delegate's work.
void calibrate_threads(Delegate* d) {
  int most = d->threads;
  double best[2] = {1e300, 1e300};
  for (int round = 0; round < 4; ++round) {
    int threads = round % 2 ? most : 1;
    for (int repeat = 0; repeat < 3; ++repeat) {
      auto start = std::chrono::steady_clock::now();
      run(d, threads);
      double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      double& slot = best[round % 2];
      slot = seconds < slot ? seconds : slot;
    }
  }
  d->threads = best[0] <= best[1] ? 1 : most;
  ET_LOG(Info, "etc cpu backend: threads: %d of %d (measured at load: %.0f us on one, %.0f us on %d)", d->threads, most,
         best[0] * 1e6, best[1] * 1e6, most);
}

int64_t last_counter(const Delegate* d) {
  int64_t value;
  size_t slot = size_t(d->blob.profile_offset) + 8 * d->blob.regions.size();
  std::memcpy(&value, d->scratch + slot, 8);
  return value;
}

// PAL ticks per tick of the code's cycle counter: its last read in two runs at least 20 ms apart,
// against the PAL clock right after each returns (etc's Python runtime calibrates the same way).
std::string calibrate_counter(Delegate* d) {
  run(d, d->threads);
  int64_t first_ticks = ticks(), first = last_counter(d);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  run(d, d->threads);
  int64_t last_ticks = ticks(), last = last_counter(d);
  if (last <= first || last_ticks <= first_ticks) return "its profiling counter did not advance";
  d->ticks_per_count = double(last_ticks - first_ticks) / double(last - first);
  return "";
}

std::string spec_value(ArrayRef<CompileSpec> specs, const char* key) {
  for (const CompileSpec& s : specs) {
    if (std::strcmp(s.key, key) == 0 && s.value.buffer) {
      return std::string(static_cast<const char*>(s.value.buffer), s.value.nbytes);
    }
  }
  return "";
}

// Checks tensor `t` against compiled argument `a`; returns "" or what is wrong.
std::string check_tensor(const Tensor& t, const Arg& a, bool output) {
  if (static_cast<int>(t.scalar_type()) != a.dtype) {
    return "has dtype " + std::to_string(static_cast<int>(t.scalar_type())) + ", compiled for " + std::to_string(a.dtype) +
           " (ExecuTorch ScalarType)";
  }
  if (t.dim() != a.rank) return "has " + std::to_string(t.dim()) + " dims, compiled for " + std::to_string(a.rank);
  for (int d = 0; d < a.rank; ++d) {
    bool dynamic = a.dynamic >> d & 1;
    int64_t size = t.size(d);
    if (dynamic ? (!output && size > a.sizes[d]) : size != a.sizes[d]) {
      return "has size " + std::to_string(size) + " in dim " + std::to_string(d) + ", compiled for " +
             (dynamic ? "at most " : "") + std::to_string(a.sizes[d]);
    }
  }
  if (!executorch::runtime::is_contiguous_dim_order(t.dim_order().data(), size_t(t.dim()))) {
    return "is not in the contiguous dim order the code reads";
  }
  return "";
}

class CpuBackend final : public BackendInterface {
 public:
  bool is_available() const override { return host_machine() != 0; }

  Result<DelegateHandle*> init(BackendInitContext& context, FreeableBuffer* processed,
                               ArrayRef<CompileSpec> compile_specs) const override {
    Blob blob;
    const auto* data = static_cast<const uint8_t*>(processed->data());
    std::string problem = parse_blob(data, processed->size(), &blob);
    if (!problem.empty()) {
      bool version = problem.find("format version") != std::string::npos;
      return fail(version ? Error::DelegateInvalidCompatibility : Error::InvalidProgram,
                  "cpu delegate blob rejected: " + problem);
    }
    if (blob.machine != host_machine()) {
      return fail(Error::DelegateInvalidCompatibility,
                  "cpu delegate was compiled for " + blob.triple + "; this backend runs " +
                      (host_machine() == kMachineX86_64 ? "x86-64" : "AArch64") +
                      " code (recompile with CpuPartitioner(target=...) for this machine)");
    }
    std::string missing = missing_features(blob.features);
    if (!missing.empty()) {
      return fail(Error::DelegateInvalidCompatibility,
                  "cpu delegate needs CPU feature(s) " + missing + " that this CPU lacks; recompile for it, or "
                  "portably with CpuPartitioner(cpu='generic')");
    }
    MemoryAllocator* allocator = context.get_runtime_allocator();
    auto* d = static_cast<Delegate*>(allocator ? allocate(allocator, sizeof(Delegate)) : nullptr);
    if (!d) return fail(Error::MemoryAllocationFailed, "no memory for the delegate's handle");
    new (d) Delegate();
    d->blob = std::move(blob);
    Error error = setup(d, allocator, compile_specs);
    if (error != Error::Ok) {
      destroy(d);
      return error;
    }
    bool in_place = reinterpret_cast<uintptr_t>(d->blob.constant_section) % kAlign == 0;
    if (in_place && d->blob.constant_section_size) d->processed.emplace(std::move(*processed));
    d->blob.image_stream = nullptr;  // pointed into `processed`: used at init only
    d->blob.constant_section = nullptr;
    return d;
  }

  Error execute(BackendExecutionContext& context, DelegateHandle* handle, Span<EValue*> args) const override {
    auto* d = static_cast<Delegate*>(handle);
    const Blob& b = d->blob;
    size_t n_io = d->io_slot.size();
    if (args.size() < n_io) {
      return fail(Error::InvalidArgument, "cpu delegate takes " + std::to_string(b.n_inputs) + " input(s) and " +
                                              std::to_string(b.n_outputs) + " output(s), got " +
                                              std::to_string(args.size()) + " arguments");
    }
    uintptr_t* ranges_lo = d->ranges;
    uintptr_t* ranges_hi = d->ranges + n_io;
    for (size_t k = 0; k < n_io; ++k) {
      bool output = k >= size_t(b.n_inputs);
      std::string what = output ? "output " + std::to_string(k - b.n_inputs) : "input " + std::to_string(k);
      if (!args[k]->isTensor()) return fail(Error::InvalidArgument, "cpu delegate: " + what + " is not a tensor");
      Tensor t = args[k]->toTensor();
      const Arg& a = *d->io_arg[k];
      std::string problem = check_tensor(t, a, output);
      if (!problem.empty()) return fail(Error::InvalidArgument, "cpu delegate: " + what + " " + problem);
      if (output && a.dynamic) {  // the code may write up to the bounds: the tensor's memory must hold them
        SizesType bounds[kMaxRank];
        for (int dim = 0; dim < a.rank; ++dim) bounds[dim] = SizesType(a.sizes[dim]);
        if (executorch::runtime::resize_tensor(t, {bounds, size_t(a.rank)}) != Error::Ok) {
          return fail(Error::InvalidArgument, "cpu delegate: " + what + " cannot hold its upper-bound sizes");
        }
      }
      void* p = output ? t.mutable_data_ptr() : const_cast<void*>(t.const_data_ptr());
      if (!p && a.nbytes) return fail(Error::InvalidArgument, "cpu delegate: " + what + " has no data");
      d->ptrs[d->io_slot[k]] = p;
      ranges_lo[k] = reinterpret_cast<uintptr_t>(p);
      ranges_hi[k] = ranges_lo[k] + (output ? a.nbytes : t.nbytes());
    }
    // The code assumes distinct buffers (noalias), but for the in-place pairs (a KV cache passed as
    // input and output): an input overlapping another output is read from a copy.
    for (int k = 0; k < b.n_inputs; ++k) {
      for (int o = 0; o < b.n_outputs; ++o) {
        size_t ok = size_t(b.n_inputs + o);
        bool pair = false;
        for (const auto& p : b.in_place) pair = pair || (p.first == uint32_t(o) && p.second == uint32_t(k));
        if (pair || ranges_hi[k] <= ranges_lo[ok] || ranges_hi[ok] <= ranges_lo[k]) continue;
        size_t bytes = ranges_hi[k] - ranges_lo[k];
        if (d->input_copy.size() < bytes) d->input_copy.resize(bytes);  // one overlapping input at most per call
        std::memcpy(d->input_copy.data(), reinterpret_cast<void*>(ranges_lo[k]), bytes);
        d->ptrs[d->io_slot[k]] = d->input_copy.data();
        break;
      }
    }
    size_t n = 0;
    for (int k = 0; k < b.n_inputs; ++k) {
      const Arg& a = *d->io_arg[k];
      for (int dim = 0; dim < a.rank; ++dim) {
        if (a.dynamic >> dim & 1) d->dims[0][n++] = args[k]->toTensor().size(dim);
      }
    }
    int64_t start = b.regions.empty() ? 0 : ticks();
    call(d, d->threads);
    n = 0;
    for (int o = 0; o < b.n_outputs; ++o) {  // dynamic outputs: the sizes the code computed
      const Arg& a = *d->io_arg[b.n_inputs + o];
      if (!a.dynamic) continue;
      SizesType sizes[kMaxRank];
      for (int dim = 0; dim < a.rank; ++dim) {
        int64_t size = a.sizes[dim];
        if (a.dynamic >> dim & 1) {
          size = d->dims[1][n++];
          if (size < 0 || size > a.sizes[dim]) {
            return fail(Error::Internal, "cpu delegate: its code computed an output size out of its bounds");
          }
        }
        sizes[dim] = SizesType(size);
      }
      Error resized = executorch::runtime::resize_tensor(args[b.n_inputs + o]->toTensor(), {sizes, size_t(a.rank)});
      if (resized != Error::Ok) return fail(resized, "cpu delegate: cannot resize a dynamic output");
    }
    if (!b.regions.empty()) report_regions(context, d, start);
    return Error::Ok;
  }

  void destroy(DelegateHandle* handle) const override {
    if (!handle) return;
    auto* d = static_cast<Delegate*>(handle);
    unmap_image(&d->image);
    d->~Delegate();  // its memory is the runtime allocator's
  }

 private:
  // Maps the image and binds everything the entry's arguments point at (see the file comment).
  static Error setup(Delegate* d, MemoryAllocator* allocator, ArrayRef<CompileSpec> specs) {
    const Blob& b = d->blob;
    bool refused = false;
    std::string problem = map_image(b, &d->image, &refused);
    if (!problem.empty()) return fail(refused ? Error::NotSupported : Error::InvalidProgram, "cpu delegate: " + problem);
    d->entry = d->image.base + b.entry;
    auto no_memory = [](uint64_t bytes, const char* what) {
      return fail(Error::MemoryAllocationFailed,
                  "cpu delegate: the runtime allocator has no " + std::to_string(bytes) + " bytes for " + what);
    };
    // Constants: in place when the program's data is 64-byte aligned here, else one aligned copy.
    const uint8_t* section = b.constant_section;
    if (reinterpret_cast<uintptr_t>(section) % kAlign && b.constant_section_size) {
      auto* copy = static_cast<uint8_t*>(allocate(allocator, b.constant_section_size));
      if (!copy) return no_memory(b.constant_section_size, "its constants");
      std::memcpy(copy, section, b.constant_section_size);
      section = copy;
    }
    std::vector<void*> constant(b.constants.size(), nullptr);
    for (int pass = 0; pass < 2; ++pass) {  // stored constants, then those derived from them
      for (size_t i = 0; i < b.constants.size(); ++i) {
        const Constant& c = b.constants[i];
        if (bool(c.derive) != bool(pass)) continue;
        if (!c.derive && c.stored == c.dtype && c.tail == kNone32) {
          constant[i] = const_cast<uint8_t*>(section + c.offset);
          continue;
        }
        uint64_t bytes = c.numel * element_size(c.dtype);
        auto* out = static_cast<uint8_t*>(allocate(allocator, bytes));
        if (!out) return no_memory(bytes, ("constant '" + c.name + "'").c_str());
        if (c.derive) {
          const Constant& w = b.constants[c.source_a];
          const Constant& s = b.constants[c.source_b];
          int4_colsum(c, w, static_cast<const int8_t*>(constant[c.source_a]), s,
                      static_cast<const float*>(constant[c.source_b]), reinterpret_cast<float*>(out));
        } else {
          rebuild(c, section + c.offset, out);
        }
        constant[i] = out;
      }
    }
    // The entry's arguments.
    size_t n_io = size_t(b.n_inputs + b.n_outputs);
    d->ptrs = static_cast<void**>(allocate(allocator, sizeof(void*) * b.args.size()));
    d->ranges = static_cast<uintptr_t*>(allocate(allocator, 2 * sizeof(uintptr_t) * n_io));
    d->barrier = static_cast<int32_t*>(allocate(allocator, kAlign));
    if (!d->ptrs || !d->ranges || !d->barrier) return no_memory(sizeof(void*) * b.args.size(), "its arguments");
    std::memset(d->barrier, 0, kAlign);
    d->io_slot.assign(n_io, 0);
    d->io_arg.assign(n_io, nullptr);
    for (size_t k = 0; k < b.args.size(); ++k) {
      const Arg& a = b.args[k];
      d->ptrs[k] = nullptr;
      switch (a.kind) {
        case ArgKind::kInput:
        case ArgKind::kOutput: {
          size_t io = a.kind == ArgKind::kInput ? a.index : size_t(b.n_inputs) + a.index;
          d->io_slot[io] = int(k);
          d->io_arg[io] = &a;
          break;
        }
        case ArgKind::kConstant:
          d->ptrs[k] = constant[a.index];
          break;
        case ArgKind::kDims:
          d->dims[a.index] = static_cast<int64_t*>(allocate(allocator, a.nbytes));
          if (!d->dims[a.index]) return no_memory(a.nbytes, "its dims");
          d->ptrs[k] = d->dims[a.index];
          break;
        case ArgKind::kScratch:
          d->scratch = static_cast<uint8_t*>(allocate(allocator, a.nbytes));
          if (!d->scratch) return no_memory(a.nbytes, "its scratch buffer");
          d->ptrs[k] = d->scratch;
          break;
      }
    }
    // Threads: the blob's count (or the compile spec's), at most the threadpool's.
    int want = int(b.num_threads);
    std::string spec = spec_value(specs, "num_threads");
    if (!spec.empty()) want = std::atoi(spec.c_str());
    want = want < 1 ? 1 : want > 1024 ? 1024 : want;
#ifdef ET_USE_THREADPOOL
    int pool = int(executorch::extension::get_thread_count());
#else
    int pool = 1;
#endif
    d->threads = b.threaded ? (want < pool ? want : pool) : 1;
    if (b.threaded && want > d->threads) {
      ET_LOG(Info, "etc cpu backend: threads: %d of %d (ExecuTorch's threadpool has %d)", d->threads, want, pool);
    }
    if (d->threads > 1 && spec_value(specs, "calibrate_threads") != "0") calibrate_threads(d);
    // Profiled blobs: the counter's rate, and each region's ops as the metadata of its events.
    if (!b.regions.empty()) {
      std::string counter = calibrate_counter(d);
      if (!counter.empty()) return fail(Error::NotSupported, "cpu delegate: " + counter);
      for (const Region& r : b.regions) {
        std::vector<uint8_t> meta(kOpsTag, kOpsTag + sizeof(kOpsTag));
        for (uint32_t op : r.ops) {
          uint8_t bytes[4];
          std::memcpy(bytes, &op, 4);
          meta.insert(meta.end(), bytes, bytes + 4);
        }
        d->region_metadata.push_back(std::move(meta));
      }
    }
    return Error::Ok;
  }

  static void report_regions(BackendExecutionContext& context, Delegate* d, int64_t start) {
#ifdef ET_EVENT_TRACER_ENABLED
    executorch::runtime::EventTracer* tracer = context.event_tracer();
    if (!tracer) return;
    const Blob& b = d->blob;
    int64_t reads[1 + 4096];
    size_t count = b.regions.size() + 1;
    if (count > sizeof(reads) / sizeof(reads[0])) count = sizeof(reads) / sizeof(reads[0]);
    std::memcpy(reads, d->scratch + b.profile_offset, 8 * count);
    for (size_t i = 0; i + 1 < count; ++i) {
      auto at = [&](size_t k) { return int64_t(double(reads[k] - reads[0]) * d->ticks_per_count) + start; };
      const std::vector<uint8_t>& meta = d->region_metadata[i];
      tracer->log_profiling_delegate(b.regions[i].name.c_str(), -1, et_timestamp_t(at(i)), et_timestamp_t(at(i + 1)),
                                     meta.data(), meta.size());
    }
#else
    (void)context;
    (void)d;
    (void)start;
#endif
  }
};

CpuBackend backend;
const Error registration = executorch::runtime::register_backend({"cpu", &backend});

}  // namespace
}  // namespace etc_backend

// Whether the backend registered itself (0: yes; else ExecuTorch's Error, e.g. another library
// registered "cpu" first). etc.runtime.executorch_backend.load() asks after loading the library.
extern "C" __attribute__((visibility("default"))) int etc_cpu_backend_registration() { return static_cast<int>(etc_backend::registration); }
