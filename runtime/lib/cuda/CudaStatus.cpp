// Errors of the CUDA runtime and libraries as Status, and the lazily created
// cuDNN handle (DeviceStep.h).

#include "DeviceStep.h"

namespace ampjit::runtime::cuda {

Status cudaFailure(cudaError_t error, const std::string& what) {
  return Status::error(what + ": " + cudaGetErrorName(error) + ": " + cudaGetErrorString(error));
}

Status cublasFailure(cublasStatus_t status, const std::string& what) {
  return Status::error(what + ": cuBLASLt " + cublasLtGetStatusName(status) + ": " +
                       cublasLtGetStatusString(status));
}

Status cudnnFailure(cudnnStatus_t status, const std::string& what) {
  return Status::error(what + ": cuDNN " + cudnnGetErrorString(status));
}

Expected<cudnnHandle_t> DeviceContext::cudnnHandle() {
  if (cudnn == nullptr) {
    cudnnStatus_t status = cudnnCreate(&cudnn);
    if (status != CUDNN_STATUS_SUCCESS) {
      cudnn = nullptr;
      return cudnnFailure(status, "creating the cuDNN handle");
    }
  }
  return cudnn;
}

} // namespace ampjit::runtime::cuda
