// Loading a cpu blob's pre-linked image (targets/cpu/image.py): the C++ twin of etc's Python loader
// (targets/cpu/runtime.py `map_image`).
//
// Map the image's size read-write (anonymous memory), inflate its bytes into it, add the base
// address to each fixup, write each import's address into its GOT slot, then give each segment its
// protection: code read+execute, constants read-only (W^X: no page is ever writable and
// executable). Where the system refuses to make memory that was writable executable (an SELinux
// policy without `execmem`, PaX MPROTECT, iOS), `mprotect` fails: the load is an error that says
// so, and the code is never run from writable memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "blob.h"

namespace etc_backend {

struct LoadedImage {
  uint8_t* base = nullptr;
  size_t size = 0;
};

// The address of C library function `name` (image.IMPORTS), or nullptr for any other name.
void* import_address(const std::string& name);

// Maps `blob`'s image (blob already checked by parse_blob). On failure returns what went wrong and
// leaves nothing mapped; `*refused` is set when the system refused executable memory (W^X policy).
std::string map_image(const Blob& blob, LoadedImage* out, bool* refused);

void unmap_image(LoadedImage* image);

}  // namespace etc_backend
