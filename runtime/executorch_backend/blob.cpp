// Reading and checking a cpu blob (see blob.h; the format is targets/cpu/blob.py's module docstring).
#include "blob.h"

#include <cstring>
#include <memory>

#include "inflate.h"

namespace etc_backend {
namespace {

constexpr uint8_t kMagic[8] = {'E', 'T', 'C', 'C', 'P', 'U', 0, 1};
constexpr size_t kHeaderSize = 80;
constexpr size_t kCrcAt = 12;
constexpr uint64_t kAlign = 64;
constexpr uint64_t kMaxTable = 64ull << 20;  // blob.MAX_INFLATED
constexpr uint64_t kMaxImage = 1ull << 30;   // image.MAX_IMAGE
constexpr int64_t kMaxDim = int64_t(1) << 40;

std::string str(const char* a, const std::string& b = "", const char* c = "") { return std::string(a) + b + c; }

template <typename T>
T load(const uint8_t* p) {
  T value;
  std::memcpy(&value, p, sizeof(T));  // little endian: the only byte order the loaders run on
  return value;
}

// A bounds-checked reader of the table's fixed-size fields.
struct Cursor {
  const uint8_t* data;
  size_t size;
  size_t at = 0;
  bool ok = true;
  template <typename T>
  T take() {
    if (!ok || size - at < sizeof(T)) {
      ok = false;
      return T{};
    }
    T value = load<T>(data + at);
    at += sizeof(T);
    return value;
  }
};

// The table's record sizes (blob.TABLE_RECORDS), in list order after the 104-byte head.
enum List { kFeatures, kArgs, kConstants, kInPlace, kRegions, kSegments, kFixups, kImports, kDims, kOps, kLists };
constexpr size_t kRecordSize[kLists] = {20, 16, 40, 8, 12, 24, 8, 16, 8, 4};
const char* const kListName[kLists] = {"features", "args", "constants", "in_place", "regions",
                                       "segments", "fixups", "imports", "dims", "ops"};
constexpr size_t kHeadSize = 104;

bool narrower(uint8_t dtype, uint8_t stored) {  // blob._NARROWER: int8/int16 for ints, + float16 for floats
  bool integer = dtype == 3 || dtype == 4;  // int32, int64
  bool floating = dtype == 6 || dtype == 7;  // float32, float64
  if (!integer && !floating) return false;
  bool allowed = stored == 1 || stored == 2 || (floating && stored == 5);
  return allowed && element_size(stored) < element_size(dtype);
}

bool multiply(uint64_t a, uint64_t b, uint64_t* out) { return !__builtin_mul_overflow(a, b, out); }

}  // namespace

size_t element_size(uint8_t dtype) {
  switch (dtype) {
    case 0: case 1: case 11: return 1;  // uint8, int8, bool
    case 2: case 5: case 27: return 2;  // int16, float16, uint16
    case 3: case 6: case 28: return 4;  // int32, float32, uint32
    case 4: case 7: case 29: return 8;  // int64, float64, uint64
    default: return 0;
  }
}

uint32_t crc32(uint32_t crc, const uint8_t* data, size_t size) {
  static const struct Table {
    uint32_t entry[256];
    Table() {
      for (uint32_t n = 0; n < 256; ++n) {
        uint32_t c = n;
        for (int k = 0; k < 8; ++k) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        entry[n] = c;
      }
    }
  } table;
  crc = ~crc;
  for (size_t i = 0; i < size; ++i) crc = table.entry[(crc ^ data[i]) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

std::string parse_blob(const uint8_t* data, size_t size, Blob* out) {
  // Header, version, CRC: nothing else is read before the CRC matches.
  if (size < kHeaderSize) return "the blob is shorter than its 80-byte header";
  if (std::memcmp(data, kMagic, 8) != 0) return "not a cpu blob (bad magic)";
  uint32_t version = load<uint32_t>(data + 8);
  if (version != kBlobVersion) {
    return "cpu blob format version " + std::to_string(version) + " is not supported (this backend reads " +
           std::to_string(kBlobVersion) + "; recompile the model)";
  }
  uint32_t stored_crc = load<uint32_t>(data + kCrcAt);
  const uint8_t zeros[4] = {0, 0, 0, 0};
  uint32_t crc = crc32(0, data, kCrcAt);
  crc = crc32(crc, zeros, 4);
  crc = crc32(crc, data + kCrcAt + 4, size - kCrcAt - 4);
  if (crc != stored_crc) return "checksum mismatch: the cpu blob is corrupted";
  // Sections: table, image, info, constants, in this order, inside the blob; constants 64-aligned.
  uint64_t place[8];
  for (int k = 0; k < 8; ++k) place[k] = load<uint64_t>(data + 16 + 8 * k);
  uint64_t end = kHeaderSize;
  const char* names[4] = {"table", "image", "info", "constants"};
  for (int k = 0; k < 4; ++k) {
    uint64_t off = place[2 * k], n = place[2 * k + 1];
    if (off < end || off > size || n > size - off || (k == 3 && off % kAlign)) {
      return str("the ", names[k], " section is misplaced (overlaps another, unaligned, or past the blob's end)");
    }
    end = off + n;
  }
  Blob& b = *out;
  b.image_stream = data + place[2];
  b.image_stream_size = place[3];
  b.constant_section = data + place[6];
  b.constant_section_size = place[7];
  b.constant_section_offset = place[6];

  // The table, inflated: a bound for its size is the deflated size times zlib's best ratio (1032).
  uint64_t table_cap = place[1] * 1032 + 64;
  if (table_cap > kMaxTable) table_cap = kMaxTable;
  std::unique_ptr<uint8_t[]> table(new uint8_t[table_cap]);
  size_t table_size = 0;
  if (const char* error = inflate_zlib(data + place[0], place[1], table.get(), table_cap, &table_size)) {
    return str("the table section: ", error);
  }
  Cursor head{table.get(), table_size};
  if (table_size < kHeadSize) return "the table is shorter than its head";
  if (std::memcmp(table.get(), "ETCT", 4) != 0) return "the table's head magic is wrong";
  head.at = 4;
  b.machine = head.take<uint16_t>();
  uint16_t entry_abi = head.take<uint16_t>();
  b.num_threads = head.take<uint32_t>();
  uint32_t triple = head.take<uint32_t>();
  uint32_t count[kLists];
  for (int k = 0; k < kLists; ++k) count[k] = head.take<uint32_t>();
  uint32_t strings_size = head.take<uint32_t>();
  head.take<uint32_t>();  // reserved
  b.image_size = head.take<uint64_t>();
  b.image_align = head.take<uint64_t>();
  b.entry = head.take<uint64_t>();
  b.profile_offset = head.take<int64_t>();
  b.image_stored = head.take<uint64_t>();
  size_t list_at[kLists];
  size_t at = kHeadSize;
  for (int k = 0; k < kLists; ++k) {
    list_at[k] = at;
    uint64_t bytes;
    if (!multiply(count[k], kRecordSize[k], &bytes) || bytes > table_size - at) {
      return str("table: the ", kListName[k], " records do not fit the table");
    }
    at += bytes;
  }
  if (strings_size != table_size - at) return "table: its string pool's size is not what the head says";
  const char* strings = reinterpret_cast<const char*>(table.get() + at);
  std::string error;
  auto string = [&](uint32_t offset, const char* what) -> std::string {
    const void* nul = offset < strings_size ? std::memchr(strings + offset, 0, strings_size - offset) : nullptr;
    if (!nul) {
      if (error.empty()) error = str("table: ", what, ": a string offset outside its string pool");
      return "";
    }
    return std::string(strings + offset);
  };
  auto record = [&](int list, uint32_t k) {
    return Cursor{table.get() + list_at[list] + size_t(k) * kRecordSize[list], kRecordSize[list]};
  };
  auto dims = [&](uint32_t first, int rank, int64_t* sizes, const char* what) {
    if (rank > kMaxRank || first > count[kDims] || uint32_t(rank) > count[kDims] - first) {
      if (error.empty()) error = str("table: ", what, ": dims outside its dims pool");
      return;
    }
    for (int d = 0; d < rank; ++d) {
      sizes[d] = load<int64_t>(table.get() + list_at[kDims] + 8 * (size_t(first) + d));
      if (sizes[d] < 0 || sizes[d] >= kMaxDim) {
        if (error.empty()) error = str("table: ", what, ": a size out of range");
      }
    }
  };

  if (entry_abi > 1) return "table: an entry ABI that is not 0 (flat) or 1 (threaded)";
  b.threaded = entry_abi == 1;
  if (b.num_threads < 1 || b.num_threads > 1024) return "table: num_threads is not a thread count";
  b.triple = string(triple, "triple");
  for (uint32_t k = 0; k < count[kFeatures]; ++k) {
    Cursor r = record(kFeatures, k);
    Feature f;
    f.name = string(r.take<uint32_t>(), "features");
    f.kind = r.take<uint8_t>();
    f.reg = r.take<uint8_t>();
    f.bit = r.take<uint8_t>();
    r.take<uint8_t>();
    f.leaf = r.take<uint32_t>();
    f.subleaf = r.take<uint32_t>();
    f.os_state = r.take<uint32_t>();
    b.features.push_back(f);
  }
  // Constants.
  for (uint32_t k = 0; k < count[kConstants]; ++k) {
    Cursor r = record(kConstants, k);
    Constant c;
    c.name = string(r.take<uint32_t>(), "constants");
    c.dtype = r.take<uint8_t>();
    c.stored = r.take<uint8_t>();
    c.rank = r.take<uint8_t>();
    c.derive = r.take<uint8_t>();
    uint32_t dims_at = r.take<uint32_t>();
    c.tail = r.take<uint32_t>();
    c.source_a = r.take<uint32_t>();
    c.source_b = r.take<uint32_t>();
    c.offset = r.take<uint64_t>();
    c.nbytes = r.take<uint64_t>();
    std::string where = "constant '" + c.name + "'";
    dims(dims_at, c.rank, c.sizes, where.c_str());
    if (!error.empty()) return error;
    if (element_size(c.dtype) == 0 || element_size(c.stored) == 0) return "table: " + where + ": an unknown dtype";
    c.numel = 1;
    for (int d = 0; d < c.rank; ++d) {
      if (!multiply(c.numel, uint64_t(c.sizes[d]), &c.numel)) return "table: " + where + ": too many elements";
    }
    if (c.derive) {
      if (c.derive != 1 || c.nbytes != 0 || c.dtype != 6 || c.source_a >= count[kConstants] ||
          c.source_b >= count[kConstants]) {
        return "table: " + where + ": not a float32 int4_colsum recipe of two of its constants stored as no bytes";
      }
    } else {
      if (c.stored != c.dtype && !narrower(c.dtype, c.stored)) {
        return "table: " + where + ": stored as a type that is not a narrower one of its own";
      }
      uint64_t stored_count = c.numel;
      if (c.tail != kNone32) {
        if (c.rank != 3 || int64_t(c.tail) >= c.sizes[2] || c.sizes[0] < 1) {
          return "table: " + where + ": its kept columns are not a column count of its last panel";
        }
        stored_count -= uint64_t(c.sizes[1]) * uint64_t(c.sizes[2] - c.tail);
      }
      uint64_t bytes;
      if (c.offset % kAlign || c.offset > b.constant_section_size || c.nbytes > b.constant_section_size - c.offset ||
          !multiply(stored_count, element_size(c.stored), &bytes) || bytes != c.nbytes) {
        return "table: " + where + ": its bytes do not fit the constant section";
      }
    }
    for (const Constant& other : b.constants) {
      if (other.name == c.name) return "table: " + where + " twice";
    }
    b.constants.push_back(c);
  }
  for (const Constant& c : b.constants) {  // after every stored constant (blob._check_int4_colsum)
    if (!c.derive) continue;
    const Constant& w = b.constants[c.source_a];
    const Constant& s = b.constants[c.source_b];
    if (w.derive || s.derive || w.rank != 3 || w.dtype != 1 || s.rank != 3 || s.dtype != 6 || s.sizes[0] != w.sizes[0] ||
        w.sizes[2] != 4 * s.sizes[2] || c.rank != 1 || c.sizes[0] <= 0 || c.sizes[0] > s.sizes[0] * s.sizes[2] ||
        s.sizes[1] < 1 || (w.sizes[1] * 8) % s.sizes[1]) {
      return "table: constant '" + c.name + "': an int4_colsum of constants that cannot give it";
    }
  }
  // Arguments.
  int dynamic_dims[2] = {0, 0};
  bool seen_dims[2] = {false, false}, seen_scratch = false;
  for (uint32_t k = 0; k < count[kArgs]; ++k) {
    Cursor r = record(kArgs, k);
    Arg a;
    uint8_t kind = r.take<uint8_t>();
    a.dtype = r.take<uint8_t>();
    a.rank = r.take<uint8_t>();
    r.take<uint8_t>();
    a.index = r.take<uint32_t>();
    a.dynamic = r.take<uint32_t>();
    uint32_t dims_at = r.take<uint32_t>();
    std::string where = "argument " + std::to_string(k);
    if (kind > 4) return "table: " + where + ": an unknown kind";
    a.kind = static_cast<ArgKind>(kind);
    dims(dims_at, a.rank, a.sizes, where.c_str());
    if (!error.empty()) return error;
    if (element_size(a.dtype) == 0) return "table: " + where + ": an unknown dtype";
    a.nbytes = element_size(a.dtype);
    for (int d = 0; d < a.rank; ++d) {
      if (!multiply(a.nbytes, uint64_t(a.sizes[d]), &a.nbytes)) return "table: " + where + ": too many bytes";
    }
    if (a.rank < 32 ? a.dynamic >> a.rank : 0) return "table: " + where + ": a dynamic dim past its rank";
    switch (a.kind) {
      case ArgKind::kInput:
      case ArgKind::kOutput: {
        int& position = a.kind == ArgKind::kInput ? b.n_inputs : b.n_outputs;
        if (a.index != uint32_t(position)) return "table: " + where + ": not named by its position";
        ++position;
        dynamic_dims[a.kind == ArgKind::kOutput] += __builtin_popcount(a.dynamic);
        break;
      }
      case ArgKind::kConstant: {
        if (a.index >= b.constants.size()) return "table: " + where + ": names a constant it does not have";
        const Constant& c = b.constants[a.index];
        bool same = c.rank == a.rank && c.dtype == a.dtype && !a.dynamic;
        for (int d = 0; same && d < a.rank; ++d) same = c.sizes[d] == a.sizes[d];
        if (!same) return "table: " + where + ": disagrees with its constant's shape or dtype";
        break;
      }
      case ArgKind::kDims:
        if (a.index > 1 || a.dtype != 4 || a.rank != 1 || a.dynamic || seen_dims[a.index]) {
          return "table: " + where + ": a dims argument is one int64 vector 'in' or 'out'";
        }
        seen_dims[a.index] = true;
        break;
      case ArgKind::kScratch:
        if (a.rank != 1 || a.dynamic || seen_scratch) return "table: " + where + ": not one byte vector of scratch";
        seen_scratch = true;
        break;
    }
    b.args.push_back(a);
  }
  for (const Arg& a : b.args) {
    if (a.kind == ArgKind::kDims && a.sizes[0] != dynamic_dims[a.index]) {
      return "table: a dims argument does not hold its dynamic dims";
    }
    if (a.dynamic && !seen_dims[a.kind == ArgKind::kOutput]) {
      return "table: a dynamic input or output without the dims argument that gives its sizes";
    }
  }
  for (uint32_t k = 0; k < count[kInPlace]; ++k) {
    Cursor r = record(kInPlace, k);
    uint32_t output = r.take<uint32_t>(), input = r.take<uint32_t>();
    if (output >= uint32_t(b.n_outputs) || input >= uint32_t(b.n_inputs)) {
      return "table: an in-place pair that is not an output and an input";
    }
    b.in_place.emplace_back(output, input);
  }
  // The profile: its counter reads (one per region, plus the start) inside the scratch buffer.
  for (uint32_t k = 0; k < count[kRegions]; ++k) {
    Cursor r = record(kRegions, k);
    Region region;
    region.name = string(r.take<uint32_t>(), "regions");
    uint32_t ops_at = r.take<uint32_t>(), n_ops = r.take<uint32_t>();
    if (ops_at > count[kOps] || n_ops > count[kOps] - ops_at) return "table: a region's ops outside its ops pool";
    for (uint32_t i = 0; i < n_ops; ++i) region.ops.push_back(load<uint32_t>(table.get() + list_at[kOps] + 4 * (ops_at + i)));
    b.regions.push_back(region);
  }
  if (b.profile_offset >= 0 || !b.regions.empty()) {
    uint64_t scratch = 0;
    for (const Arg& a : b.args) scratch = a.kind == ArgKind::kScratch ? uint64_t(a.sizes[0]) : scratch;
    uint64_t slots = 8 * (uint64_t(b.regions.size()) + 1);
    if (b.regions.empty() || b.profile_offset < 0 || b.profile_offset % 8 || uint64_t(b.profile_offset) > scratch ||
        slots > scratch - uint64_t(b.profile_offset)) {
      return "table: the profile's counters are not inside the scratch buffer";
    }
  }
  // The image.
  for (uint32_t k = 0; k < count[kSegments]; ++k) {
    Cursor r = record(kSegments, k);
    Segment s;
    s.offset = r.take<uint64_t>();
    s.size = r.take<uint64_t>();
    s.prot = r.take<uint32_t>();
    b.segments.push_back(s);
  }
  for (uint32_t k = 0; k < count[kFixups]; ++k) b.fixups.push_back(record(kFixups, k).take<uint64_t>());
  for (uint32_t k = 0; k < count[kImports]; ++k) {
    Cursor r = record(kImports, k);
    Import i;
    i.offset = r.take<uint64_t>();
    i.name = string(r.take<uint32_t>(), "imports");
    b.imports.push_back(i);
  }
  if (!error.empty()) return error;
  bool x86 = b.triple.rfind("x86_64", 0) == 0 || b.triple.rfind("amd64", 0) == 0;
  bool arm64 = b.triple.rfind("aarch64", 0) == 0 || b.triple.rfind("arm64", 0) == 0;
  if (b.machine != kMachineX86_64 && b.machine != kMachineAArch64) {
    if (b.image_size || b.image_stored || !b.segments.empty() || !b.fixups.empty() || !b.imports.empty()) {
      return "image: code for a machine no loader runs must be an empty image";
    }
    return "";  // the caller refuses it by its triple
  }
  if ((b.machine == kMachineX86_64 && !x86) || (b.machine == kMachineAArch64 && !arm64)) {
    return "image: its machine is not the architecture of its triple " + b.triple;
  }
  if (b.image_align != 4096 && b.image_align != 16384 && b.image_align != 65536) {
    return "image: its segment alignment is not a page size";
  }
  if (b.image_size == 0 || b.image_size > kMaxImage || b.image_size % b.image_align) {
    return "image: its size is not a multiple of its alignment up to 1 GiB";
  }
  if (b.image_stored > b.image_size) return "image: it stores more bytes than its size";
  uint64_t segment_end = 0;
  bool entry_in_code = false;
  for (const Segment& s : b.segments) {
    if (s.offset < segment_end || s.offset % b.image_align || s.size == 0 || s.size % b.image_align ||
        s.offset > b.image_size || s.size > b.image_size - s.offset) {
      return "image: a segment overlaps another, is not page aligned, or lies outside the image";
    }
    if (s.prot != kRead && s.prot != (kRead | kExecute) && s.prot != (kRead | kWrite)) {
      return "image: a segment is not read, read+execute or read+write";
    }
    if (s.prot & kExecute && b.entry >= s.offset && b.entry < s.offset + s.size) entry_in_code = true;
    segment_end = s.offset + s.size;
  }
  if (!entry_in_code) return "image: its entry is not in an executable segment";
  auto in_data = [&](uint64_t offset) {
    if (b.image_size < 8 || offset > b.image_size - 8) return false;
    for (const Segment& s : b.segments) {
      if (s.prot & kExecute && offset < s.offset + s.size && s.offset < offset + 8) return false;
    }
    return true;
  };
  for (uint64_t offset : b.fixups) {
    if (!in_data(offset)) return "image: a fixup that is not an 8-byte word in a data segment";
  }
  for (const Import& i : b.imports) {
    if (!in_data(i.offset)) return "image: an import slot that is not an 8-byte word in a data segment";
  }
  return "";
}

}  // namespace etc_backend
