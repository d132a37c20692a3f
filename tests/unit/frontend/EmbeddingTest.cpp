// jit.embedding / jit.embedding_grad and nn::Embedding: the gather against
// the table, the gradient against sums computed by hand (repeated rows in
// fp32, the padding row zero), the errors a bad index or table gives, and a
// small token classifier traced beside eager at O0, O1 and O2.

#include "ClassifierNet.h"
#include "FrontendTestUtil.h"
#include "TokenClassifier.h"

#include "jit/jit.h"

#include <cmath>
#include <random>

namespace jit::testing {
namespace {

TEST(Embedding, GathersTheIndexedRowsBitForBitInAnyShape) {
  Generator generator(3);
  for (DType dtype : {f32, f16, bf16, f64}) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    Tensor table = randn({7, 3}, dtype, &generator);
    std::vector<double> rows = table.to_vector();
    Tensor ids = indicesOf({6, 0, 2, 2, 5, 1}, {2, 3});
    Tensor y = embedding(ids, table);
    EXPECT_EQ(y.shape(), (Shape{2, 3, 3}));
    EXPECT_EQ(y.dtype(), dtype);
    std::vector<double> got = y.to_vector();
    std::vector<int64_t> idList = {6, 0, 2, 2, 5, 1};
    for (size_t n = 0; n < idList.size(); ++n)
      for (size_t d = 0; d < 3; ++d)
        EXPECT_EQ(got[n * 3 + d], rows[size_t(idList[n]) * 3 + d]) << "index " << n << " column " << d;
  }
  // A rank-0 index gives one row.
  Tensor table = tensor({1.0, 2.0, 3.0, 4.0}, {2, 2}, f32);
  EXPECT_EQ(embedding(indicesOf({1}, {}), table).to_vector(), (std::vector<double>{3.0, 4.0}));
}

TEST(Embedding, TheGradientSumsRepeatedRowsAndKeepsThePaddingRowZero) {
  Generator generator(4);
  Tensor table = randn({5, 2}, f64, &generator).requires_grad_();
  Tensor ids = indicesOf({3, 1, 3, 0, 3, 4}, {6});
  Tensor weights = randn({6, 2}, f64, &generator);
  sum(embedding(ids, table, 0) * weights).backward();
  std::vector<double> w = weights.to_vector(), grad = table.grad().to_vector();
  std::vector<double> expected(10, 0.0);
  std::vector<int64_t> idList = {3, 1, 3, 0, 3, 4};
  for (size_t n = 0; n < idList.size(); ++n)
    if (idList[n] != 0)
      for (size_t d = 0; d < 2; ++d)
        expected[size_t(idList[n]) * 2 + d] += w[n * 2 + d];
  for (size_t i = 0; i < expected.size(); ++i)
    EXPECT_NEAR(grad[i], expected[i], 1e-15) << i;
  EXPECT_EQ(grad[0], 0.0); // padding_idx 0 was read but gets no gradient
  EXPECT_EQ(grad[2 * 2], 0.0); // row 2 is never read
  // A negative padding_idx counts from the end, as PyTorch's.
  table.zero_grad();
  sum(embedding(ids, table, -1) * weights).backward();
  EXPECT_EQ(table.grad().to_vector()[8], 0.0);
  EXPECT_NE(table.grad().to_vector()[0], 0.0);
}

TEST(Embedding, LowPrecisionGradientsAccumulateInFp32) {
  // 3000 ones into one f16 row: summed in f16 the total sticks at 2048,
  // where adding 1 rounds back down; summed in fp32 it is 3000, exact in f16.
  for (DType dtype : {f16, bf16}) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    Tensor ids = indicesOf(std::vector<int64_t>(3000, 2), {3000});
    Tensor grad = embedding_grad(ones({3000, 4}, dtype), ids, 4);
    std::vector<double> row = grad.to_vector();
    double expected = dtype == f16 ? 3000.0 : 3008.0; // bf16 rounds 3000 to its nearest, 3008
    for (size_t d = 0; d < 4; ++d) {
      EXPECT_EQ(row[2 * 4 + d], expected) << d;
      EXPECT_EQ(row[d], 0.0);
    }
  }
}

TEST(Embedding, BadIndicesTablesAndPaddingAreClearErrors) {
  Tensor table = zeros({10, 3});
  std::string message = errorOf([&] { embedding(indicesOf({1, 10, 2}, {3}), table); });
  EXPECT_NE(message.find("index 10 at position 1 is outside the table's rows [0, 10)"), std::string::npos)
      << message;
  message = errorOf([&] { embedding(indicesOf({-1}, {1}), table); });
  EXPECT_NE(message.find("index -1 at position 0"), std::string::npos) << message;
  message = errorOf([&] { embedding(zeros({3}), table); });
  EXPECT_NE(message.find("jit.embedding: operand 'indices'"), std::string::npos) << message;
  EXPECT_NE(message.find("must hold i64 indices"), std::string::npos) << message;
  message = errorOf([&] { embedding(indicesOf({1}, {1}), zeros({10})); });
  EXPECT_NE(message.find("must have rank 2: [num_embeddings, embedding_dim]"), std::string::npos) << message;
  message = errorOf([&] { embedding(indicesOf({1}, {1}), table, 10); });
  EXPECT_NE(message.find("padding_idx 10 is not a row of a table of 10 rows"), std::string::npos) << message;
  message = errorOf([&] { nn::Embedding(10, 3, -11); });
  EXPECT_NE(message.find("nn::Embedding: padding_idx -11"), std::string::npos) << message;
  message = errorOf([&] { nn::Embedding(0, 3); });
  EXPECT_NE(message.find("must be positive"), std::string::npos) << message;
  message = errorOf([&] { embedding_grad(zeros({3, 2}), indicesOf({1, 2}, {2}), 5); });
  EXPECT_NE(message.find("must have the shape of operand 'indices'"), std::string::npos) << message;
}

TEST(Embedding, TheModuleDrawsNormalRowsAndNeverMovesItsPaddingRow) {
  Generator generator(5);
  nn::Embedding embed(200, 50, 3, {.generator = &generator});
  std::vector<double> values = embed.weight.to_vector();
  double mean = 0, square = 0;
  for (double v : values) {
    mean += v;
    square += v * v;
  }
  mean /= double(values.size());
  double deviation = std::sqrt(square / double(values.size()) - mean * mean);
  EXPECT_NEAR(mean, 0.0, 0.05);
  EXPECT_NEAR(deviation, 1.0, 0.05);
  for (int64_t d = 0; d < 50; ++d)
    EXPECT_EQ(values[size_t(3 * 50 + d)], 0.0);
  EXPECT_EQ(embed.named_parameters().front().first, "weight");
  optim::SGD opt(embed.parameters(), {.lr = 0.5, .momentum = 0.9});
  for (int s = 0; s < 3; ++s) {
    opt.zero_grad();
    sum(embed(indicesOf({3, 7, 3, 9}, {2, 2})) * 2.0).backward();
    opt.step();
  }
  std::vector<double> after = embed.weight.to_vector();
  for (int64_t d = 0; d < 50; ++d) {
    EXPECT_EQ(after[size_t(3 * 50 + d)], 0.0) << "the padding row moved";
    EXPECT_NE(after[size_t(7 * 50 + d)], values[size_t(7 * 50 + d)]);
  }
}

TEST(Embedding, ATokenClassifierTracesAsItRunsEagerly) {
  // Bitwise at O0 and, with autocast semantics, at O1 (f16 GEMMs, an fp32
  // table gradient, overflowing first steps skipped).
  for (amp::Level level : {amp::O0, amp::O1}) {
    SCOPED_TRACE(::testing::Message() << "O" << int(level));
    TokenClassifier eager, traced;
    expectTracedLossesEqualEager(
        level, [&](const Tensor& x, const Tensor& y) { return eager.step(x, y); },
        [&](const Tensor& x, const Tensor& y) { return traced.step(x, y); },
        [](uint64_t i) { return tokenBatch(30 + i); }, 6);
    EXPECT_EQ(traced.embed.weight.to_vector(), eager.embed.weight.to_vector());
    if (level != amp::O0) {
      EXPECT_GT(eager.scaler.skipped_steps(), 0);
    }
  }
}

TEST(Embedding, ATokenClassifierAtO2AndO3TracksO0) {
  std::vector<std::vector<double>> losses;
  for (amp::Level level : {amp::O0, amp::O2, amp::O3}) {
    SCOPED_TRACE(::testing::Message() << "O" << int(level));
    TokenClassifier net(1024.0); // no overflow: every level takes every step
    auto step = trace([&](const Tensor& x, const Tensor& y) { return net.step(x, y); },
                      {.amp = policyAt(level), .backend = Backend::cpu, .log_retraces = false});
    losses.emplace_back();
    for (uint64_t i = 0; i < 8; ++i) {
      auto [x, y] = tokenBatch(50 + i % 2);
      losses.back().push_back(step(x, y).item());
    }
    EXPECT_LT(losses.back().back(), losses.back().front()) << "the classifier should fit two batches";
  }
  for (size_t level = 1; level < losses.size(); ++level)
    for (size_t i = 0; i < losses[0].size(); ++i)
      EXPECT_NEAR(losses[level][i], losses[0][i], 5e-3 * losses[0][i]) << "level " << level << " step " << i;
}

TEST(Embedding, ABadIndexInATracedStepIsAnErrorAtTheUsersLineAndChangesNothing) {
  TokenClassifier net;
  auto step = trace([&](const Tensor& x, const Tensor& y) { return net.step(x, y); }, {.backend = Backend::cpu});
  auto [x, y] = tokenBatch(70);
  step(x, y);
  std::vector<double> before = net.embed.weight.to_vector();
  std::vector<int64_t> ids(size_t(16 * TokenClassifier::kLength), 1);
  ids[5] = TokenClassifier::kVocab; // one past the table
  Tensor bad = tensor(std::span<const int64_t>(ids), {16, TokenClassifier::kLength});
  std::string message = errorOf([&] { step(bad, y); });
  EXPECT_NE(message.find("index 40 at position 5 is outside the table's rows [0, 40)"), std::string::npos) << message;
  EXPECT_NE(message.find("jit.embedding"), std::string::npos) << message;
  EXPECT_NE(message.find("TokenClassifier.h:"), std::string::npos) << message; // the step's line
  EXPECT_EQ(net.embed.weight.to_vector(), before) << "a failed step must not update";
  // The step still runs, and updates again.
  EXPECT_TRUE(std::isfinite(step(x, y).item()));
  EXPECT_NE(net.embed.weight.to_vector(), before);
}

} // namespace
} // namespace jit::testing
