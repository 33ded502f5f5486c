// The epoch order and the global cursor of dscache/sampler.h and dscache/loader.h, for Python's
// epoch_order() and for converting a state saved under another geometry (dscache/_elastic.py).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "_binding.h"
#include "dscache/loader.h"
#include "dscache/sampler.h"

namespace dscache {

namespace {

// Each keyword's names come from libcache's table; an unknown one is Error(kInvalidArgument)
// naming the keyword and listing the names (ValueError in Python).
Shuffle parse_shuffle(const std::string& s) { return kShuffleNames.parse(s, "shuffle"); }
RankTail parse_tail(const std::string& s) { return kRankTailNames.parse(s, "rank_tail"); }

}  // namespace

SamplerOptions sampler_options(const std::string& shuffle, uint64_t block, uint64_t window_blocks,
                               uint32_t rank, uint32_t world_size, const std::string& rank_tail) {
  SamplerOptions s;
  s.shuffle = parse_shuffle(shuffle);
  s.block = block;
  s.window_blocks = window_blocks;
  s.rank = rank;
  s.world_size = world_size;
  s.tail = parse_tail(rank_tail);
  return s;
}

void bind_order(py::module_& m) {
  m.def(
      "epoch_order",
      [](uint64_t n, const std::string& shuffle, uint64_t block, uint64_t window_blocks,
         uint32_t rank, uint32_t world_size, const std::string& tail, uint64_t seed,
         uint64_t epoch) {
        const SamplerOptions s =
            sampler_options(shuffle, block, window_blocks, rank, world_size, tail);
        validate(s, n);
        std::vector<uint64_t> order = epoch_order(n, s, seed, epoch);
        py::array_t<uint64_t> out(static_cast<py::ssize_t>(order.size()));
        std::memcpy(out.mutable_data(), order.data(), order.size() * sizeof(uint64_t));
        return out;
      },
      py::arg("n"), py::arg("shuffle"), py::arg("block"), py::arg("window_blocks"), py::arg("rank"),
      py::arg("world_size"), py::arg("rank_tail"), py::arg("seed"), py::arg("epoch"));

  // The global cursor and its inverse (dscache/loader.h), for states of another geometry.
  m.def(
      "epoch_sample",
      [](uint64_t n, uint32_t world_size, const std::string& tail, uint64_t batch_size,
         bool drop_last, uint64_t rank_batches) {
        return epoch_sample(n, sampler_options("none", 0, 1, 0, world_size, tail), batch_size,
                            drop_last, rank_batches);
      },
      py::arg("n"), py::arg("world_size"), py::arg("rank_tail"), py::arg("batch_size"),
      py::arg("drop_last"), py::arg("rank_batches"));
  m.def(
      "rank_batch_at",
      [](uint64_t n, uint32_t world_size, const std::string& tail, uint64_t batch_size,
         bool drop_last, uint64_t sample) {
        return rank_batch_at(n, sampler_options("none", 0, 1, 0, world_size, tail), batch_size,
                             drop_last, sample);
      },
      py::arg("n"), py::arg("world_size"), py::arg("rank_tail"), py::arg("batch_size"),
      py::arg("drop_last"), py::arg("sample"));
}

}  // namespace dscache
