// Mixture::make: every check of the sources and shares in one place, listed together; the
// unified classes and each source's label remap; the counts, the plan and the fingerprint the
// order and resume use (dscache/mix_order.h).
#include "dscache/mixture.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "dscache/error.h"
#include "dscache/sampler.h"
#include "serve/mix/mixture_view.h"

namespace dscache {

class Mixture::Impl {
 public:
  std::vector<MixSource> sources;
  MixtureOptions options;
  std::vector<std::vector<int64_t>> remaps;
  bool repeats = false;
  std::vector<double> given;  // each source's weight or repeat as given (1: neither)
  std::vector<uint64_t> shares, counts, offsets;
  uint64_t epoch = 0;
  std::shared_ptr<const SampleSource> view;
};

namespace {

constexpr uint64_t kTagFingerprint = 0x6d69786670ull;  // "mixfp"

std::string join(const std::vector<std::string>& parts, const char* sep) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) out += (i > 0 ? sep : "") + parts[i];
  return out;
}

std::string field_names(const SampleSource& s) {
  std::vector<std::string> names;
  for (const FieldSpec& f : s.fields()) names.push_back(f.name);
  return "fields [" + join(names, ", ") + "]";
}

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// What source `s` has that differs from source 0 `a`, one phrase each ("b has 3 channels").
void differences(const MixSource& a, const MixSource& s, std::vector<std::string>* out) {
  const SampleSource &x = *a.source, &y = *s.source;
  if (y.shape().channels != x.shape().channels) {
    out->push_back(s.name + " has " + std::to_string(y.shape().channels) + " channels");
  }
  const std::vector<FieldSpec>&fa = x.fields(), &fb = y.fields();
  bool same_names = fa.size() == fb.size();
  for (size_t i = 0; same_names && i < fa.size(); ++i) same_names = fa[i].name == fb[i].name;
  if (!same_names) out->push_back(s.name + " has " + field_names(y));
  for (size_t i = 0; same_names && i < fa.size(); ++i) {
    const FieldSpec &p = fa[i], &q = fb[i];
    std::vector<std::string> what;
    if (p.kind != q.kind) what.push_back(std::string("kind ") + kFieldKindNames.to_string(q.kind));
    if (p.dtype != q.dtype)
      what.push_back(std::string("dtype ") + kFieldTypeNames.to_string(q.dtype));
    if (p.shape != q.shape) what.push_back("another shape");
    if (p.rows_of != q.rows_of) what.push_back("rows_of \"" + q.rows_of + "\"");
    if (p.classes != q.classes) what.push_back("other classes");
    if (!what.empty()) out->push_back(s.name + "'s field " + q.name + " has " + join(what, ", "));
  }
  if (y.encoded() != x.encoded()) {
    out->push_back(s.name + (y.encoded() ? " is encoded (JPEG)" : " is not encoded (JPEG)"));
  }
  if (s.classes.empty() != a.classes.empty()) {
    out->push_back(s.name + (s.classes.empty() ? " has no classes" : " has classes"));
  }
}

// The shares: all weights or all repeats (neither: repeat 1 each), each quantized, not all 0,
// no empty source with a share. Fills impl's repeats, given and shares.
void check_shares(Mixture::Impl* m, std::vector<std::string>* out) {
  std::vector<std::string> weighted, repeated, both;
  for (const MixSource& s : m->sources) {
    if (s.weight != -1) weighted.push_back(s.name);
    if (s.repeat != -1) repeated.push_back(s.name);
  }
  const size_t k_count = m->sources.size();
  if (!weighted.empty() && !repeated.empty()) {
    out->push_back("give every source a weight or every source a repeat, not both (weights: " +
                   join(weighted, ", ") + "; repeats: " + join(repeated, ", ") + ")");
    return;
  }
  m->repeats = weighted.empty();
  const bool neither = weighted.empty() && repeated.empty();
  const size_t given_count = m->repeats ? repeated.size() : weighted.size();
  if (!neither && given_count != k_count) {
    for (const MixSource& s : m->sources) {
      if ((m->repeats ? s.repeat : s.weight) == -1) {
        out->push_back(s.name + " has no " + (m->repeats ? "repeat" : "weight") +
                       " (every source needs one when one has)");
      }
    }
    return;
  }
  bool any = false, bad = false;
  for (const MixSource& s : m->sources) {
    const double v = neither ? 1.0 : (m->repeats ? s.repeat : s.weight);
    m->given.push_back(v);
    uint64_t q = 0;
    try {
      q = quantize_share(v, s.name + (m->repeats ? " repeat" : " weight"));
    } catch (const Error& e) {
      out->push_back(e.reason());
      bad = true;
    }
    m->shares.push_back(q);
    any = any || q > 0;
    if (q > 0 && s.source->size() == 0) {
      out->push_back(s.name + " is empty (0 samples) but has " +
                     (m->repeats ? "repeat " : "weight ") + number(v));
    }
  }
  if (!any && !bad)
    out->push_back(std::string("every ") + (m->repeats ? "repeat" : "weight") + " is 0");
}

// The unified class list and each source's remap (fills impl's options.classes and remaps), by
// hash lookup (linear in the classes, however many sources). A list naming one class twice is
// refused: unifying by name would merge two labels (or leave one index unused).
void unify_classes(Mixture::Impl* m, std::vector<std::string>* out) {
  std::vector<std::string>& unified = m->options.classes;
  const bool given = !unified.empty();
  std::unordered_map<std::string, int64_t> index;
  for (size_t i = 0; i < unified.size(); ++i) {
    if (!index.emplace(unified[i], static_cast<int64_t>(i)).second) {
      out->push_back("the given classes name \"" + unified[i] + "\" twice");
    }
  }
  for (const MixSource& s : m->sources) {
    std::vector<int64_t> remap;
    std::vector<std::string> missing;
    std::unordered_set<std::string> own;
    for (const std::string& c : s.classes) {
      if (!own.insert(c).second) out->push_back(s.name + "'s classes name \"" + c + "\" twice");
      auto it = index.find(c);
      if (it == index.end()) {
        if (given) {
          missing.push_back(c);
          remap.push_back(-1);
          continue;
        }
        it = index.emplace(c, static_cast<int64_t>(unified.size())).first;
        unified.push_back(c);
      }
      remap.push_back(it->second);
    }
    if (!missing.empty()) {
      out->push_back(s.name + "'s classes [" + join(missing, ", ") +
                     "] are not in the given class list");
    }
    m->remaps.push_back(std::move(remap));
  }
}

}  // namespace

std::shared_ptr<const Mixture> Mixture::make(std::vector<MixSource> sources,
                                             const MixtureOptions& options) {
  auto m = std::make_unique<Impl>();
  m->options = options;
  if (sources.empty()) throw Error(ErrorKind::kInvalidArgument, "", "mixture: no sources");
  std::vector<std::string> problems, differ;
  std::unordered_set<std::string> names;  // a lookup: linear in the sources
  for (size_t k = 0; k < sources.size(); ++k) {
    if (!sources[k].source) {
      throw Error(ErrorKind::kInvalidArgument, "",
                  "mixture: source " + std::to_string(k) + " is null");
    }
    if (sources[k].name.empty()) sources[k].name = "source" + std::to_string(k);
    if (!names.insert(sources[k].name).second) {
      problems.push_back("two sources are named " + sources[k].name + " (names are unique)");
    }
  }
  m->sources = std::move(sources);
  const MixSource& first = m->sources[0];
  for (size_t k = 1; k < m->sources.size(); ++k) differences(first, m->sources[k], &differ);
  if (!differ.empty()) {
    const SampleShape s0 = first.source->shape();
    const std::string shape = first.source->layout() == Layout::kFixed
                                  ? std::to_string(s0.height) + "x" + std::to_string(s0.width)
                                  : std::string("ragged");
    problems.insert(problems.begin(), "sources differ from " + first.name + " (" + shape + "x" +
                                          std::to_string(s0.channels) + ", " +
                                          field_names(*first.source) + "): " + join(differ, "; "));
  }
  check_shares(m.get(), &problems);
  unify_classes(m.get(), &problems);
  if (!problems.empty()) {
    throw Error(ErrorKind::kInvalidArgument, "", "mixture: " + join(problems, "; "));
  }
  std::vector<uint64_t> sizes;
  for (const MixSource& s : m->sources) sizes.push_back(s.source->size());
  m->counts = mix_counts(sizes, m->shares, m->repeats, options.epoch_samples);
  for (const uint64_t c : m->counts) m->epoch += c;
  m->offsets = detail::mix_offsets(m->sources);
  m->view = detail::make_mix_view(m->sources, m->remaps);
  return std::make_shared<const Mixture>(std::move(m));
}

Mixture::Mixture(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Mixture::~Mixture() = default;

size_t Mixture::sources() const { return impl_->sources.size(); }
const MixSource& Mixture::source(size_t k) const { return impl_->sources.at(k); }
const MixtureOptions& Mixture::options() const { return impl_->options; }
const std::vector<std::string>& Mixture::classes() const { return impl_->options.classes; }
const std::vector<int64_t>& Mixture::remap(size_t k) const { return impl_->remaps.at(k); }
bool Mixture::repeats() const { return impl_->repeats; }
const std::vector<uint64_t>& Mixture::shares() const { return impl_->shares; }
const std::vector<uint64_t>& Mixture::counts() const { return impl_->counts; }
uint64_t Mixture::epoch_samples() const { return impl_->epoch; }
std::shared_ptr<const SampleSource> Mixture::view() const { return impl_->view; }
uint64_t Mixture::offset(size_t k) const { return impl_->offsets.at(k); }

std::pair<uint32_t, uint64_t> Mixture::locate(uint64_t i) const {
  return detail::mix_locate(impl_->offsets, i);
}

std::vector<uint64_t> Mixture::counts_for(uint64_t total) const {
  if (total == 0) return std::vector<uint64_t>(impl_->sources.size(), 0);
  return largest_remainder(total, impl_->repeats ? impl_->counts : impl_->shares);
}

MixPlan Mixture::plan(bool shuffle, uint64_t default_stratum) const {
  MixPlan p;
  for (const MixSource& s : impl_->sources) p.sizes.push_back(s.source->size());
  p.batching = impl_->options.batching;
  p.stratum = impl_->options.stratum != 0 ? impl_->options.stratum : default_stratum;
  p.shuffle = shuffle;
  return p;
}

uint64_t Mixture::fingerprint(uint64_t stratum) const {
  uint64_t h = stream_id(kTagFingerprint, impl_->sources.size(), impl_->repeats ? 1 : 0);
  const auto fold = [&h](uint64_t v) { h = stream_id(kTagFingerprint, h, v); };
  const auto fold_string = [&fold](const std::string& s) {
    fold(s.size());
    for (size_t i = 0; i < s.size(); i += 8) {
      uint64_t v = 0;
      for (size_t j = i; j < s.size() && j < i + 8; ++j)
        v |= uint64_t{uint8_t(s[j])} << (8 * (j - i));
      fold(v);
    }
  };
  for (size_t k = 0; k < impl_->sources.size(); ++k) {
    const MixSource& s = impl_->sources[k];
    fold(s.source->size());
    fold_string(s.identity);
    fold_string(s.name);
    fold(impl_->shares[k]);
  }
  fold(impl_->epoch);
  fold(static_cast<uint64_t>(impl_->options.batching));
  // Random batching's order does not depend on the stratum: resuming on another world size
  // keeps the fingerprint.
  fold(impl_->options.batching == MixBatching::kStratified ? stratum : 0);
  return h;
}

std::string Mixture::describe_shares() const {
  std::vector<std::string> parts;
  for (size_t k = 0; k < impl_->sources.size(); ++k) {
    parts.push_back(impl_->sources[k].name + (impl_->repeats ? " repeat " : " ") +
                    number(impl_->given[k]));
  }
  return join(parts, ", ");
}

}  // namespace dscache
