// Multilabel and regression metrics, and their validation pass.
#include "task_metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "evaluate.h"

namespace dscache {
namespace train {

namespace {
nlohmann::json number_or_null(double v) {
  return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr);
}
}  // namespace

double average_precision(const std::vector<float>& scores, const std::vector<float>& labels) {
  std::vector<size_t> order(scores.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return scores[a] > scores[b]; });
  double positives = 0;
  for (float l : labels) positives += l > 0.5f;
  if (positives == 0) return std::numeric_limits<double>::quiet_NaN();
  double tp = 0, fp = 0, ap = 0, recall_before = 0;
  for (size_t i = 0; i < order.size();) {
    const float s = scores[order[i]];
    for (; i < order.size() && scores[order[i]] == s; ++i) {  // ties: one threshold
      (labels[order[i]] > 0.5f ? tp : fp) += 1;
    }
    const double recall = tp / positives;
    ap += (recall - recall_before) * tp / (tp + fp);
    recall_before = recall;
  }
  return ap;
}

void TargetMetrics::add(const torch::Tensor& outputs, const torch::Tensor& targets) {
  const torch::Tensor o = outputs.detach().to(torch::kCPU, torch::kFloat).contiguous();
  const torch::Tensor t = targets.detach().to(torch::kCPU, torch::kFloat).contiguous();
  out_.insert(out_.end(), o.data_ptr<float>(), o.data_ptr<float>() + o.numel());
  tgt_.insert(tgt_.end(), t.data_ptr<float>(), t.data_ptr<float>() + t.numel());
}

nlohmann::json TargetMetrics::finish() const {
  const size_t t = spec_.names.size();
  const size_t n = t ? out_.size() / t : 0;
  nlohmann::json j;
  if (spec_.kind == TaskKind::kMultilabel) {
    double ap_sum = 0, tp = 0, fp = 0, fn = 0;
    int counted = 0;
    nlohmann::json per = nlohmann::json::array();
    std::vector<float> s(n), l(n);
    for (size_t k = 0; k < t; ++k) {
      for (size_t i = 0; i < n; ++i) {
        s[i] = out_[i * t + k];
        l[i] = tgt_[i * t + k];
        const bool pred = s[i] >= 0, pos = l[i] > 0.5f;
        tp += pred && pos;
        fp += pred && !pos;
        fn += !pred && pos;
      }
      const double ap = average_precision(s, l);
      per.push_back(number_or_null(ap));
      if (std::isfinite(ap)) {
        ap_sum += ap;
        ++counted;
      }
    }
    size_t exact = 0;  // samples with every output right, as the epoch line's train_acc
    for (size_t i = 0; i < n; ++i) {
      bool all = true;
      for (size_t k = 0; k < t && all; ++k) {
        all = (out_[i * t + k] >= 0) == (tgt_[i * t + k] > 0.5f);
      }
      exact += all;
    }
    j["val_acc"] = n ? static_cast<double>(exact) / static_cast<double>(n) : 0.0;
    j["val_map"] = counted ? nlohmann::json(ap_sum / counted) : nlohmann::json(nullptr);
    j["val_micro_f1"] = tp + fp + fn > 0 ? 2 * tp / (2 * tp + fp + fn) : 0.0;
    j["val_ap"] = per;
    return j;
  }
  double abs_all = 0, sq_all = 0, r2_sum = 0;
  bool r2_ok = n > 0;
  nlohmann::json mae_per = nlohmann::json::array(), r2_per = nlohmann::json::array();
  for (size_t k = 0; k < t; ++k) {
    double abs_k = 0, sq_k = 0, mean = 0, tot = 0;
    for (size_t i = 0; i < n; ++i) mean += tgt_[i * t + k] * spec_.std[k] + spec_.mean[k];
    mean /= std::max<size_t>(n, 1);
    for (size_t i = 0; i < n; ++i) {
      const double y = tgt_[i * t + k] * spec_.std[k] + spec_.mean[k];
      const double p = out_[i * t + k] * spec_.std[k] + spec_.mean[k];
      abs_k += std::abs(p - y);
      sq_k += (p - y) * (p - y);
      tot += (y - mean) * (y - mean);
    }
    abs_all += abs_k;
    sq_all += sq_k;
    const double r2 = tot > 0 ? 1 - sq_k / tot : std::numeric_limits<double>::quiet_NaN();
    if (!std::isfinite(r2)) r2_ok = false;
    r2_sum += r2;
    mae_per.push_back(n ? abs_k / n : 0.0);
    r2_per.push_back(number_or_null(r2));
  }
  const double cells = static_cast<double>(std::max<size_t>(n * t, 1));
  j["val_mae"] = abs_all / cells;
  j["val_rmse"] = std::sqrt(sq_all / cells);
  j["val_r2"] = r2_ok && t ? nlohmann::json(r2_sum / t) : nlohmann::json(nullptr);
  j["val_mae_per"] = mae_per;
  j["val_r2_per"] = r2_per;
  return j;
}

TargetEval evaluate_targets(Classifier& model, Loader& loader, const BatchConverter& conv,
                            const AmpConfig& amp, const TargetSpec& spec,
                            const std::string& where) {
  TargetMetrics metrics(spec);
  double loss = 0;
  int64_t n = 0;
  for_each_eval_batch(model, loader, conv, amp,
                      [&](const Batch& b, const torch::Tensor& x, const torch::Tensor& outputs) {
                        const torch::Tensor y = batch_targets(spec, b, x.device(), where);
                        loss += target_loss_sum(spec, outputs, y).item<double>();
                        metrics.add(outputs, y);
                        n += b.size;
                      });
  TargetEval r;
  r.loss = n ? loss / n : 0;
  r.metrics = metrics.finish();
  return r;
}

}  // namespace train
}  // namespace dscache
