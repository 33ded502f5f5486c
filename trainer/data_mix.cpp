// The data of a run over several caches (data.h): the Mixture of the --train caches, its
// identity, and --val caches labelled with the training class list. No torch types.
#include <algorithm>
#include <cstdio>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "data.h"
#include "dscache/checksum.h"
#include "dscache/error.h"

namespace dscache {
namespace train {

namespace {

// The last component of a path or URL ("/data/a/" → "a"); "" when there is none.
std::string basename_of(std::string path) {
  while (!path.empty() && path.back() == '/') path.pop_back();
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// Each cache's basename, "-2", "-3"... added where it repeats an earlier one.
std::vector<std::string> unique_names(const std::vector<std::string>& paths) {
  std::vector<std::string> names;
  std::set<std::string> used;
  for (size_t k = 0; k < paths.size(); ++k) {
    std::string base = basename_of(paths[k]);
    if (base.empty()) base = "source" + std::to_string(k);
    std::string name = base;
    for (int n = 2; used.count(name); ++n) name = base + "-" + std::to_string(n);
    used.insert(name);
    names.push_back(name);
  }
  return names;
}

std::string join(const std::vector<std::string>& items) {
  std::string s;
  for (const auto& i : items) s += (s.empty() ? "" : ", ") + i;
  return s;
}

}  // namespace

std::shared_ptr<const Mixture> make_train_mixture(const TrainOptions& o,
                                                  const std::vector<LazySource>& caches,
                                                  uint64_t global_batch) {
  const std::vector<std::string> names = unique_names(o.trains);
  std::vector<MixSource> sources;
  for (size_t k = 0; k < caches.size(); ++k) {
    MixSource s;
    s.source = caches[k].source;
    s.classes = caches[k].classes;
    s.name = names[k];
    s.identity = caches[k].identity.content;
    if (!o.mix_weights.empty()) s.weight = o.mix_weights[k];
    if (!o.mix_repeats.empty()) s.repeat = o.mix_repeats[k];
    sources.push_back(std::move(s));
  }
  MixtureOptions mo;
  mo.batching = o.mix_stratified ? MixBatching::kStratified : MixBatching::kRandom;
  mo.epoch_samples = o.mix_samples;
  mo.stratum = global_batch;
  try {
    return Mixture::make(std::move(sources), mo);
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::kInvalidArgument) throw;
    throw UsageError("--train " + join(o.trains) + ": " + e.reason());
  }
}

DataIdentity mixture_identity(const Mixture& mixture, const std::vector<LazySource>& caches) {
  DataIdentity id;
  std::string contents;
  for (size_t k = 0; k < caches.size(); ++k) {
    id.recipe += (k ? "; " : "mixture of ") + mixture.source(k).name + " (" +
                 caches[k].identity.recipe + ")";
    contents += caches[k].identity.content;
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx",
                static_cast<unsigned long long>(xxh64(contents.data(), contents.size())));
  id.content = hex;
  return id;
}

ValSet relabel_val(const std::string& path, const LazySource& val,
                   const std::vector<std::string>& train_classes) {
  ValSet set;
  set.path = path;
  set.source = val.source;
  if (val.classes == train_classes) return set;
  for (const std::string& c : val.classes) {
    if (std::find(train_classes.begin(), train_classes.end(), c) == train_classes.end()) {
      throw UsageError("--val " + path + ": class '" + c + "' is not among the training classes (" +
                       join(train_classes) + "): the model has no output for it");
    }
  }
  MixSource s;
  s.source = val.source;
  s.classes = val.classes;
  s.name = basename_of(path);
  s.identity = val.identity.content;
  MixtureOptions mo;
  mo.classes = train_classes;
  set.relabel = Mixture::make({s}, mo);
  set.source = set.relabel->view();
  return set;
}

}  // namespace train
}  // namespace dscache
