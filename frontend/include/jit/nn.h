#ifndef JIT_NN_H
#define JIT_NN_H

// jit::nn: modules in PyTorch's shape (torch.nn), built from the public
// jit:: ops, so a module's forward runs eagerly and records under tracing
// like any user code.
//
// A module owns its parameters through jit::Tensor handles (shared), so a
// module may be moved or copied: a copy shares the parameters with the
// original, as two Python references to one nn.Module would. Child modules
// are held by std::shared_ptr for the same reason.
//
// A user-built module:
//
//   struct Mlp : jit::nn::Module {
//     std::shared_ptr<jit::nn::Linear> fc1, fc2;
//     jit::Tensor scale;
//     Mlp() {
//       fc1 = register_module("fc1", jit::nn::Linear(784, 32));
//       fc2 = register_module("fc2", jit::nn::Linear(32, 10));
//       scale = register_parameter("scale", jit::ones({10}));
//     }
//     jit::Tensor forward(const jit::Tensor& x) override {
//       return (*fc2)(jit::relu((*fc1)(x))) * scale;
//     }
//   };
//
// Its named_parameters() are "scale", "fc1.weight", "fc1.bias", "fc2.weight",
// "fc2.bias": a module's own entries first, then each child's in registration
// order (PyTorch's order).

#include "jit/Ops.h"
#include "jit/Tensor.h"

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace jit {
namespace nn {
class Module;
}
namespace detail {
struct ModulePlace; // where a module sits in the tree that holds it (Dispatch.h)
/// Inside jit::trace, records that the step's behaviour depends on this
/// module's training flag (a guard); nothing outside a trace.
void noteTrainingModeRead(const std::shared_ptr<const bool>& flag, const nn::Module& module);
} // namespace detail
} // namespace jit

namespace jit::nn {

class Module {
public:
  Module();
  virtual ~Module() = default;
  // Copying shares the state (parameters, buffers, children, the training
  // flag), as a Python reference would. There is no separate move: a
  // moved-from module keeps sharing it too, so it stays usable.
  Module(const Module&) = default;
  Module& operator=(const Module&) = default;

  /// The computation. Modules that take other arguments define their own
  /// call operator; this one is what Sequential chains.
  virtual Tensor forward(const Tensor& input) = 0;
  Tensor operator()(const Tensor& input, std::source_location where = std::source_location::current()) {
    detail::UserFrame frame(where);
    return forward(input);
  }

  /// Every parameter (own first, then children's, recursively), in registration order.
  std::vector<Tensor> parameters() const;
  std::vector<NamedTensor> named_parameters() const;
  std::vector<NamedTensor> named_buffers() const;
  /// Parameters and buffers, per module own parameters, own buffers, then
  /// children (PyTorch's state_dict order). What save/load read and write.
  std::vector<NamedTensor> state_dict() const;
  /// Direct children, in registration order.
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& named_children() const { return children_; }

  /// Training mode (Dropout drops only in it), set recursively; on by default.
  Module& train(bool on = true);
  Module& eval() { return train(false); }
  /// Whether the module is in training mode. Reading it inside jit::trace
  /// makes the mode a guard of the traced step: after train()/eval() flips
  /// it, the next call retraces (or reuses the variant traced in that mode).
  bool is_training() const;

  /// Drops (or zero-fills) every parameter's gradient.
  void zero_grad(bool set_to_none = true);
  /// Sets requires_grad on every parameter, recursively (freezing a layer
  /// for fine-tuning). A traced step that reads them retraces: which
  /// gradients it computes is part of it.
  Module& requires_grad_(bool requires_grad = true);

  /// This module ("") and every descendant, named as in state_dict()
  /// ("1", "1.0", ...), parents before their children.
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_modules();
  /// Calls `fn` on every descendant, children before their parents, then on
  /// this module (torch.nn.Module.apply; e.g. a custom initialisation).
  Module& apply(const std::function<void(Module&)>& fn);

  /// Writes state_dict() to `path` in ampjit's versioned binary format
  /// (see lib/nn/Serialize.cpp for the layout).
  void save(const std::string& path) const;
  /// Reads a file written by save() into this module's state. Every entry
  /// must match by name, dtype and shape; the file is checked completely
  /// before any tensor changes, so a failed load leaves the module as it was.
  /// Errors (jit::Error) name the file and, where there is one, the entry.
  void load(const std::string& path);

  /// Loads one state entry from a NumPy .npy file (little-endian f2/f4/f8,
  /// C order) holding the tensor in PyTorch's layout (Linear weight [out, in]).
  /// The shape must match; the values are rounded once to the entry's dtype.
  void load_npy(const std::string& name, const std::string& path);
  /// load_npy for every parameter (and buffer) from "<dir>/<name>.npy", as
  /// written by `np.save(f"{dir}/{name}.npy", t.numpy())` over a PyTorch
  /// state_dict. Checked completely before any tensor changes.
  void load_npy_dir(const std::string& dir);

protected:
  /// Registers a parameter (marked requires_grad) and returns the same handle,
  /// so a member can keep it. Names are unique among a module's entries and
  /// contain no '.'.
  Tensor register_parameter(std::string name, Tensor tensor, bool requires_grad = true);
  /// State that is saved but not trained (PyTorch's buffers).
  Tensor register_buffer(std::string name, Tensor tensor);
  /// Registers a child module, taking it by value (moved into shared
  /// ownership), and returns the shared handle.
  template <typename M>
    requires std::is_base_of_v<Module, std::decay_t<M>> && (!std::is_lvalue_reference_v<M>)
  std::shared_ptr<std::decay_t<M>> register_module(std::string name, M&& module) {
    auto shared = std::make_shared<std::decay_t<M>>(std::move(module));
    addChild(std::move(name), shared);
    return shared;
  }
  template <typename M>
    requires std::is_base_of_v<Module, M>
  std::shared_ptr<M> register_module(std::string name, std::shared_ptr<M> module) {
    addChild(std::move(name), module);
    return module;
  }

private:
  void checkNewName(const std::string& name) const;
  void addChild(std::string name, std::shared_ptr<Module> child);
  void collect(const std::string& prefix, bool parameters, bool buffers, std::vector<NamedTensor>& out) const;

  std::vector<NamedTensor> parameters_;
  std::vector<NamedTensor> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  /// Shared, like the rest of a module's state, so a traced step's guard can
  /// hold it beyond the module's lifetime.
  std::shared_ptr<bool> training_ = std::make_shared<bool>(true);
  /// Its name in the module that registered it, for traced steps' state names;
  /// shared like the rest of the state.
  std::shared_ptr<detail::ModulePlace> place_;
};

/// How a module makes its parameters.
struct InitOptions {
  DType dtype = f32;
  /// Draws the initial values; nullptr means default_generator().
  Generator* generator = nullptr;
};

/// y = x W^T + b with W [out_features, in_features] (torch.nn.Linear's layout),
/// W and b uniform in [-1/sqrt(in), 1/sqrt(in)] (PyTorch's default init:
/// kaiming_uniform_ with a = sqrt(5) gives exactly that bound), weight drawn
/// first, row-major. forward is jit::linear: under autocast the bias is added
/// in the product's type, so the layer returns f16 as torch's does.
class Linear : public Module {
public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true, InitOptions options = {});
  Tensor forward(const Tensor& input) override;

  int64_t in_features() const { return inFeatures_; }
  int64_t out_features() const { return outFeatures_; }
  Tensor weight;
  Tensor bias; ///< undefined without bias

private:
  int64_t inFeatures_;
  int64_t outFeatures_;
};

/// torch.nn.Embedding: a [num_embeddings, embedding_dim] table drawn from
/// N(0, 1) (PyTorch's init), the `padding_idx` row (negative counts from the
/// end) zero and never updated by its gradient. forward(indices) takes i64
/// indices of any shape and returns [indices..., embedding_dim].
class Embedding : public Module {
public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim, std::optional<int64_t> padding_idx = std::nullopt,
            InitOptions options = {});
  Tensor forward(const Tensor& indices) override;

  int64_t num_embeddings() const { return weight.shape()[0]; }
  int64_t embedding_dim() const { return weight.shape()[1]; }
  Tensor weight;

private:
  std::optional<int64_t> paddingIdx_;
};

class ReLU : public Module {
public:
  Tensor forward(const Tensor& input) override { return relu(input); }
};

class GELU : public Module {
public:
  explicit GELU(GeluApproximate approximate = GeluApproximate::none) : approximate_(approximate) {}
  Tensor forward(const Tensor& input) override { return gelu(input, approximate_); }

private:
  GeluApproximate approximate_;
};

class Tanh : public Module {
public:
  Tensor forward(const Tensor& input) override { return tanh(input); }
};

class Sigmoid : public Module {
public:
  Tensor forward(const Tensor& input) override { return sigmoid(input); }
};

/// x * sigmoid(x) (torch.nn.SiLU, "swish"), composed of the two ops.
class SiLU : public Module {
public:
  Tensor forward(const Tensor& input) override { return input * sigmoid(input); }
};

/// x where x > 0, negative_slope * x elsewhere (NaN stays NaN), as a select,
/// so the gradient is negative_slope at 0, as PyTorch's.
class LeakyReLU : public Module {
public:
  explicit LeakyReLU(double negative_slope = 0.01) : negativeSlope_(negative_slope) {}
  Tensor forward(const Tensor& input) override;

private:
  double negativeSlope_;
};

/// Softmax along `dim` (negative counts from the end).
class Softmax : public Module {
public:
  explicit Softmax(int64_t dim) : dim_(dim) {}
  Tensor forward(const Tensor& input) override { return softmax(input, dim_); }

private:
  int64_t dim_;
};

/// Log-softmax along `dim` (negative counts from the end).
class LogSoftmax : public Module {
public:
  explicit LogSoftmax(int64_t dim) : dim_(dim) {}
  Tensor forward(const Tensor& input) override { return log_softmax(input, dim_); }

private:
  int64_t dim_;
};

/// Normalises over the trailing `normalized_shape`; weight ones, bias zeros.
class LayerNorm : public Module {
public:
  explicit LayerNorm(Shape normalized_shape, double eps = 1e-5, bool elementwise_affine = true,
                     InitOptions options = {});
  Tensor forward(const Tensor& input) override;

  Tensor weight; ///< undefined without elementwise_affine
  Tensor bias;

private:
  Shape normalizedShape_;
  double eps_;
};

/// Zeroes with probability p and scales by 1/(1-p) in training mode; the
/// identity in eval mode. Draws from `generator` (default_generator() if null).
class Dropout : public Module {
public:
  explicit Dropout(double p = 0.5, Generator* generator = nullptr);
  Tensor forward(const Tensor& input) override;

private:
  double p_;
  Generator* generator_;
};

/// Flattens dimensions start_dim..end_dim into one.
class Flatten : public Module {
public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1) : startDim_(start_dim), endDim_(end_dim) {}
  Tensor forward(const Tensor& input) override;

private:
  int64_t startDim_;
  int64_t endDim_;
};

/// torch.nn.Conv2d: weight [out, in/groups, kh, kw] and bias [out], uniform
/// in [-1/sqrt(fan_in), 1/sqrt(fan_in)] with fan_in = in/groups * kh * kw
/// (PyTorch's default init), weight drawn first.
class Conv2d : public Module {
public:
  Conv2d(int64_t in_channels, int64_t out_channels, Pair kernel_size, Conv2dOptions options = {},
         bool bias = true, InitOptions init = {});
  Tensor forward(const Tensor& input) override;

  const Conv2dOptions& options() const { return options_; }
  Tensor weight;
  Tensor bias; ///< undefined without bias

private:
  Conv2dOptions options_;
};

/// What BatchNorm1d and BatchNorm2d share (torch's _BatchNorm), over
/// channel axis 1: weight ones and bias zeros (affine), buffers running_mean
/// zeros and running_var ones (track_running_stats), all f32 (f64 when
/// InitOptions asks for f64) since batch norm keeps fp32 statistics for
/// low-precision activations. Training mode normalises with the batch's
/// statistics and updates the running ones in place, also on steps the loss
/// scaler skips (as PyTorch). PyTorch's num_batches_tracked is not kept: it
/// only matters for momentum=None.
class BatchNorm : public Module {
public:
  Tensor forward(const Tensor& input) override;

  Tensor weight; ///< undefined without affine
  Tensor bias;
  Tensor running_mean; ///< undefined without track_running_stats
  Tensor running_var;

protected:
  /// `name` and `shapes` (e.g. "NCHW") for messages; `ranks` the input ranks taken.
  BatchNorm(const char* name, std::vector<int64_t> ranks, const char* shapes, int64_t num_features, double eps,
            double momentum, bool affine, bool track_running_stats, InitOptions init);

private:
  const char* name_;
  std::vector<int64_t> ranks_;
  const char* shapes_;
  int64_t numFeatures_;
  double eps_;
  double momentum_;
};

/// torch.nn.BatchNorm1d over [N, C] or [N, C, L].
class BatchNorm1d : public BatchNorm {
public:
  explicit BatchNorm1d(int64_t num_features, double eps = 1e-5, double momentum = 0.1, bool affine = true,
                       bool track_running_stats = true, InitOptions init = {})
      : BatchNorm("BatchNorm1d", {2, 3}, "[N, C] or [N, C, L]", num_features, eps, momentum, affine,
                  track_running_stats, init) {}
};

/// torch.nn.BatchNorm2d over [N, C, H, W].
class BatchNorm2d : public BatchNorm {
public:
  explicit BatchNorm2d(int64_t num_features, double eps = 1e-5, double momentum = 0.1, bool affine = true,
                       bool track_running_stats = true, InitOptions init = {})
      : BatchNorm("BatchNorm2d", {4}, "NCHW", num_features, eps, momentum, affine, track_running_stats, init) {}
};

/// torch.nn.MaxPool2d and AvgPool2d (stride defaults to the kernel size).
class MaxPool2d : public Module {
public:
  explicit MaxPool2d(Pool2dOptions options) : options_(options) {}
  Tensor forward(const Tensor& input) override { return max_pool2d(input, options_); }

private:
  Pool2dOptions options_;
};
class AvgPool2d : public Module {
public:
  explicit AvgPool2d(Pool2dOptions options) : options_(options) {}
  Tensor forward(const Tensor& input) override { return avg_pool2d(input, options_); }

private:
  Pool2dOptions options_;
};

/// torch.nn.AdaptiveAvgPool2d; output_size {1, 1} (global average pooling) only.
class AdaptiveAvgPool2d : public Module {
public:
  explicit AdaptiveAvgPool2d(Pair output_size = {1, 1});
  Tensor forward(const Tensor& input) override { return adaptive_avg_pool2d(input, outputSize_); }

private:
  Pair outputSize_;
};

/// Passes its input through (torch.nn.Identity).
class Identity : public Module {
public:
  Tensor forward(const Tensor& input) override { return input; }
};

/// Chains modules; children are named "0", "1", ... as in PyTorch:
///   Sequential model(Flatten(), Linear(784, 512), ReLU(), Linear(512, 10));
class Sequential : public Module {
public:
  Sequential() = default;
  // A lone Sequential argument is a copy or a move, not a nested child.
  template <typename... Ms>
    requires(sizeof...(Ms) > 0 && (std::is_base_of_v<Module, std::decay_t<Ms>> && ...) &&
             !(sizeof...(Ms) == 1 && (std::is_same_v<std::decay_t<Ms>, Sequential> && ...)))
  explicit Sequential(Ms&&... modules) {
    (push_back(std::make_shared<std::decay_t<Ms>>(std::forward<Ms>(modules))), ...);
  }

  /// Appends a child named by its index.
  void push_back(std::shared_ptr<Module> module);
  template <typename M>
    requires std::is_base_of_v<Module, std::decay_t<M>>
  void push_back(M&& module) {
    push_back(std::shared_ptr<Module>(std::make_shared<std::decay_t<M>>(std::forward<M>(module))));
  }

  size_t size() const { return named_children().size(); }
  Module& operator[](size_t index) const;
  Tensor forward(const Tensor& input) override;
};

//===----------------------------------------------------------------------===//
// ResNet (torchvision's architecture and parameter names)
//===----------------------------------------------------------------------===//

struct ResNetOptions {
  int64_t num_classes = 1000;
  /// imagenet: conv 7x7 stride 2 + max-pool 3x3 stride 2 (torchvision, and
  /// what PyTorch's peer runs on 32x32 images); cifar: conv 3x3 stride 1 and
  /// no max-pool, for small images.
  enum class Stem { imagenet, cifar } stem = Stem::imagenet;
  /// Width of the first stage (64 in the paper); smaller for quick tests.
  int64_t base_width = 64;
  InitOptions init{};
};

/// conv3x3-bn-relu-conv3x3-bn (+ identity or 1x1 conv-bn downsample), relu.
class BasicBlock : public Module {
public:
  static constexpr int64_t kExpansion = 1;
  BasicBlock(int64_t in_channels, int64_t channels, int64_t stride, const InitOptions& init);
  Tensor forward(const Tensor& input) override;

private:
  std::shared_ptr<Conv2d> conv1_, conv2_;
  std::shared_ptr<BatchNorm2d> bn1_, bn2_;
  std::shared_ptr<Sequential> downsample_; ///< null for the identity shortcut
};

/// conv1x1-bn-relu-conv3x3(stride)-bn-relu-conv1x1(4x)-bn (+ shortcut), relu
/// (torchvision's ResNet v1.5: the stride sits on the 3x3 convolution).
class Bottleneck : public Module {
public:
  static constexpr int64_t kExpansion = 4;
  Bottleneck(int64_t in_channels, int64_t channels, int64_t stride, const InitOptions& init);
  Tensor forward(const Tensor& input) override;

private:
  std::shared_ptr<Conv2d> conv1_, conv2_, conv3_;
  std::shared_ptr<BatchNorm2d> bn1_, bn2_, bn3_;
  std::shared_ptr<Sequential> downsample_;
};

/// torchvision.models.ResNet: children conv1, bn1, relu, maxpool, layer1-4,
/// avgpool, fc, so named_parameters() match torchvision's state_dict keys
/// ("layer1.0.conv1.weight"). Convolutions are drawn kaiming-normal
/// (fan_out, ReLU gain) as torchvision initialises them; batch norms start
/// at weight 1, bias 0; fc keeps Linear's default.
class ResNet : public Module {
public:
  enum class Block { basic, bottleneck };
  ResNet(Block block, std::array<int64_t, 4> layers, ResNetOptions options = {});
  Tensor forward(const Tensor& input) override;

private:
  std::shared_ptr<Sequential> makeStage(Block block, int64_t channels, int64_t blocks, int64_t stride,
                                        const InitOptions& init);
  int64_t inChannels_;
  std::shared_ptr<Conv2d> conv1_;
  std::shared_ptr<BatchNorm2d> bn1_;
  std::shared_ptr<Module> maxpool_; ///< Identity for the CIFAR stem
  std::array<std::shared_ptr<Sequential>, 4> stages_;
  std::shared_ptr<Linear> fc_;
};

/// ResNet-18 ([2, 2, 2, 2] basic blocks) and ResNet-50 ([3, 4, 6, 3] bottlenecks).
std::shared_ptr<ResNet> resnet18(ResNetOptions options = {});
std::shared_ptr<ResNet> resnet50(ResNetOptions options = {});

} // namespace jit::nn

#endif // JIT_NN_H
