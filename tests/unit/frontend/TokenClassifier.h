#ifndef AMPJIT_TESTS_UNIT_FRONTEND_TOKENCLASSIFIER_H
#define AMPJIT_TESTS_UNIT_FRONTEND_TOKENCLASSIFIER_H

// A token classifier (an embedding with a padding row, flattened, an MLP)
// trained with Adam and a scaler that starts by overflowing f16: shared by
// the embedding tests (CPU) and the compiled-step GPU tests.

#include "jit/jit.h"

#include <random>
#include <span>
#include <utility>
#include <vector>

namespace jit::testing {

inline Tensor indicesOf(const std::vector<int64_t>& values, Shape shape) {
  return tensor(std::span<const int64_t>(values), std::move(shape));
}

/// Indices uniform in [0, rows), seeded.
inline Tensor randomIndices(Shape shape, int64_t rows, uint64_t seed) {
  std::mt19937_64 rng(seed);
  int64_t count = 1;
  for (int64_t d : shape)
    count *= d;
  std::vector<int64_t> values(static_cast<size_t>(count));
  for (int64_t& v : values)
    v = int64_t(rng() % uint64_t(rows));
  return indicesOf(values, std::move(shape));
}

/// Tokens -> embedding -> flattened -> MLP -> classes.
struct TokenClassifier {
  static constexpr int64_t kVocab = 40, kDim = 8, kLength = 6, kHidden = 24, kClasses = 5;
  explicit TokenClassifier(double initialScale = 1e6)
      : generator(8), embed(kVocab, kDim, 0, {.generator = &generator}),
        head(nn::Linear(kLength * kDim, kHidden, true, {.generator = &generator}), nn::ReLU(),
             nn::Linear(kHidden, kClasses, true, {.generator = &generator})),
        opt(parameters(), {.lr = 1e-2}), scaler({.init_scale = initialScale, .growth_interval = 2}) {}
  std::vector<Tensor> parameters() const {
    std::vector<Tensor> all = embed.parameters();
    for (const Tensor& p : head.parameters())
      all.push_back(p);
    return all;
  }
  Tensor step(const Tensor& tokens, const Tensor& labels) {
    opt.zero_grad();
    Tensor features = reshape(embed(tokens), {tokens.shape()[0], kLength * kDim});
    Tensor loss = cross_entropy(head(features), labels);
    scaler.scale(loss).backward();
    scaler.step(opt);
    scaler.update();
    return loss;
  }
  Generator generator;
  nn::Embedding embed;
  nn::Sequential head;
  optim::Adam opt;
  amp::GradScaler scaler;
};

inline std::pair<Tensor, Tensor> tokenBatch(uint64_t seed) {
  return {randomIndices({16, TokenClassifier::kLength}, TokenClassifier::kVocab, seed),
          randomIndices({16}, TokenClassifier::kClasses, seed + 1000)};
}

} // namespace jit::testing

#endif // AMPJIT_TESTS_UNIT_FRONTEND_TOKENCLASSIFIER_H
