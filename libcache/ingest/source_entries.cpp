// SourceEntries: the compact store of a listing's entries (dscache/ingest/source_list.h).
#include <algorithm>
#include <cstring>
#include <limits>
#include <stdexcept>

#include "dscache/ingest/source_list.h"

namespace dscache {

namespace {

constexpr size_t kBlockBytes = size_t{1} << 20;  // names and paths, 1 MiB at a time

const std::string& empty_string() {
  static const std::string empty;
  return empty;
}

}  // namespace

void SourceEntries::push_back(const SourceEntry& e) {
  if (e.label < std::numeric_limits<int32_t>::min() ||
      e.label > std::numeric_limits<int32_t>::max()) {
    // Labels are class indexes, and listers refuse more than 2^20 unnamed classes.
    throw std::length_error("SourceEntries: label out of int32 range");
  }
  if (e.name.size() >= kPrefixed || e.path.size() >= kPrefixed) {
    throw std::length_error("SourceEntries: name or path of 4 GiB or more");
  }
  if (records_.size() >= std::numeric_limits<uint32_t>::max()) {
    throw std::length_error("SourceEntries: more than 2^32 entries");
  }
  const bool prefixed = e.path.size() == prefix_.size() + e.name.size() &&
                        e.path.compare(0, prefix_.size(), prefix_) == 0 &&
                        e.path.compare(prefix_.size(), std::string::npos, e.name) == 0;
  const size_t bytes = e.name.size() + (prefixed ? 0 : e.path.size());
  if (blocks_.empty() || block_sizes_.back() - used_ < bytes) {
    const size_t n = std::max(kBlockBytes, bytes);
    blocks_.emplace_back(new char[n]);
    block_sizes_.push_back(n);
    used_ = 0;
  }
  Record r;
  r.block = static_cast<uint32_t>(blocks_.size() - 1);
  r.offset = static_cast<uint32_t>(used_);
  r.name_len = static_cast<uint32_t>(e.name.size());
  r.path_len = prefixed ? kPrefixed : static_cast<uint32_t>(e.path.size());
  char* at = blocks_.back().get() + used_;
  if (!e.name.empty()) std::memcpy(at, e.name.data(), e.name.size());
  if (!prefixed && !e.path.empty()) std::memcpy(at + e.name.size(), e.path.data(), e.path.size());
  used_ += bytes;
  r.size = e.size;
  r.mtime_ns = e.mtime_ns;
  r.label = static_cast<int32_t>(e.label);
  if (!e.etag.empty() || !e.bad.empty()) {
    r.extra = static_cast<uint32_t>(extras_.size());
    extras_.push_back(Extra{e.etag, e.bad});
  }
  records_.push_back(r);
}

std::string_view SourceEntries::name(size_t i) const {
  const Record& r = records_[i];
  return r.name_len ? std::string_view(text(r), r.name_len) : std::string_view();
}

std::string SourceEntries::path(size_t i) const {
  const Record& r = records_[i];
  if (r.path_len == kPrefixed) {
    std::string p;
    p.reserve(prefix_.size() + r.name_len);
    p += prefix_;
    p.append(text(r), r.name_len);
    return p;
  }
  return r.path_len ? std::string(text(r) + r.name_len, r.path_len) : std::string();
}

const std::string& SourceEntries::etag(size_t i) const {
  const Record& r = records_[i];
  return r.extra == kNoExtra ? empty_string() : extras_[r.extra].etag;
}

const std::string& SourceEntries::bad(size_t i) const {
  const Record& r = records_[i];
  return r.extra == kNoExtra ? empty_string() : extras_[r.extra].bad;
}

void SourceEntries::set_bad(size_t i, std::string why) {
  Record& r = records_[i];
  if (r.extra == kNoExtra) {
    if (why.empty()) return;
    r.extra = static_cast<uint32_t>(extras_.size());
    extras_.push_back(Extra{});
  }
  extras_[r.extra].bad = std::move(why);
}

SourceEntry SourceEntries::operator[](size_t i) const {
  const Record& r = records_[i];
  SourceEntry e;
  e.path = path(i);
  e.name.assign(name(i));
  e.label = r.label;
  e.size = r.size;
  e.mtime_ns = r.mtime_ns;
  if (r.extra != kNoExtra) {
    e.etag = extras_[r.extra].etag;
    e.bad = extras_[r.extra].bad;
  }
  return e;
}

uint64_t SourceEntries::bytes_held() const {
  uint64_t n = records_.size() * sizeof(Record) + prefix_.capacity();
  for (size_t b : block_sizes_) n += b;
  n += extras_.capacity() * sizeof(Extra);
  for (const Extra& x : extras_) n += x.etag.capacity() + x.bad.capacity();
  return n;
}

}  // namespace dscache
