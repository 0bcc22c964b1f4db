// A small, bounds-checked zlib (RFC 1950) / deflate (RFC 1951) decoder for the cpu blob's deflated
// sections.
//
// Why not the system zlib: the backend is built for every target ExecuTorch runs on, cross-compiled
// too, and Debian's AArch64 cross toolchain has no zlib (nor does the AArch64 ExecuTorch wheel);
// a blob's deflated sections are small (its code and table: kilobytes to a few MB, decoded once at
// init), so a plain canonical-Huffman decoder is fast enough and keeps the backend's only
// dependency ExecuTorch itself. Every read of the input and write of the output is checked: a
// damaged stream (which the blob's CRC already rules out, unless the blob was made by hand) is an
// error, never a read or write out of bounds.
#pragma once

#include <cstddef>
#include <cstdint>

namespace etc_backend {

// Inflates the zlib stream `in[0, in_size)` into `out[0, out_capacity)`. The stream must be one
// whole zlib stream (header, deflate data, Adler-32 that matches) with nothing after it, and
// inflate to at most `out_capacity` bytes; `*out_size` is how many it did. Returns nullptr on
// success, else a static message saying what is wrong.
const char* inflate_zlib(const uint8_t* in, size_t in_size, uint8_t* out, size_t out_capacity, size_t* out_size);

}  // namespace etc_backend
