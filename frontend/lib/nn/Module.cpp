// jit::nn::Module and the standard layers. Every forward is written with
// the public jit:: ops, so it records through the one dispatch function.

#include "jit/nn.h"

#include "Dispatch.h"
#include "Init.h"

#include "jit/Autograd.h"

#include <algorithm>
#include <cmath>

namespace jit::nn {

// --- Module -----------------------------------------------------------------------

namespace {
/// Names a newly registered entry for traced steps' plans and messages, under
/// its module's place; a tensor registered in two places keeps its first name.
void nameEntry(const std::string& name, const Tensor& tensor, const std::shared_ptr<detail::ModulePlace>& place) {
  detail::StateName& stateName = tensor.impl().name;
  if (stateName.text.empty())
    stateName = detail::StateName{.text = name, .module = place};
}
} // namespace

Module::Module() : place_(std::make_shared<detail::ModulePlace>()) {}

void Module::checkNewName(const std::string& name) const {
  // '.' separates the levels of a dotted state name, so it cannot be part of one.
  if (name.empty() || name.find('.') != std::string::npos)
    throw Error("nn::Module: name '" + name + "' must be non-empty and contain no '.'");
  auto taken = [&](const auto& entries) {
    for (const auto& entry : entries)
      if (entry.first == name)
        return true;
    return false;
  };
  if (taken(parameters_) || taken(buffers_) || taken(children_))
    throw Error("nn::Module: name '" + name + "' is already registered");
}

Tensor Module::register_parameter(std::string name, Tensor tensor, bool requires_grad) {
  checkNewName(name);
  if (!tensor.defined())
    throw Error("nn::Module: parameter '" + name + "' is an undefined tensor");
  if (requires_grad)
    tensor.requires_grad_(true);
  nameEntry(name, tensor, place_);
  parameters_.emplace_back(std::move(name), tensor);
  return tensor;
}

Tensor Module::register_buffer(std::string name, Tensor tensor) {
  checkNewName(name);
  if (!tensor.defined())
    throw Error("nn::Module: buffer '" + name + "' is an undefined tensor");
  nameEntry(name, tensor, place_);
  buffers_.emplace_back(std::move(name), tensor);
  return tensor;
}

void Module::addChild(std::string name, std::shared_ptr<Module> child) {
  checkNewName(name);
  if (!child)
    throw Error("nn::Module: child module '" + name + "' is null");
  // A module registered twice (shared between two parents) keeps its first place.
  if (!child->place_->registered)
    *child->place_ = detail::ModulePlace{.name = name, .registered = true, .parent = place_};
  children_.emplace_back(std::move(name), std::move(child));
}

void Module::collect(const std::string& prefix, bool parameters, bool buffers,
                     std::vector<NamedTensor>& out) const {
  if (parameters)
    for (const auto& [name, tensor] : parameters_)
      out.emplace_back(prefix + name, tensor);
  if (buffers)
    for (const auto& [name, tensor] : buffers_)
      out.emplace_back(prefix + name, tensor);
  for (const auto& [name, child] : children_) {
    std::string childPrefix = prefix;
    childPrefix += name;
    childPrefix += '.';
    child->collect(childPrefix, parameters, buffers, out);
  }
}

std::vector<NamedTensor> Module::named_parameters() const {
  std::vector<NamedTensor> out;
  collect("", true, false, out);
  return out;
}

std::vector<NamedTensor> Module::named_buffers() const {
  std::vector<NamedTensor> out;
  collect("", false, true, out);
  return out;
}

std::vector<NamedTensor> Module::state_dict() const {
  std::vector<NamedTensor> out;
  collect("", true, true, out);
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& entry : named_parameters())
    out.push_back(std::move(entry.second));
  return out;
}

bool Module::is_training() const {
  detail::noteTrainingModeRead(training_, *this);
  return *training_;
}

Module& Module::train(bool on) {
  *training_ = on;
  for (auto& child : children_)
    child.second->train(on);
  return *this;
}

void Module::zero_grad(bool set_to_none) {
  for (Tensor& parameter : parameters())
    parameter.zero_grad(set_to_none);
}

Module& Module::requires_grad_(bool requires_grad) {
  for (Tensor& parameter : parameters())
    parameter.requires_grad_(requires_grad);
  return *this;
}

std::vector<std::pair<std::string, std::shared_ptr<Module>>> Module::named_modules() {
  // A non-owning handle to this module: the caller owns it.
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> out = {{"", std::shared_ptr<Module>(this, [](Module*) {})}};
  for (auto& [name, child] : children_)
    for (auto& [below, module] : child->named_modules())
      out.emplace_back(below.empty() ? name : name + "." + below, below.empty() ? child : module);
  return out;
}

Module& Module::apply(const std::function<void(Module&)>& fn) {
  for (auto& child : children_)
    child.second->apply(fn);
  fn(*this);
  return *this;
}

// --- layers -----------------------------------------------------------------------


Linear::Linear(int64_t in_features, int64_t out_features, bool hasBias, InitOptions options)
    : inFeatures_(in_features), outFeatures_(out_features) {
  if (in_features <= 0 || out_features <= 0)
    throw Error("nn::Linear: in_features (" + std::to_string(in_features) + ") and out_features (" +
                std::to_string(out_features) + ") must be positive");
  // PyTorch: kaiming_uniform_(a=sqrt(5)) on [out, in] is bound
  // sqrt(6 / ((1 + 5) * fan_in)) = 1/sqrt(fan_in); the bias uses the same bound.
  double bound = 1.0 / std::sqrt(double(in_features));
  weight = register_parameter("weight", detail::uniformTensor({out_features, in_features}, bound, options));
  if (hasBias)
    bias = register_parameter("bias", detail::uniformTensor({out_features}, bound, options));
}

Tensor Linear::forward(const Tensor& input) {
  if (input.dim() < 1 || input.size(-1) != inFeatures_) {
    std::string shape;
    // Appended piecewise: GCC 12 warns falsely (-Wrestrict) on chained string concatenation.
    for (int64_t d : input.shape()) {
      if (!shape.empty())
        shape += 'x';
      shape += std::to_string(d);
    }
    throw Error("nn::Linear(" + std::to_string(inFeatures_) + ", " + std::to_string(outFeatures_) + "): input " +
                std::string(dtype_name(input.dtype())) + "[" + shape + "] must have last dimension " +
                std::to_string(inFeatures_));
  }
  return linear(input, weight, bias);
}

LayerNorm::LayerNorm(Shape normalized_shape, double eps, bool elementwise_affine, InitOptions options)
    : normalizedShape_(std::move(normalized_shape)), eps_(eps) {
  if (normalizedShape_.empty())
    throw Error("nn::LayerNorm: normalized_shape must have at least one dimension");
  if (elementwise_affine) {
    weight = register_parameter("weight", ones(normalizedShape_, options.dtype));
    bias = register_parameter("bias", zeros(normalizedShape_, options.dtype));
  }
}

Tensor LayerNorm::forward(const Tensor& input) { return layer_norm(input, normalizedShape_, weight, bias, eps_); }

Dropout::Dropout(double p, Generator* generator) : p_(p), generator_(generator) {
  if (!(p >= 0.0 && p < 1.0))
    throw Error("nn::Dropout: p must be in [0, 1), got " + std::to_string(p));
}

Embedding::Embedding(int64_t num_embeddings, int64_t embedding_dim, std::optional<int64_t> padding_idx,
                     InitOptions options) {
  if (num_embeddings <= 0 || embedding_dim <= 0)
    throw Error("nn::Embedding: num_embeddings (" + std::to_string(num_embeddings) + ") and embedding_dim (" +
                std::to_string(embedding_dim) + ") must be positive");
  if (padding_idx)
    paddingIdx_ = detail::paddingRow("nn::Embedding", *padding_idx, num_embeddings);
  Tensor table = randn({num_embeddings, embedding_dim}, options.dtype, options.generator);
  if (paddingIdx_) {
    // PyTorch zeroes the padding row at init.
    std::vector<double> values = table.to_vector();
    std::fill_n(values.begin() + *paddingIdx_ * embedding_dim, embedding_dim, 0.0);
    table = tensor(std::span<const double>(values), {num_embeddings, embedding_dim}, options.dtype);
  }
  weight = register_parameter("weight", table);
}

Tensor Embedding::forward(const Tensor& indices) { return embedding(indices, weight, paddingIdx_); }

Tensor LeakyReLU::forward(const Tensor& input) {
  Tensor zero = scalar_tensor(0.0, input.dtype());
  return where(input > zero, input, input * negativeSlope_);
}

Tensor Dropout::forward(const Tensor& input) {
  // In eval mode (or with p = 0) no op runs at all: the module is the identity.
  if (!is_training() || p_ == 0.0)
    return input;
  return dropout(input, p_, true, generator_);
}

Tensor Flatten::forward(const Tensor& input) {
  int64_t rank = input.dim();
  // A scalar flattens to one element, as torch.flatten does.
  if (rank == 0)
    return reshape(input, {1});
  int64_t start = startDim_ < 0 ? startDim_ + rank : startDim_;
  int64_t end = endDim_ < 0 ? endDim_ + rank : endDim_;
  if (start < 0 || start >= rank || end < 0 || end >= rank || start > end)
    throw Error("nn::Flatten(" + std::to_string(startDim_) + ", " + std::to_string(endDim_) +
                "): dimensions out of range for an input of rank " + std::to_string(rank));
  Shape shape;
  int64_t merged = 1;
  for (int64_t d = 0; d < rank; ++d) {
    if (d < start || d > end)
      shape.push_back(input.size(d));
    else {
      merged *= input.size(d);
      if (d == end)
        shape.push_back(merged);
    }
  }
  return reshape(input, std::move(shape));
}

void Sequential::push_back(std::shared_ptr<Module> module) {
  register_module(std::to_string(size()), std::move(module));
}

Module& Sequential::operator[](size_t index) const {
  if (index >= size())
    throw Error("nn::Sequential: index " + std::to_string(index) + " out of range for " + std::to_string(size()) +
                " modules");
  return *named_children()[index].second;
}

Tensor Sequential::forward(const Tensor& input) {
  Tensor x = input;
  for (const auto& child : named_children())
    x = child.second->forward(x);
  return x;
}

} // namespace jit::nn

namespace jit::detail {

Tensor uniformTensor(Shape shape, double bound, const nn::InitOptions& options) {
  Generator& generator = options.generator ? *options.generator : default_generator();
  return drawnTensor(
      std::move(shape), options.dtype, [&] { return (2.0 * generator.next_uniform() - 1.0) * bound; },
      "jit::nn initialisation");
}

} // namespace jit::detail
