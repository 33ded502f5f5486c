// Data parallel over real Gloo groups on loopback: the bucketed, backward-overlapped gradient
// all-reduce against the flat one, no communication on non-final micro-steps, sync-BN against
// one process with the whole batch (suite unit: ranks as threads of this process), and the
// binary's bucketed vs flat training (suite cli: ranks as processes).
#include "torch_doctest.h"  // first: LibTorch, then doctest

#include <sys/wait.h>

#include <cmath>
#include <cstdlib>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "distributed.h"
#include "dscache/error.h"
#include "fixtures.h"
#include "grad_sync.h"
#include "models.h"
#include "tensor_checks.h"

namespace {

using namespace dscache::train;
using trainer_test::rel_diff;

// Runs body(rank, comm) for ranks 0 and 1 on two threads joined in one Gloo group over
// loopback; rethrows the first failure. False when this build has no Gloo.
bool run_two_ranks(const std::function<void(int, Communicator&)>& body) {
  const int port = trainer_test::free_port();
  std::exception_ptr errors[2];
  bool unsupported = false;
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      try {
        DistEnv env;
        env.rank = r;
        env.world_size = 2;
        env.master_port = port;
        std::unique_ptr<Communicator> comm = make_communicator(env, std::chrono::seconds(60));
        body(r, *comm);
        comm->barrier();
      } catch (const dscache::Error& e) {
        if (e.kind() == dscache::ErrorKind::kUnsupported) unsupported = true;
        errors[r] = std::current_exception();
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  if (unsupported) return false;
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  return true;
}

// Summed cross entropy of `model` on (x, y), divided by `denominator`, backward.
void backward(Classifier& model, const torch::Tensor& x, const torch::Tensor& y,
              double denominator) {
  (torch::nn::functional::cross_entropy(
       model.forward(x), y,
       torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum)) /
   denominator)
      .backward();
}

std::vector<torch::Tensor> grads(Classifier& m) {
  std::vector<torch::Tensor> g;
  for (const auto& p : m.parameters()) g.push_back(p.grad().detach().clone());
  return g;
}

std::shared_ptr<Classifier> seeded_model(ModelKind kind) {
  torch::manual_seed(11);
  return make_model(kind, 3, 4, 8, 8);
}

// How far two fp32 computations of one gradient may drift when only the order of their sums
// differs (another batch split, another kernel's blocking: oneDNN picks AVX2 or AVX-512 loops by
// CPU). Each sum of K terms rounds with RMS relative error about u * sqrt(K) (u = 2^-24, random
// signs), and the errors of the sums a gradient passes through add in quadrature: per conv or
// linear layer the forward sum (in * kh * kw), the backward sum for its input (out * kh * kw)
// and the weight gradient's sum over the batch's positions (at most `positions`). Returns that
// RMS estimate for `model`.
double fp32_reorder_error(Classifier& model, double positions) {
  double k = 0;
  for (const auto& p : model.parameters()) {
    if (p.dim() < 2) continue;  // biases and BatchNorm's scale/shift add one term per sum
    const double window = p.dim() == 4 ? static_cast<double>(p.size(2) * p.size(3)) : 1.0;
    k += static_cast<double>(p.size(1)) * window + static_cast<double>(p.size(0)) * window +
         positions;
  }
  return std::ldexp(1.0, -24) * std::sqrt(k);
}

}  // namespace

TEST_SUITE("unit") {
  TEST_CASE("backend: training on cpu uses gloo; cuda uses nccl only where built with it") {
    CHECK(std::string(backend_for(DeviceKind::kCpu)) == "gloo");
    const std::string cuda = backend_for(DeviceKind::kCuda);
    CHECK((cuda == "gloo" || cuda == "nccl"));
  }

  TEST_CASE(
      "GradSync over 2 Gloo ranks, K = 2: buckets start only in the last backward and sum to the "
      "flat all-reduce") {
    for (ModelKind kind : {ModelKind::kCnn, ModelKind::kResnet18}) {
      CAPTURE(to_string(kind));
      // Per rank: a model synced by small buckets and an identical one synced flat.
      std::shared_ptr<Classifier> bucketed[2], flat[2];
      torch::Tensor x[2][2], y[2][2];
      for (int r = 0; r < 2; ++r) {
        bucketed[r] = seeded_model(kind);
        flat[r] = seeded_model(kind);
        for (int m = 0; m < 2; ++m) {
          x[r][m] = torch::randn({3, 3, 8, 8});
          y[r][m] = torch::randint(0, 4, {3});
        }
      }
      struct Seen {
        uint64_t calls[2][2] = {};  // [model: bucketed, flat][micro-step]: all-reduces in backward
        size_t buckets = 0, started_in_backward = 0;
        uint64_t bytes = 0;
      } seen[2];
      const bool ran = run_two_ranks([&](int r, Communicator& comm) {
        GradSync bs(bucketed[r]->parameters(), comm, 64 * 1024);  // several buckets
        GradSync fs(flat[r]->parameters(), comm, 0);
        for (int m = 0; m < 2; ++m) {
          if (m == 1) bs.arm();
          uint64_t before = comm.allreduce_calls();
          backward(*bucketed[r], x[r][m], y[r][m], 12.0);
          seen[r].calls[0][m] = comm.allreduce_calls() - before;
          before = comm.allreduce_calls();
          backward(*flat[r], x[r][m], y[r][m], 12.0);
          seen[r].calls[1][m] = comm.allreduce_calls() - before;
        }
        seen[r].started_in_backward = bs.started_in_backward();
        seen[r].buckets = bs.buckets();
        seen[r].bytes = bs.bytes_per_step();
        bs.finish();
        fs.finish();
      });
      if (!ran) {
        MESSAGE("built without Gloo: skipped");
        return;
      }
      for (int r = 0; r < 2; ++r) {
        CAPTURE(r);
        CHECK(seen[r].buckets > 3);
        CHECK(seen[r].calls[0][0] == 0);                // first micro-step: nothing
        CHECK(seen[r].calls[0][1] == seen[r].buckets);  // last: every bucket, during backward
        CHECK(seen[r].started_in_backward == seen[r].buckets);
        CHECK(seen[r].calls[1][0] == 0);
        CHECK(seen[r].calls[1][1] == 0);  // flat: after the backward only
        uint64_t bytes = 0;
        for (const auto& p : bucketed[r]->parameters()) bytes += p.numel() * 4;
        CHECK(seen[r].bytes == bytes);
        const auto gb = grads(*bucketed[r]), gf = grads(*flat[r]);
        CHECK(rel_diff(gb, gf) <= 1e-6);
      }
      CHECK(rel_diff(grads(*bucketed[0]), grads(*bucketed[1])) == 0);  // both hold the sum
    }
  }

  TEST_CASE("sync-BN: 2 Gloo ranks of batch b equal 1 process of batch 2b (resnet18)") {
    const int64_t b = 4;
    torch::manual_seed(5);
    const torch::Tensor x = torch::randn({2 * b, 3, 8, 8}) * 2 + 0.5;
    const torch::Tensor y = torch::randint(0, 4, {2 * b});
    auto step = [](Classifier& m) {
      torch::optim::SGD(m.parameters(), torch::optim::SGDOptions(0.1)).step();
    };
    // One process, the whole batch.
    auto ref = seeded_model(ModelKind::kResnet18);
    ref->train();
    backward(*ref, x, y, 2.0 * b);
    const auto ref_grads = grads(*ref);
    step(*ref);
    std::shared_ptr<Classifier> synced[2], plain[2];
    for (int r = 0; r < 2; ++r) {
      synced[r] = seeded_model(ModelKind::kResnet18);
      plain[r] = seeded_model(ModelKind::kResnet18);
    }
    std::vector<torch::Tensor> synced_grads[2], plain_grads[2];
    const bool ran = run_two_ranks([&](int r, Communicator& comm) {
      const AllReduceFn allreduce = [&comm](const torch::Tensor& t) { comm.allreduce_sum({t}); };
      synced[r]->set_sync_bn(allreduce);
      const torch::Tensor xr = x.slice(0, r * b, (r + 1) * b), yr = y.slice(0, r * b, (r + 1) * b);
      for (auto* m : {&synced[r], &plain[r]}) {
        (*m)->train();
        GradSync sync((*m)->parameters(), comm, 1024 * 1024);
        sync.arm();
        backward(**m, xr, yr, 2.0 * b);
        sync.finish();
        (m == &synced[r] ? synced_grads[r] : plain_grads[r]) = grads(**m);
        step(**m);
      }
      synced[r]->set_sync_bn(AllReduceFn());
    });
    if (!ran) {
      MESSAGE("built without Gloo: skipped");
      return;
    }
    // The synced ranks compute the reference's sums split in two and in another order, so
    // they agree up to fp32 reordering (fp32_reorder_error; 4 x its RMS estimate as the bound,
    // norm-wise, which concentrates). Elementwise tolerances fail on AVX2 CPUs, where oneDNN's
    // loops block the sums differently. Without sync, the per-rank statistics differ by orders
    // more. An SGD step moves a parameter by lr * g, so its error is lr times the gradient's,
    // plus the step's own rounding (u per element).
    const double eps = 4 * fp32_reorder_error(*ref, 2.0 * b * 8 * 8);
    const double u = std::ldexp(1.0, -24);
    MESSAGE("sync-BN: fp32 reordering bound " << eps << " (relative, norm-wise)");
    REQUIRE(eps < 1e-3 / 4);  // the bound must still tell a synced rank from an unsynced one
    double ref_grad_sq = 0;
    for (const auto& g : ref_grads) ref_grad_sq += g.to(torch::kDouble).pow(2).sum().item<double>();
    for (int r = 0; r < 2; ++r) {
      CAPTURE(r);
      const double grad_err = rel_diff(synced_grads[r], ref_grads);
      MESSAGE("rank " << r << ": gradient relative difference " << grad_err);
      CHECK(grad_err < eps);
      CHECK(rel_diff(plain_grads[r], ref_grads) > 1e-3);  // per-rank statistics differ
      const auto want = ref->named_buffers(), got = synced[r]->named_buffers();
      for (const auto& item : want) {
        CAPTURE(item.key());
        const torch::Tensor g = got[item.key()];
        if (item.value().is_floating_point()) {
          // running mean/var: the batch statistics' error, shrunk by the momentum
          CHECK(rel_diff({g}, {item.value()}) < eps + u);
        } else {
          CHECK(torch::equal(g, item.value()));  // num_batches_tracked
        }
      }
      std::vector<torch::Tensor> want_p, got_p;
      const auto wp = ref->named_parameters(), gp = synced[r]->named_parameters();
      double p_sq = 0;
      for (const auto& item : wp) {
        want_p.push_back(item.value());
        got_p.push_back(gp[item.key()]);
        p_sq += item.value().to(torch::kDouble).pow(2).sum().item<double>();
      }
      const double step_err = 0.1 * eps * std::sqrt(ref_grad_sq / p_sq) + 2 * u;
      CHECK(rel_diff(got_p, want_p) < step_err);
    }
  }
}

TEST_SUITE("cli") {
  TEST_CASE("dscache-train, 2 ranks, K = 2: bucketed overlapped all-reduce equals the flat one") {
    const char* exe = std::getenv("DSCACHE_TRAIN");
    REQUIRE_MESSAGE(exe != nullptr, "DSCACHE_TRAIN must name the built dscache-train");
    trainer_test::TempDir tmp;
    trainer_test::write_cache(tmp.path() + "/train", trainer_test::synthetic(96, 8, 8, 3, 4, 7));
    const std::string log = tmp.path() + "/log.txt";
    for (ModelKind kind : {ModelKind::kCnn, ModelKind::kResnet18}) {
      CAPTURE(to_string(kind));
      auto run_pair = [&](const std::string& bucket_mb, const std::string& out) {
        const std::vector<std::string> args = trainer_test::cat(
            {exe, "--train", tmp.path() + "/train", "--model", to_string(kind)},
            {"--batch", "4", "--accum-steps", "2", "--threads", "1", "--seed", "3", "--max-steps",
             "3", "--output", out, "--no-progress", "--bucket-mb", bucket_mb});
        for (int st : trainer_test::run_ranks(args, 2, {0, 1}, log)) {
          INFO(trainer_test::read_file(log));
          REQUIRE(WIFEXITED(st));
          REQUIRE(WEXITSTATUS(st) == 0);
        }
      };
      const std::string flat_dir = tmp.path() + "/flat-" + to_string(kind);
      const std::string bucket_dir = tmp.path() + "/bucketed-" + to_string(kind);
      run_pair("0", flat_dir);
      run_pair("0.05", bucket_dir);  // 50 KiB: several buckets even for cnn
      CHECK(trainer_test::read_file(log).find("buckets started during the last backward") !=
            std::string::npos);
      std::map<std::string, torch::Tensor> w[2];
      int i = 0;
      for (const std::string& dir : {flat_dir, bucket_dir}) {
        auto m = make_model(kind, 3, 4, 8, 8);
        torch::serialize::InputArchive a;
        a.load_from(dir + "/model.pt");
        m->load(a);
        for (const auto& p : m->named_parameters()) w[i][p.key()] = p.value().detach().clone();
        for (const auto& p : m->named_buffers()) w[i][p.key()] = p.value().detach().clone();
        ++i;
      }
      REQUIRE(w[0].size() == w[1].size());
      for (const auto& [name, t] : w[0]) {
        CAPTURE(name);
        const torch::Tensor d = (t.to(torch::kDouble) - w[1].at(name).to(torch::kDouble));
        CHECK(d.norm().item<double>() <= 1e-6 * t.to(torch::kDouble).norm().item<double>() + 1e-12);
      }
    }
  }
}
