// Tensors: creation, dtypes, printing, generators, the op table against the
// runtime's, and the messages of shape and dtype errors.

#include "Dispatch.h"
#include "FrontendTestUtil.h"

#include "ampjit/runtime/StepBuilder.h"

#include <set>

using namespace jit;
using jit::testing::errorOf;

TEST(TensorTest, CreationShapeDtypeAndValues) {
  Tensor t = tensor({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(t.shape(), (Shape{2, 3}));
  EXPECT_EQ(t.dtype(), f32);
  EXPECT_EQ(t.device(), Device::cpu);
  EXPECT_EQ(t.numel(), 6);
  EXPECT_EQ(t.size(-1), 3);
  EXPECT_EQ(t.to_vector(), (std::vector<double>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(t.data_ptr<float>()[4], 5.0f);
  EXPECT_NE(errorOf([&] { t.data_ptr<double>(); }), "");

  EXPECT_EQ(full({2, 2}, 0.1, f16).to_vector()[3], 0.0999755859375); // 0.1 rounded to f16
  EXPECT_EQ(zeros({3}, f64).to_vector(), (std::vector<double>{0, 0, 0}));
  EXPECT_EQ(ones({}, i64).item(), 1.0);
  EXPECT_EQ(scalar_tensor(2.5).dim(), 0);
  const int64_t labels[] = {3, -1, int64_t(1) << 60};
  EXPECT_EQ(tensor(std::span<const int64_t>(labels), {3}).data_ptr<int64_t>()[2], int64_t(1) << 60);
  EXPECT_NE(errorOf([] { tensor({1, 2, 3}, {2, 2}); }).find("3 values for shape [2x2]"), std::string::npos);
  EXPECT_NE(errorOf([] { tensor({1, 2}, {2}).item(); }).find("one element"), std::string::npos);
}

TEST(TensorTest, ConvertRoundsToNearestEven) {
  // 1 + 2^-11 is halfway between two f16 values: ties to even gives 1.
  Tensor x = tensor({1.0 + 0x1p-11, 1.0 + 3 * 0x1p-11, -2.7, 0.0}, f64);
  EXPECT_EQ(x.to(f16).to_vector(), (std::vector<double>{1.0, 1.0 + 0x1p-9, -2.69921875, 0.0}));
  EXPECT_EQ(x.to(i64).to_vector(), (std::vector<double>{1, 1, -2, 0}));
  EXPECT_EQ(x.to(i1).to_vector(), (std::vector<double>{1, 1, 1, 0}));
  EXPECT_EQ(x.to(bf16).dtype(), bf16);
}

TEST(TensorTest, RandomTensorsAreTheDrawsInOrderEachRoundedOnce) {
  // rand and randn store each draw as it comes; the values are those of
  // jit::tensor over the same draws in doubles, in every floating dtype.
  for (DType dtype : {f32, f64, f16, bf16}) {
    Generator drawn(5), direct(5);
    Tensor uniform = rand({3, 7}, dtype, &drawn);
    Tensor normal = randn({11}, dtype, &drawn);
    std::vector<double> uniforms(21), normals(11);
    for (double& v : uniforms)
      v = direct.next_uniform();
    for (double& v : normals)
      v = direct.next_normal();
    // Every value of these dtypes is exact in a double, and none is NaN or -0.
    EXPECT_EQ(uniform.to_vector(), tensor(std::span<const double>(uniforms), {3, 7}, dtype).to_vector())
        << dtype_name(dtype);
    EXPECT_EQ(normal.to_vector(), tensor(std::span<const double>(normals), {11}, dtype).to_vector())
        << dtype_name(dtype);
    EXPECT_EQ(uniform.dtype(), dtype);
    EXPECT_EQ(uniform.shape(), (Shape{3, 7}));
  }
}

TEST(TensorTest, GeneratorsAreSeededAndReproducible) {
  Generator a(42), b(42), c(7);
  std::vector<double> ra = randn({64}, f32, &a).to_vector();
  EXPECT_EQ(ra, randn({64}, f32, &b).to_vector());
  EXPECT_NE(ra, randn({64}, f32, &c).to_vector());
  double mean = 0;
  for (double v : ra)
    mean += v / 64;
  EXPECT_LT(std::fabs(mean), 0.5);
  for (double v : rand({100}, f64, &a).to_vector()) {
    EXPECT_GE(v, 0.0);
    EXPECT_LT(v, 1.0);
  }
  manual_seed(3);
  std::vector<double> first = rand({4}).to_vector();
  manual_seed(3);
  EXPECT_EQ(first, rand({4}).to_vector());
  EXPECT_EQ(default_generator().rng_state().to_vector(), (std::vector<double>{3, 0}));
}

TEST(TensorTest, DropoutAdvancesTheGeneratorState) {
  Generator generator(5);
  Tensor x = ones({4, 8});
  Tensor y1 = dropout(x, 0.5, true, &generator);
  EXPECT_EQ(generator.rng_state().to_vector(), (std::vector<double>{5, 32}));
  Tensor y2 = dropout(x, 0.5, true, &generator);
  EXPECT_NE(y1.to_vector(), y2.to_vector());
  for (double v : y1.to_vector())
    EXPECT_TRUE(v == 0.0 || v == 2.0);
  EXPECT_TRUE(dropout(x, 0.5, /*training=*/false).is_same(x));
}

TEST(TensorTest, PrintsLikePyTorch) {
  EXPECT_EQ(to_string(tensor({1, 2.5, 3, 4}, {2, 2})), "tensor([[1.0000, 2.5000],\n        [3.0000, 4.0000]])");
  EXPECT_EQ(to_string(tensor({1, 2}, f16)), "tensor([1.0000, 2.0000], dtype=f16)");
  EXPECT_EQ(to_string(tensor({1, 0}, i1)), "tensor([True, False], dtype=i1)");
  EXPECT_EQ(to_string(scalar_tensor(3, i64)), "tensor(3)");
  Tensor w = tensor({1, 2});
  w.requires_grad_();
  EXPECT_EQ(to_string(w), "tensor([1.0000, 2.0000], requires_grad=True)");
  EXPECT_EQ(to_string(w * 2.0), "tensor([2.0000, 4.0000], grad_fn=<jit.mul>)");
  EXPECT_EQ(to_string(tensor({1e-6, 1})), "tensor([1.0000e-06, 1.0000e+00])");
  std::string big = to_string(zeros({2000}));
  EXPECT_NE(big.find("0.0000, 0.0000, 0.0000, ..., 0.0000"), std::string::npos) << big;
}

TEST(TensorTest, ShapeAndDtypeErrorsNameTheOpAndOperands) {
  Tensor a = zeros({2, 3}), b = zeros({4});
  EXPECT_EQ(errorOf([&] { a + b; }),
            "jit.add: operand 'rhs' f32[4] does not broadcast with operand 'lhs' f32[2x3]: dimension -1 would be "
            "both 3 and 4");
  EXPECT_EQ(errorOf([&] { a * zeros({2, 3}, f16); }),
            "jit.mul: operand 'rhs' f16[2x3] must have the element type of operand 'lhs' f32[2x3] (ops never "
            "convert implicitly; use Tensor::to)");
  EXPECT_EQ(errorOf([&] { matmul(a, zeros({2, 5})); }),
            "jit.matmul: contraction dimensions differ: operand 'lhs' f32[2x3] has 3 columns but operand 'rhs' "
            "f32[2x5] has 2 rows");
  EXPECT_NE(errorOf([&] { matmul(zeros({2, 2, 3}), zeros({3, 3, 4})); }).find("batch dimensions"), std::string::npos);
  EXPECT_NE(errorOf([&] { reshape(a, {4, 2}); }).find("jit.reshape: cannot reshape operand 'input' f32[2x3]"),
            std::string::npos);
  EXPECT_NE(errorOf([&] { sum(a, {2}); }).find("jit.sum: axis 2 is out of range"), std::string::npos);
  EXPECT_NE(errorOf([&] { cross_entropy(a, zeros({3}, i64)); }).find("operand 'labels' i64[3] must be i64[2]"),
            std::string::npos);
  EXPECT_NE(errorOf([&] { relu(zeros({2}, i64)); }).find("jit.relu: operand 'input' i64[2] must be floating"),
            std::string::npos);
  EXPECT_NE(errorOf([&] { where(a, a, a); }).find("operand 'condition' f32[2x3] must be i1"), std::string::npos);
  EXPECT_NE(errorOf([&] { layer_norm(a, {2}); }).find("normalized_shape [2] must be the trailing"), std::string::npos);
  EXPECT_NE(errorOf([&] { Tensor().shape(); }).find("undefined tensor"), std::string::npos);
  // Errors the runtime's checks find still arrive as jit::Error naming the op.
  EXPECT_NE(errorOf([&] { layer_norm(a, {3}, {}, {}, -1.0); }).find("jit.layer_norm"), std::string::npos);
}

TEST(TensorTest, OpTableCoversEveryJitOpOfTheStepBuilder) {
  std::set<std::string> table;
  for (const jit::detail::OpDef* op : jit::detail::allOps())
    EXPECT_TRUE(table.insert(std::string(op->name)).second) << op->name << " twice";
  // amp.cast is AMP's own (inserted by the pass, never called by a user).
  for (const auto& op : ampjit::runtime::supportedOps()) {
    std::string name(op.name);
    if (name != "amp.cast") {
      EXPECT_TRUE(table.count(name)) << name << " has no entry in the frontend's op table";
    }
  }
  for (const std::string& name : table)
    EXPECT_TRUE(ampjit::runtime::stepKindOf(name).has_value()) << name << " is unknown to the StepBuilder";
  for (const jit::detail::OpDef* op : jit::detail::allOps())
    EXPECT_EQ(op->vjp != nullptr, op->differentiability == jit::detail::Differentiability::Vjp) << op->name;
}
