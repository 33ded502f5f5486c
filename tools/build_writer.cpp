#include "build_writer.h"

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "build_partial.h"
#include "dscache/atomic_file.h"
#include "dscache/checksum.h"
#include "dscache/file.h"
#include "test_hooks.h"

namespace dscache {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string sidecar_name(uint64_t shard) {
  char buf[48];
  std::snprintf(buf, sizeof buf, ".shard-%05llu.json", static_cast<unsigned long long>(shard));
  return buf;
}

}  // namespace

BuildWriter::BuildWriter(std::string dir, Storage storage, SampleShape shape, uint64_t per_shard,
                         uint64_t ragged_bytes, Codec codec)
    : dir_(std::move(dir)),
      storage_(storage),
      shape_(shape),
      per_shard_(per_shard),
      ragged_bytes_(ragged_bytes),
      codec_(codec) {
  const char* kill = std::getenv("DSCACHE_TEST_KILL_AFTER_SHARDS");
  if (kill != nullptr) kill_after_ = std::strtoull(kill, nullptr, 10);
}

uint64_t BuildWriter::adopt_finished() {
  uint64_t src_end = 0;
  for (uint64_t k = 0;; ++k) {
    std::string side = dir_ + "/" + sidecar_name(k);
    std::string shard = dir_ + "/" + shard_file_name(storage_, k);
    if (!path_exists(side) || !path_exists(shard)) break;
    json j;
    try {
      j = json::parse(File::open(side).read_all(uint64_t{1} << 24));  // never a FIFO
    } catch (const std::exception&) {
      break;  // torn sidecar: redo this shard
    }
    ShardEntry e;
    e.file = j["shard"]["file"];
    e.first = j["shard"]["first"];
    e.count = j["shard"]["count"];
    e.bytes = j["shard"]["bytes"];
    e.xxh64 = j["shard"]["xxh64"];
    FileEntry actual = hash_file(shard);
    if (actual.bytes != e.bytes || actual.xxh64 != e.xxh64 || e.first != next_first_) break;
    shards_.push_back(e);
    next_first_ += e.count;
    for (auto& v : j["labels"]) labels_.push_back(v.get<int64_t>());
    for (auto& v : j["checksums"]) checksums_.push_back(v.get<uint64_t>());
    for (auto& v : j["sources"]) sources_.push_back(v.get<std::string>());
    for (auto& v : j["skips"]) skips_.push_back({v["source"], v["reason"]});
    if (j.contains("index")) {
      for (auto& v : j["index"]) index_.push_back(v.get<int64_t>());
    }
    src_end = j["src_end"];
    shard_index_ = k + 1;
  }
  // Anything else in the directory is an unfinished shard or a temp file: remove it.
  for (const auto& ent : fs::directory_iterator(dir_)) {
    std::string name = ent.path().filename().string();
    if (name == kFingerprintFile) continue;
    bool keep = false;
    for (uint64_t k = 0; k < shard_index_; ++k) {
      keep = keep || name == sidecar_name(k) || name == shard_file_name(storage_, k);
    }
    if (!keep) fs::remove_all(ent.path());
  }
  shard_skip_begin_ = skips_.size();
  shard_sample_begin_ = labels_.size();
  return src_end;
}

void BuildWriter::add_sample(const Token& t, const SourceEntry& e) {
  if (ragged_bytes_ > 0) {
    add_bytes(t, e);
    return;
  }
  if (!writer_) {
    writer_ = ShardWriter::create(storage_, dir_ + "/" + shard_file_name(storage_, shard_index_),
                                  shape_, per_shard_);
  }
  writer_->append(t.pixels.data(), e.label);
  labels_.push_back(e.label);
  checksums_.push_back(t.checksum);
  sources_.push_back(e.name);
  crash_point("sample");
  if (writer_->count() == per_shard_) commit_shard(t.index + 1);
}

void BuildWriter::add_bytes(const Token& t, const SourceEntry& e) {
  const bool jpeg = codec_ == Codec::kJpeg;
  const uint64_t bytes = jpeg ? t.stored.size() : uint64_t{t.height} * t.width * shape_.channels;
  if (ragged_ && ragged_->count() > 0 && ragged_->bytes() + bytes > ragged_bytes_) {
    commit_shard(t.index);  // this sample opens the next shard
  }
  if (!ragged_) {
    ragged_ =
        RaggedShardWriter::create(storage_, dir_ + "/" + shard_file_name(storage_, shard_index_),
                                  shape_.channels, std::max(ragged_bytes_, bytes));
  }
  if (jpeg) {
    const uint64_t offset = ragged_->append_bytes(t.stored.data(), bytes, e.label);
    index_.insert(index_.end(), {static_cast<int64_t>(offset), static_cast<int64_t>(bytes),
                                 int64_t{t.height}, int64_t{t.width}});
  } else {
    const uint64_t offset = ragged_->append(t.pixels.data(), t.height, t.width, e.label);
    index_.insert(index_.end(),
                  {static_cast<int64_t>(offset), int64_t{t.height}, int64_t{t.width}});
  }
  labels_.push_back(e.label);
  checksums_.push_back(t.checksum);
  sources_.push_back(e.name);
  crash_point("sample");
}

void BuildWriter::add_skip(const SourceEntry& e, const std::string& reason) {
  skips_.push_back({e.name, reason});
}

void BuildWriter::commit_shard(uint64_t src_end) {
  if (!writer_ && !ragged_) return;
  ShardEntry e = writer_ ? writer_->commit() : ragged_->commit();
  writer_.reset();
  ragged_.reset();
  crash_point("shard-renamed");
  e.first = next_first_;
  next_first_ += e.count;
  json side;
  side["shard"] = {{"file", e.file},
                   {"first", e.first},
                   {"count", e.count},
                   {"bytes", e.bytes},
                   {"xxh64", e.xxh64}};
  side["src_end"] = src_end;
  side["labels"] = std::vector<int64_t>(labels_.begin() + shard_sample_begin_, labels_.end());
  side["checksums"] =
      std::vector<uint64_t>(checksums_.begin() + shard_sample_begin_, checksums_.end());
  side["sources"] =
      std::vector<std::string>(sources_.begin() + shard_sample_begin_, sources_.end());
  json skips = json::array();
  for (size_t i = shard_skip_begin_; i < skips_.size(); ++i) {
    skips.push_back({{"source", skips_[i].source}, {"reason", skips_[i].reason}});
  }
  side["skips"] = std::move(skips);
  if (ragged_bytes_ > 0) {
    side["index"] = std::vector<int64_t>(
        index_.begin() + static_cast<ptrdiff_t>(index_columns() * shard_sample_begin_),
        index_.end());
  }
  std::string text = side.dump();
  write_file_atomic(dir_ + "/" + sidecar_name(shard_index_), text.data(), text.size());
  crash_point("sidecar-written");
  shards_.push_back(e);
  shard_sample_begin_ = labels_.size();
  shard_skip_begin_ = skips_.size();
  ++shard_index_;
  if (kill_after_ != 0 && shard_index_ == kill_after_) std::raise(SIGKILL);  // test hook
}

void BuildWriter::remove_sidecars() {
  for (uint64_t k = 0; k < shard_index_; ++k) {
    fs::remove(dir_ + "/" + sidecar_name(k));
    crash_point("sidecar-removed");
  }
}

}  // namespace dscache
