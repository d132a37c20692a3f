#ifndef AMPJIT_FRONTEND_LIB_OPTIM_PARAMETERGROUPS_H
#define AMPJIT_FRONTEND_LIB_OPTIM_PARAMETERGROUPS_H

// What every optimizer's constructor does with its parameter groups
// (SGDGroup, AdamGroup, RMSpropGroup, AdagradGroup): each has `params` and an
// optional `lr`.

#include "jit/Tensor.h"

#include <string>
#include <vector>

namespace jit::detail {

template <typename Group> std::vector<std::vector<Tensor>> parametersOf(const std::vector<Group>& groups) {
  std::vector<std::vector<Tensor>> params;
  for (const Group& group : groups)
    params.push_back(group.params);
  return params;
}

template <typename Group> std::vector<double> lrsOf(const std::vector<Group>& groups, double fallback) {
  std::vector<double> lrs;
  for (const Group& group : groups)
    lrs.push_back(group.lr.value_or(fallback));
  return lrs;
}

/// "Adam", or "Adam group 2" when there are several groups (error messages).
inline std::string groupLabel(const char* optimizer, size_t group, size_t count) {
  return count == 1 ? std::string(optimizer) : std::string(optimizer) + " group " + std::to_string(group);
}

} // namespace jit::detail

#endif // AMPJIT_FRONTEND_LIB_OPTIM_PARAMETERGROUPS_H
