// The cpu blob (format version 4, targets/cpu/blob.py), read and checked for the ExecuTorch backend.
//
// `parse_blob` makes every check etc's Python reader makes, in the same order: the CRC first (so
// nothing of a damaged blob is trusted), then the header's sections, the table (every count, index,
// pool reference and code), the metadata the loader relies on (argument shapes and kinds, constants
// inside the constant section, dynamic dims and their `dims` arguments, the profile's counters
// inside the scratch buffer) and the image's promises (segments, entry, fixups and import slots
// inside it). A blob that fails any is an error message, never a read or write out of bounds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace etc_backend {

constexpr uint32_t kBlobVersion = 4;
constexpr int kMaxRank = 16;
constexpr uint32_t kNone32 = 0xFFFFFFFFu;
constexpr uint16_t kMachineX86_64 = 62;
constexpr uint16_t kMachineAArch64 = 183;

enum class ArgKind : uint8_t { kInput = 0, kConstant = 1, kOutput = 2, kDims = 3, kScratch = 4 };
enum Protection : uint32_t { kRead = 1, kWrite = 2, kExecute = 4 };

struct Arg {
  ArgKind kind;
  uint8_t dtype;  // ExecuTorch ScalarType
  int rank;
  uint32_t index;  // input/output position, constant number, dims 0 (in) / 1 (out)
  uint32_t dynamic;  // bit d: dim d is given at run time
  int64_t sizes[kMaxRank];  // upper bounds of dynamic dims
  uint64_t nbytes;  // at the upper bounds
};

struct Constant {
  std::string name;
  uint8_t dtype, stored;  // stored: the narrower type it is stored as (== dtype: as it is)
  int rank;
  uint8_t derive;  // 0, or 1: int4_colsum of constants source_a (weight panels) and source_b (scales)
  int64_t sizes[kMaxRank];
  uint32_t tail;  // columns of the last panel stored (kNone32: not trimmed)
  uint32_t source_a, source_b;
  uint64_t offset, nbytes;  // in the constant section
  uint64_t numel;
};

struct Feature {
  std::string name;
  uint8_t kind, reg, bit;  // kind: 0 no probe, 1 x86 CPUID, 2 Linux HWCAP
  uint32_t leaf, subleaf, os_state;
};

struct Segment {
  uint64_t offset, size;
  uint32_t prot;
};

struct Import {
  uint64_t offset;
  std::string name;
};

struct Region {
  std::string name;
  std::vector<uint32_t> ops;
};

struct Blob {
  uint16_t machine = 0;
  bool threaded = false;
  uint32_t num_threads = 1;
  std::string triple;
  std::vector<Feature> features;
  std::vector<Arg> args;
  std::vector<Constant> constants;
  std::vector<std::pair<uint32_t, uint32_t>> in_place;  // (output, input)
  std::vector<Region> regions;
  int64_t profile_offset = -1;  // bytes into the scratch buffer; -1: not profiled
  int n_inputs = 0, n_outputs = 0;
  // The image (image.py): where it is described and where its deflated bytes are.
  uint64_t image_size = 0, image_align = 0, entry = 0, image_stored = 0;
  std::vector<Segment> segments;
  std::vector<uint64_t> fixups;
  std::vector<Import> imports;
  const uint8_t* image_stream = nullptr;
  size_t image_stream_size = 0;
  const uint8_t* constant_section = nullptr;
  size_t constant_section_size = 0;
  uint64_t constant_section_offset = 0;  // from the blob's start (64-byte aligned there)
};

// Bytes of one element of ScalarType `dtype` (0: not a type a cpu blob uses).
size_t element_size(uint8_t dtype);

// Checks and reads `data[0, size)`; returns "" or what is wrong (the blob is not to be used).
// `out` points into `data`, which must outlive it.
std::string parse_blob(const uint8_t* data, size_t size, Blob* out);

// CRC-32 (zlib's polynomial) of `data`, continuing from `crc`.
uint32_t crc32(uint32_t crc, const uint8_t* data, size_t size);

}  // namespace etc_backend
