// SourceEntries: the compact store of a listing's entries (dscache/ingest/source_list.h).
#include <algorithm>
#include <cstring>
#include <limits>
#include <stdexcept>

#include "dscache/ingest/source_list.h"

namespace dscache {

namespace {

constexpr size_t kBlockBytes = size_t{1} << 20;         // names and paths, 1 MiB at a time
constexpr int64_t kLabelMost = (int64_t{1} << 30) - 1;  // 31 bits of label_flags
constexpr uint32_t kLabelBits = 0x7fffffffu;

const std::string& empty_string() {
  static const std::string empty;
  return empty;
}

}  // namespace

void SourceEntries::push_back(const SourceEntry& e) {
  if (e.label < -kLabelMost - 1 || e.label > kLabelMost) {
    // Labels are class indexes, and listers refuse more than 2^20 unnamed classes.
    throw std::length_error("SourceEntries: label out of the 31-bit range");
  }
  if (e.name.size() >= kOwnPath || e.path.size() >= kOwnPath) {
    throw std::length_error("SourceEntries: name or path of 2 GiB or more");
  }
  const bool prefixed = e.path.size() == prefix_.size() + e.name.size() &&
                        e.path.compare(0, prefix_.size(), prefix_) == 0 &&
                        e.path.compare(prefix_.size(), std::string::npos, e.name) == 0;
  const size_t bytes = prefixed ? e.name.size() : sizeof(uint32_t) + e.name.size() + e.path.size();
  if (blocks_.empty() || block_sizes_.back() - used_ < bytes) {
    const size_t n = std::max(kBlockBytes, bytes);
    blocks_.emplace_back(new char[n]);
    block_sizes_.push_back(n);
    used_ = 0;
  }
  Record r;
  r.block = static_cast<uint32_t>(blocks_.size() - 1);
  r.offset = static_cast<uint32_t>(used_);
  r.text_len = static_cast<uint32_t>(e.name.size()) | (prefixed ? 0 : kOwnPath);
  char* at = blocks_.back().get() + used_;
  if (!prefixed) {
    const uint32_t path_len = static_cast<uint32_t>(e.path.size());
    std::memcpy(at, &path_len, sizeof path_len);
    at += sizeof path_len;
  }
  if (!e.name.empty()) std::memcpy(at, e.name.data(), e.name.size());
  if (!prefixed && !e.path.empty()) std::memcpy(at + e.name.size(), e.path.data(), e.path.size());
  used_ += bytes;
  r.size = e.size;
  r.mtime_ns = e.mtime_ns;
  r.label_flags = static_cast<uint32_t>(e.label) & kLabelBits;
  if (!e.etag.empty() || !e.bad.empty()) {
    r.label_flags |= kHasExtra;
    extras_.push_back(Extra{records_.size(), e.etag, e.bad});
  }
  records_.push_back(r);
}

int64_t SourceEntries::label(size_t i) const {
  const uint32_t bits = records_[i].label_flags & kLabelBits;
  return (bits & 0x40000000u) ? static_cast<int64_t>(bits) - (int64_t{1} << 31)
                              : static_cast<int64_t>(bits);
}

std::string_view SourceEntries::name(size_t i) const {
  const Record& r = records_[i];
  const size_t len = r.text_len & ~kOwnPath;
  const char* at = blocks_[r.block].get() + r.offset + ((r.text_len & kOwnPath) ? 4 : 0);
  return len ? std::string_view(at, len) : std::string_view();
}

std::string_view SourceEntries::path_text(const Record& r) const {
  const char* at = blocks_[r.block].get() + r.offset;
  uint32_t path_len = 0;
  std::memcpy(&path_len, at, sizeof path_len);
  return path_len ? std::string_view(at + 4 + (r.text_len & ~kOwnPath), path_len)
                  : std::string_view();
}

std::string SourceEntries::path(size_t i) const {
  const Record& r = records_[i];
  if (r.text_len & kOwnPath) return std::string(path_text(r));
  const std::string_view n = name(i);
  std::string p;
  p.reserve(prefix_.size() + n.size());
  p += prefix_;
  p += n;
  return p;
}

const SourceEntries::Extra* SourceEntries::extra(size_t i) const {
  if (!(records_[i].label_flags & kHasExtra)) return nullptr;
  const auto it = std::lower_bound(extras_.begin(), extras_.end(), i,
                                   [](const Extra& x, size_t k) { return x.entry < k; });
  return it != extras_.end() && it->entry == i ? &*it : nullptr;
}

const std::string& SourceEntries::etag(size_t i) const {
  const Extra* x = extra(i);
  return x ? x->etag : empty_string();
}

const std::string& SourceEntries::bad(size_t i) const {
  const Extra* x = extra(i);
  return x ? x->bad : empty_string();
}

SourceEntry SourceEntries::operator[](size_t i) const {
  const Record& r = records_[i];
  SourceEntry e;
  e.path = path(i);
  e.name.assign(name(i));
  e.label = label(i);
  e.size = r.size;
  e.mtime_ns = r.mtime_ns;
  if (const Extra* x = extra(i)) {
    e.etag = x->etag;
    e.bad = x->bad;
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
