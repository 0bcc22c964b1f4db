// Loading a cpu blob's image (see image_loader.h).
#include "image_loader.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "inflate.h"

namespace etc_backend {

std::string map_image(const Blob& blob, LoadedImage* out, bool* refused) {
  *refused = false;
  long page = sysconf(_SC_PAGESIZE);
  if (page <= 0 || blob.image_align % uint64_t(page)) {
    return "its image is laid out for " + std::to_string(blob.image_align) + "-byte pages; this system's pages are " +
           std::to_string(page) + " bytes";
  }
  void* mapped = mmap(nullptr, blob.image_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapped == MAP_FAILED) return "cannot map " + std::to_string(blob.image_size) + " bytes for its code";
  LoadedImage image{static_cast<uint8_t*>(mapped), size_t(blob.image_size)};
  auto fail = [&](const std::string& message) {
    unmap_image(&image);
    return message;
  };
  size_t stored = 0;
  if (const char* error = inflate_zlib(blob.image_stream, blob.image_stream_size, image.base, blob.image_stored, &stored)) {
    return fail(std::string("the image section: ") + error);
  }
  if (stored != blob.image_stored) return fail("the image section inflates to fewer bytes than its table says");
  for (uint64_t offset : blob.fixups) {  // RELATIVE: the word holds an image offset
    uint64_t value;
    std::memcpy(&value, image.base + offset, 8);
    if (value >= blob.image_size) return fail("a fixup points outside the image");
    value += reinterpret_cast<uint64_t>(image.base);
    std::memcpy(image.base + offset, &value, 8);
  }
  for (const Import& i : blob.imports) {
    void* address = import_address(i.name);
    if (!address) return fail("its code imports '" + i.name + "', which is not a libc/libm function it may call");
    std::memcpy(image.base + i.offset, &address, 8);
  }
  for (const Segment& s : blob.segments) {
    if (s.prot & kExecute) __builtin___clear_cache(reinterpret_cast<char*>(image.base + s.offset),
                                                   reinterpret_cast<char*>(image.base + s.offset + s.size));
  }
  for (const Segment& s : blob.segments) {
    int prot = PROT_READ | (s.prot & kWrite ? PROT_WRITE : 0) | (s.prot & kExecute ? PROT_EXEC : 0);
    if (mprotect(image.base + s.offset, s.size, prot) != 0) {
      int error = errno;
      if (prot & PROT_EXEC && (error == EACCES || error == EPERM)) {
        *refused = true;
        return fail("this system refuses to make memory that was writable executable (W^X policy: SELinux "
                    "without execmem, PaX MPROTECT, or a platform without JIT rights), so the cpu delegate's code "
                    "cannot be loaded here (errno " + std::to_string(error) + ")");
      }
      return fail("mprotect of its image failed (errno " + std::to_string(error) + ")");
    }
  }
  *out = image;
  return "";
}

void unmap_image(LoadedImage* image) {
  if (image->base) munmap(image->base, image->size);
  image->base = nullptr;
  image->size = 0;
}

}  // namespace etc_backend
