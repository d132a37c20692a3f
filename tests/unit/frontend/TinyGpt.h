#ifndef AMPJIT_TESTS_UNIT_FRONTEND_TINYGPT_H
#define AMPJIT_TESTS_UNIT_FRONTEND_TINYGPT_H

// A small GPT-style language model, written as a user would with jit::nn and
// jit ops: token and position embeddings, a pre-LayerNorm block of causal
// single-head attention and a GELU MLP with residuals, and an output
// projection tied to the token embedding (GPT-2's weight tying). Shared by
// the trace tests (CPU) and the compiled-step GPU tests.

#include "jit/jit.h"

#include <cmath>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

namespace jit::testing::gpt {

inline constexpr int64_t kVocab = 13, kLength = 8, kDim = 16, kBatch = 4;

struct TinyGpt : nn::Module {
  /// With `dropout` > 0, dropout on the attention weights and on each
  /// residual branch, drawn from its own generator (seed + 1).
  explicit TinyGpt(uint64_t seed, double dropout = 0.0) : generator(seed), dropoutGenerator(seed + 1) {
    nn::InitOptions init{.generator = &generator};
    tokens = register_module("tokens", nn::Embedding(kVocab, kDim, std::nullopt, init));
    positions = register_module("positions", nn::Embedding(kLength, kDim, std::nullopt, init));
    norm1 = register_module("norm1", nn::LayerNorm({kDim}));
    query = register_module("query", nn::Linear(kDim, kDim, true, init));
    key = register_module("key", nn::Linear(kDim, kDim, true, init));
    value = register_module("value", nn::Linear(kDim, kDim, true, init));
    project = register_module("project", nn::Linear(kDim, kDim, true, init));
    norm2 = register_module("norm2", nn::LayerNorm({kDim}));
    up = register_module("up", nn::Linear(kDim, 4 * kDim, true, init));
    down = register_module("down", nn::Linear(4 * kDim, kDim, true, init));
    normOut = register_module("norm_out", nn::LayerNorm({kDim}));
    if (dropout > 0.0)
      drop = register_module("drop", nn::Dropout(dropout, &dropoutGenerator));
    // The causal mask: position t attends to positions <= t.
    std::vector<double> allowed;
    for (int64_t t = 0; t < kLength; ++t)
      for (int64_t s = 0; s < kLength; ++s)
        allowed.push_back(s <= t ? 1.0 : 0.0);
    causal = tensor(std::span<const double>(allowed), {kLength, kLength}, f32) > scalar_tensor(0.5, f32);
    std::vector<int64_t> places;
    for (int64_t t = 0; t < kLength; ++t)
      places.push_back(t);
    positionIds = tensor(std::span<const int64_t>(places), {kLength});
  }

  /// Logits [batch * length, vocab] for tokens [batch, length].
  Tensor forward(const Tensor& ids) override {
    Tensor x = (*tokens)(ids) + (*positions)(positionIds); // [B, T, D] + [T, D]
    Tensor h = (*norm1)(x);
    Tensor q = (*query)(h), k = (*key)(h), v = (*value)(h);
    Tensor scores = matmul(q, k, {.transpose_rhs = true}) * (1.0 / std::sqrt(double(kDim))); // [B, T, T]
    Tensor masked = where(causal, scores, full({}, -1e4, scores.dtype()));
    auto maybeDrop = [&](const Tensor& t) { return drop ? (*drop)(t) : t; };
    x = x + maybeDrop((*project)(matmul(maybeDrop(softmax(masked, -1)), v)));
    x = x + maybeDrop((*down)(gelu((*up)((*norm2)(x)), GeluApproximate::tanh)));
    Tensor out = reshape((*normOut)(x), {ids.shape()[0] * kLength, kDim});
    return matmul(out, tokens->weight, {.transpose_rhs = true}); // tied to the embedding
  }

  Generator generator, dropoutGenerator;
  std::shared_ptr<nn::Dropout> drop; ///< null without dropout
  std::shared_ptr<nn::Embedding> tokens, positions;
  std::shared_ptr<nn::LayerNorm> norm1, norm2, normOut;
  std::shared_ptr<nn::Linear> query, key, value, project, up, down;
  Tensor causal, positionIds;
};

/// Sequences counting up modulo kVocab from a random start; the targets are
/// the next tokens, which the model can learn to predict exactly.
inline std::pair<Tensor, Tensor> countingBatch(uint64_t seed) {
  std::vector<int64_t> ids, next;
  for (int64_t b = 0; b < kBatch; ++b) {
    int64_t start = int64_t((seed * 31 + uint64_t(b) * 7) % uint64_t(kVocab));
    for (int64_t t = 0; t < kLength; ++t) {
      ids.push_back((start + t) % kVocab);
      next.push_back((start + t + 1) % kVocab);
    }
  }
  return {tensor(std::span<const int64_t>(ids), {kBatch, kLength}),
          tensor(std::span<const int64_t>(next), {kBatch * kLength})};
}

/// One step of the language model as people write it: zero the gradients,
/// the loss, a scaled backward, unscale_ and clip, the scaler's step and update.
template <typename Optimizer>
Tensor clippedScaledStep(TinyGpt& model, Optimizer& opt, amp::GradScaler& scaler, const Tensor& ids,
                         const Tensor& next, double maxNorm) {
  opt.zero_grad();
  Tensor loss = cross_entropy(model(ids), next);
  scaler.scale(loss).backward();
  scaler.unscale_(opt);
  clip_grad_norm_(model.parameters(), maxNorm);
  scaler.step(opt);
  scaler.update();
  return loss;
}

struct GptTrainer {
  explicit GptTrainer(double initialScale, double dropout = 0.0)
      : model(7, dropout), opt(model.parameters(), {.lr = 3e-3, .weight_decay = 0.01}), scaler({.init_scale = initialScale}) {}
  Tensor step(const Tensor& ids, const Tensor& next) { return clippedScaledStep(model, opt, scaler, ids, next, 1.0); }
  TinyGpt model;
  optim::AdamW opt;
  amp::GradScaler scaler;
};

} // namespace jit::testing::gpt

#endif // AMPJIT_TESTS_UNIT_FRONTEND_TINYGPT_H
