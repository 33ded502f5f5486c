// The LazyCache over a listed image source, decoding with the ingest library (dscache_ingest).
#include "lazy_source.h"

#include "dscache/error.h"

#ifdef DSCACHE_TRAIN_HAVE_LAZY
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dscache/checksum.h"
#include "dscache/ingest/image_decode.h"
#include "dscache/ingest/source_decoder.h"
#include "dscache/ingest/source_list.h"
#include "dscache/lazy_cache.h"
#endif

namespace dscache {
namespace train {

#ifdef DSCACHE_TRAIN_HAVE_LAZY

bool lazy_source_supported() { return true; }

namespace {

// Drops the entries `dscache build` would skip before decoding anything: not a regular file, an
// empty file, or no known image format in its first bytes (a README, .DS_Store, a half-copied
// file). Says how many, and the first few, on stderr. Listing order is kept, so the choice is
// the same on every run and rank. A file that passes and fails to decode later is still an error
// naming it (its pixels cannot be made up).
void skip_non_images(SourceListing* listing) {
  SourceEntries kept;
  kept.set_path_prefix(listing->entries.path_prefix());
  std::vector<std::string> why;
  uint64_t skipped = 0;
  for (const SourceEntry& e : listing->entries) {
    std::string reason;
    struct stat st {};
    if (!e.bad.empty()) {  // a table row the listing could not make a sample of
      reason = e.bad;
    } else if (::stat(e.path.c_str(), &st) != 0) {
      reason = std::strerror(errno);
    } else if (!S_ISREG(st.st_mode)) {
      reason = "not a regular file";
    } else if (st.st_size == 0) {
      reason = "zero-byte file";
    } else {
      uint8_t head[64];
      const int fd = ::open(e.path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
      ssize_t n = -1;
      if (fd >= 0) {
        n = ::read(fd, head, sizeof head);
        ::close(fd);
      }
      if (n < 0) {
        reason = std::strerror(errno);
      } else if (sniff_format(head, static_cast<size_t>(n)) == ImageFormat::kUnknown) {
        reason = "not an image (unknown format)";
      }
    }
    if (reason.empty()) {
      kept.push_back(e);
      continue;
    }
    if (why.size() < 3) why.push_back(e.path + ": " + reason);
    ++skipped;
  }
  listing->entries = std::move(kept);
  if (skipped == 0) return;
  std::string list;
  for (const auto& w : why) list += "\n  " + w;
  std::fprintf(stderr,
               "dscache-train: --lazy-cache: skipped %llu of %zu listed entries, as dscache build "
               "does%s%s\n",
               static_cast<unsigned long long>(skipped),
               static_cast<size_t>(listing->entries.size() + skipped), list.c_str(),
               skipped > why.size() ? "\n  ..." : "");
}

}  // namespace

LazySource open_lazy_source(const LazySourceOptions& o) {
  if (o.size == 0)
    throw Error(ErrorKind::kInvalidArgument, "", "--image-size: required with --lazy-cache");
  if (o.channels != 1 && o.channels != 3) {
    throw Error(ErrorKind::kInvalidArgument, "", "--channels: 1 or 3");
  }
  auto listing = std::make_shared<SourceListing>(list_source(o.source, SourceOptions{}));
  if (listing->kind == "idx") {
    throw Error(
        ErrorKind::kInvalidArgument, o.source,
        "--lazy-cache is for image folders and lists; build idx files with `dscache build`");
  }
  skip_non_images(listing.get());
  if (listing->entries.empty()) throw Error(ErrorKind::kNotFound, o.source, "no images listed");
  BuildRecipe made;  // size x size center crops, refusing images over DecodeOptions' pixel limit
  made.height = made.width = o.size;
  made.channels = o.channels;
  made.resize = ResizePolicy::kCrop;
  made.max_pixels = DecodeOptions{}.max_pixels;
  const RecipeDecoder decoder(made, Layout::kFixed);
  std::vector<int64_t> labels(listing->entries.size());
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = listing->entries.label(i);
  const uint64_t recipe[3] = {o.size, o.channels, 1 /* crop */};
  LazyCacheOptions lo;
  lo.source_digest = listing->digest ^ xxh64(recipe, sizeof recipe);
  auto decode = [listing, decoder](uint64_t i, uint8_t* out, std::string* reason) {
    // The ingest library's reader: regular files only (a FIFO is an error, not a hang), and
    // one buffer per thread instead of one allocation per sample. Not checked against the
    // listing's size and mtime (nullptr), unlike a build's reads.
    const std::string path = listing->entries.path(i);
    std::string why;
    if (decoder.decode_file(path, nullptr, out, &why)) return true;
    *reason = path + ": " + why;
    return false;
  };
  LazySource s;
  s.source =
      LazyCache::open(o.cache_file, listing->entries.size(),
                      SampleShape{o.size, o.size, o.channels}, std::move(labels), decode, lo);
  s.classes = listing->classes;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(lo.source_digest));
  s.identity.content = hex;
  s.identity.recipe = "lazy " + listing->kind + " " + o.source + ", " +
                      std::to_string(listing->entries.size()) + " entries, " +
                      std::to_string(o.size) + "x" + std::to_string(o.size) + "x" +
                      std::to_string(o.channels) + " crop";
  return s;
}

#else

bool lazy_source_supported() { return false; }

LazySource open_lazy_source(const LazySourceOptions&) {
  throw Error(ErrorKind::kUnsupported, "",
              "--lazy-cache needs a dscache-train built with the ingest library (OpenCV)");
}

#endif

}  // namespace train
}  // namespace dscache
