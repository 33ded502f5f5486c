// Running the dscache-train binary from the trainer tests and comparing what its runs left in
// their --output directories (model.pt, metrics.jsonl). The header needs no LibTorch, so the
// cli and slow suites compile fast; train_runs.cpp loads the weights with it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "options.h"

namespace trainer_test {

// The dscache-train under test: $DSCACHE_TRAIN (tests/meson.build sets it); REQUIREs it is set.
std::string train_exe();

// The trainer run with `args`, writing into `out`, without the progress line.
std::vector<std::string> with_output(const std::vector<std::string>& args, const std::string& out);

// The lines of a metrics.jsonl, each parsed.
std::vector<nlohmann::json> read_metrics(const std::string& path);

// Two runs in a_dir and b_dir ended with the same weights and buffers, bit for bit, and their
// metrics.jsonl hold the same `lines` lines (so no replayed step was logged twice). `kind`, `c`,
// `classes`, `h`, `w`: the model both model.pt files hold.
void check_same_result(const std::string& a_dir, const std::string& b_dir,
                       dscache::train::ModelKind kind, int64_t c, int64_t classes, int64_t h,
                       int64_t w, size_t lines);

// Every parameter and buffer of model file `a` is torch::allclose(rtol, atol) to the one of the
// same name in `b` (model files as check_same_result reads them).
void check_close_weights(const std::string& a, const std::string& b, dscache::train::ModelKind kind,
                         int64_t c, int64_t classes, int64_t h, int64_t w, double rtol,
                         double atol);

// Runs `args + --output WORK/a` to the end, `args + --output WORK/b` killed by the SIGKILL hook
// after `kill_after` optimizer steps, then `args + --output WORK/b --resume`; then
// check_same_result (weights, buffers, `lines` metrics lines, curves.png) and that the first
// step line's loss scale is 65536 with `scaling`, else 1. `kind`..`w` as check_same_result's
// (unet-small: the dense model).
void check_resume(const std::string& work, const std::vector<std::string>& args, int kill_after,
                  dscache::train::ModelKind kind, int64_t c, int64_t classes, int64_t h, int64_t w,
                  size_t lines, bool scaling);

}  // namespace trainer_test
