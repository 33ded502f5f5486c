// Validation: the eval pass every task shares, and classification's loss and accuracy.
#include "evaluate.h"

#include <optional>

namespace dscache {
namespace train {

void for_each_eval_batch(
    Classifier& model, Loader& loader, const BatchConverter& conv, const AmpConfig& amp,
    const std::function<void(const Batch&, const torch::Tensor&, const torch::Tensor&)>& each) {
  model.eval();
  torch::NoGradGuard no_grad;
  conv.wait_copied();
  loader.start_epoch(0, 0);
  while (true) {
    conv.wait_copied();
    const Batch* b = loader.next();
    if (!b) break;
    const torch::Tensor x = conv.images(*b);
    torch::Tensor outputs;
    {
      std::optional<AutocastGuard> guard;
      if (amp.autocast) guard.emplace(amp.device, amp.dtype);
      outputs = model.forward(x);
    }
    each(*b, x, outputs.to(torch::kFloat));
  }
  model.train();
}

EvalResult evaluate(Classifier& model, Loader& loader, const BatchConverter& conv,
                    const AmpConfig& amp) {
  double loss = 0;
  int64_t correct = 0, n = 0;
  for_each_eval_batch(
      model, loader, conv, amp,
      [&](const Batch& b, const torch::Tensor&, const torch::Tensor& logits) {
        const torch::Tensor y = conv.labels(b);
        loss +=
            torch::nn::functional::cross_entropy(
                logits, y, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
                .item<double>();
        correct += (logits.argmax(1) == y).sum().item<int64_t>();
        n += b.size;
      });
  EvalResult r;
  if (n > 0) {
    r.loss = loss / n;
    r.acc = static_cast<double>(correct) / n;
  }
  return r;
}

}  // namespace train
}  // namespace dscache
