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

#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace jit::nn {

/// A (name, tensor) pair of a module's state, name dotted as in PyTorch ("0.weight").
using NamedTensor = std::pair<std::string, Tensor>;

class Module {
public:
  Module() = default;
  virtual ~Module() = default;
  Module(const Module&) = default;
  Module(Module&&) = default;
  Module& operator=(const Module&) = default;
  Module& operator=(Module&&) = default;

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
  bool is_training() const { return training_; }

  /// Drops (or zero-fills) every parameter's gradient.
  void zero_grad(bool set_to_none = true);

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
  bool training_ = true;
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
/// first, row-major.
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

} // namespace jit::nn

#endif // JIT_NN_H
