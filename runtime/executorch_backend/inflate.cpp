// Canonical-Huffman inflate (RFC 1951) inside a zlib wrapper (RFC 1950). See inflate.h for why.
#include "inflate.h"

namespace etc_backend {
namespace {

constexpr int kMaxBits = 15;        // longest deflate code
constexpr int kMaxLiterals = 288;   // literal/length symbols (286 used, 288 in the fixed code)
constexpr int kMaxDistances = 32;   // distance symbols (30 used)

struct Huffman {
  uint16_t count[kMaxBits + 1];  // how many codes of each length
  uint16_t symbol[kMaxLiterals];  // symbols ordered by code
};

struct State {
  const uint8_t* in;
  size_t in_size;
  size_t in_pos = 0;
  uint32_t bit_buffer = 0;
  int bit_count = 0;
  uint8_t* out;
  size_t out_capacity;
  size_t out_pos = 0;
  const char* error = nullptr;

  // The next `need` bits, least significant first; on running out, sets `error` and returns 0.
  uint32_t bits(int need) {
    uint32_t value = bit_buffer;
    while (bit_count < need) {
      if (in_pos == in_size) {
        error = "the deflate stream ends early";
        return 0;
      }
      value |= static_cast<uint32_t>(in[in_pos++]) << bit_count;
      bit_count += 8;
    }
    bit_buffer = value >> need;
    bit_count -= need;
    return value & ((1u << need) - 1);
  }
};

// Builds `h` from `n` code lengths; returns false for an over-subscribed set (an incomplete set is
// allowed, as zlib allows a single distance code).
bool build(Huffman* h, const uint8_t* lengths, int n) {
  for (int len = 0; len <= kMaxBits; ++len) h->count[len] = 0;
  for (int s = 0; s < n; ++s) h->count[lengths[s]]++;
  if (h->count[0] == n) return true;  // no codes: decoding any symbol fails
  int left = 1;
  for (int len = 1; len <= kMaxBits; ++len) {
    left <<= 1;
    left -= h->count[len];
    if (left < 0) return false;
  }
  uint16_t offsets[kMaxBits + 1];
  offsets[1] = 0;
  for (int len = 1; len < kMaxBits; ++len) offsets[len + 1] = offsets[len] + h->count[len];
  for (int s = 0; s < n; ++s) {
    if (lengths[s] != 0) h->symbol[offsets[lengths[s]]++] = static_cast<uint16_t>(s);
  }
  return true;
}

// Decodes one symbol with `h` (codes read most significant bit first), or -1 with `error` set.
int decode(State* st, const Huffman* h) {
  int code = 0, first = 0, index = 0;
  for (int len = 1; len <= kMaxBits; ++len) {
    code |= static_cast<int>(st->bits(1));
    if (st->error) return -1;
    int count = h->count[len];
    if (code - count < first) return h->symbol[index + (code - first)];
    index += count;
    first += count;
    first <<= 1;
    code <<= 1;
  }
  st->error = "an invalid Huffman code in the deflate stream";
  return -1;
}

const uint16_t kLengthBase[29] = {3,  4,  5,  6,  7,  8,  9,  10, 11,  13,  15,  17,  19,  23, 27,
                                  31, 35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258};
const uint8_t kLengthExtra[29] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0};
const uint16_t kDistanceBase[30] = {1,   2,   3,   4,   5,   7,    9,    13,   17,   25,   33,   49,   65,    97,    129,
                                    193, 257, 385, 513, 769, 1025, 1537, 2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577};
const uint8_t kDistanceExtra[30] = {0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13};

// The literals and matches of one compressed block.
void codes(State* st, const Huffman* lengths, const Huffman* distances) {
  for (;;) {
    int symbol = decode(st, lengths);
    if (st->error) return;
    if (symbol < 256) {
      if (st->out_pos == st->out_capacity) {
        st->error = "the deflate stream inflates past its bound";
        return;
      }
      st->out[st->out_pos++] = static_cast<uint8_t>(symbol);
      continue;
    }
    if (symbol == 256) return;  // end of block
    symbol -= 257;
    if (symbol >= 29) {
      st->error = "an invalid length symbol in the deflate stream";
      return;
    }
    size_t length = kLengthBase[symbol] + st->bits(kLengthExtra[symbol]);
    int dsym = decode(st, distances);
    if (st->error) return;
    if (dsym >= 30) {
      st->error = "an invalid distance symbol in the deflate stream";
      return;
    }
    size_t distance = kDistanceBase[dsym] + st->bits(kDistanceExtra[dsym]);
    if (st->error) return;
    if (distance > st->out_pos) {
      st->error = "a back reference before the start of the output";
      return;
    }
    if (length > st->out_capacity - st->out_pos) {
      st->error = "the deflate stream inflates past its bound";
      return;
    }
    uint8_t* to = st->out + st->out_pos;
    const uint8_t* from = to - distance;
    for (size_t i = 0; i < length; ++i) to[i] = from[i];  // byte by byte: the copy may overlap itself
    st->out_pos += length;
  }
}

void stored(State* st) {
  st->bit_buffer = 0;  // to the next byte boundary
  st->bit_count = 0;
  if (st->in_size - st->in_pos < 4) {
    st->error = "the deflate stream ends early";
    return;
  }
  size_t len = st->in[st->in_pos] | (st->in[st->in_pos + 1] << 8);
  size_t nlen = st->in[st->in_pos + 2] | (st->in[st->in_pos + 3] << 8);
  st->in_pos += 4;
  if (len != (~nlen & 0xFFFF)) {
    st->error = "a stored block's length check fails";
    return;
  }
  if (len > st->in_size - st->in_pos) {
    st->error = "the deflate stream ends early";
    return;
  }
  if (len > st->out_capacity - st->out_pos) {
    st->error = "the deflate stream inflates past its bound";
    return;
  }
  for (size_t i = 0; i < len; ++i) st->out[st->out_pos + i] = st->in[st->in_pos + i];
  st->in_pos += len;
  st->out_pos += len;
}

struct FixedCodes {
  Huffman lengths, distances;
  FixedCodes() {
    uint8_t l[kMaxLiterals];
    int s = 0;
    for (; s < 144; ++s) l[s] = 8;
    for (; s < 256; ++s) l[s] = 9;
    for (; s < 280; ++s) l[s] = 7;
    for (; s < kMaxLiterals; ++s) l[s] = 8;
    build(&lengths, l, kMaxLiterals);
    for (s = 0; s < 30; ++s) l[s] = 5;
    build(&distances, l, 30);
  }
};

void fixed(State* st) {
  static const FixedCodes tables;  // built once (thread-safe static initialization)
  codes(st, &tables.lengths, &tables.distances);
}

void dynamic(State* st) {
  static const uint8_t kOrder[19] = {16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15};
  int nlen = static_cast<int>(st->bits(5)) + 257;
  int ndist = static_cast<int>(st->bits(5)) + 1;
  int ncode = static_cast<int>(st->bits(4)) + 4;
  if (st->error) return;
  if (nlen > 286 || ndist > 30) {
    st->error = "a dynamic block with too many codes";
    return;
  }
  uint8_t lengths[kMaxLiterals + kMaxDistances] = {0};
  for (int i = 0; i < ncode; ++i) lengths[kOrder[i]] = static_cast<uint8_t>(st->bits(3));
  if (st->error) return;
  Huffman code_lengths;
  if (!build(&code_lengths, lengths, 19)) {
    st->error = "an over-subscribed code-length code";
    return;
  }
  for (int i = 0; i < 19; ++i) lengths[i] = 0;
  int index = 0;
  while (index < nlen + ndist) {
    int symbol = decode(st, &code_lengths);
    if (st->error) return;
    if (symbol < 16) {
      lengths[index++] = static_cast<uint8_t>(symbol);
      continue;
    }
    uint8_t value = 0;
    int repeat;
    if (symbol == 16) {
      if (index == 0) {
        st->error = "a repeated code length with nothing before it";
        return;
      }
      value = lengths[index - 1];
      repeat = 3 + static_cast<int>(st->bits(2));
    } else if (symbol == 17) {
      repeat = 3 + static_cast<int>(st->bits(3));
    } else {
      repeat = 11 + static_cast<int>(st->bits(7));
    }
    if (st->error) return;
    if (index + repeat > nlen + ndist) {
      st->error = "code lengths past the number of codes";
      return;
    }
    while (repeat--) lengths[index++] = value;
  }
  if (lengths[256] == 0) {
    st->error = "a dynamic block without an end-of-block code";
    return;
  }
  Huffman literal_lengths, distances;
  if (!build(&literal_lengths, lengths, nlen) || !build(&distances, lengths + nlen, ndist)) {
    st->error = "an over-subscribed literal or distance code";
    return;
  }
  codes(st, &literal_lengths, &distances);
}

uint32_t adler32(const uint8_t* data, size_t size) {
  uint32_t a = 1, b = 0;
  while (size > 0) {
    size_t chunk = size < 5552 ? size : 5552;  // the most bytes before b can overflow 32 bits
    size -= chunk;
    while (chunk--) {
      a += *data++;
      b += a;
    }
    a %= 65521;
    b %= 65521;
  }
  return (b << 16) | a;
}

}  // namespace

const char* inflate_zlib(const uint8_t* in, size_t in_size, uint8_t* out, size_t out_capacity, size_t* out_size) {
  *out_size = 0;
  if (in_size < 6) return "a zlib stream is at least 6 bytes";
  if ((in[0] & 0x0F) != 8 || (in[0] >> 4) > 7 || ((in[0] << 8) | in[1]) % 31 != 0) return "not a zlib stream header";
  if (in[1] & 0x20) return "a zlib stream with a preset dictionary";
  State st;
  st.in = in + 2;
  st.in_size = in_size - 2;
  st.out = out;
  st.out_capacity = out_capacity;
  int last;
  do {
    last = static_cast<int>(st.bits(1));
    int type = static_cast<int>(st.bits(2));
    if (st.error) return st.error;
    if (type == 0) {
      stored(&st);
    } else if (type == 1) {
      fixed(&st);
    } else if (type == 2) {
      dynamic(&st);
    } else {
      return "a deflate block of the reserved type 3";
    }
    if (st.error) return st.error;
  } while (!last);
  // The Adler-32 follows the deflate data at the next byte boundary (unused bits of the last byte
  // are padding), and ends the stream.
  if (st.in_size - st.in_pos != 4) {
    return st.in_size - st.in_pos < 4 ? "the zlib stream ends before its checksum"
                                      : "bytes after the end of the zlib stream";
  }
  const uint8_t* c = st.in + st.in_pos;
  uint32_t stored_sum = (uint32_t(c[0]) << 24) | (uint32_t(c[1]) << 16) | (uint32_t(c[2]) << 8) | c[3];
  if (stored_sum != adler32(out, st.out_pos)) return "the zlib stream's Adler-32 does not match";
  *out_size = st.out_pos;
  return nullptr;
}

}  // namespace etc_backend
