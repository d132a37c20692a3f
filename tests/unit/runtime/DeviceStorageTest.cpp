// Device storage behind the Tensor handle, and the CUDA backend's entry
// points on a machine without a GPU (what CI checks of the CUDA build).

#include "ampjit/runtime/Backend.h"
#include "ampjit/runtime/CudaBackend.h"
#include "ampjit/runtime/Tensor.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <vector>

namespace ampjit::runtime {
namespace {

/// Host bytes labelled as device memory: enough to check that host-only
/// operations refuse them and that the release function runs.
std::shared_ptr<Storage> fakeDeviceStorage(std::size_t bytes, int* releases) {
  auto* data = static_cast<std::byte*>(std::calloc(bytes, 1));
  return Storage::adopt(data, bytes, Device::Cuda, [releases](std::byte* pointer) {
    ++*releases;
    std::free(pointer);
  });
}

TEST(DeviceStorage, HostOnlyOperationsRefuseDeviceTensors) {
  int releases = 0;
  {
    Expected<Tensor> device = Tensor::wrap(TensorType{DType::F32, {4}}, fakeDeviceStorage(16, &releases));
    ASSERT_TRUE(device.ok()) << device.message();
    EXPECT_EQ(device->device(), Device::Cuda);
    Expected<Tensor> copy = device->clone();
    ASSERT_FALSE(copy.ok());
    EXPECT_NE(copy.message().find("copy a CUDA tensor through its backend"), std::string::npos) << copy.message();
    EXPECT_FALSE(device->bitwiseEqual(*device)) << "device bytes are never compared on the host";
    Tensor host = *Tensor::allocate(DType::F32, {4});
    EXPECT_EQ(host.device(), Device::Host);
  }
  EXPECT_EQ(releases, 1) << "the last handle gives the bytes back through the backend's release";
}

TEST(DeviceStorage, WrapRejectsStorageTooSmallForTheType) {
  int releases = 0;
  Expected<Tensor> tooSmall = Tensor::wrap(TensorType{DType::F64, {4}}, fakeDeviceStorage(16, &releases));
  ASSERT_FALSE(tooSmall.ok());
  EXPECT_NE(tooSmall.message().find("cannot hold a tensor of type f64[4]"), std::string::npos) << tooSmall.message();
}

TEST(DeviceStorage, ExchangingBytesMovesEveryHandleAndEachReleaseTravelsWithItsBytes) {
  // How a speculative update's second buffer becomes the state's: every
  // handle of the state's storage sees the new bytes, and each allocation
  // is still given back once, through its own release.
  int stateReleases = 0, secondReleases = 0, otherReleases = 0;
  {
    std::shared_ptr<Storage> state = fakeDeviceStorage(16, &stateReleases);
    std::shared_ptr<Storage> second = fakeDeviceStorage(16, &secondReleases);
    Tensor handle = *Tensor::wrap(TensorType{DType::F32, {4}}, state), alias = handle;
    std::byte *stateBytes = state->data(), *secondBytes = second->data();
    ASSERT_TRUE(state->exchangeBytes(*second));
    EXPECT_EQ(handle.bytes(), secondBytes);
    EXPECT_EQ(alias.bytes(), secondBytes);
    EXPECT_EQ(second->data(), stateBytes);

    std::shared_ptr<Storage> larger = fakeDeviceStorage(32, &otherReleases);
    EXPECT_FALSE(state->exchangeBytes(*larger)) << "sizes differ";
    EXPECT_FALSE(state->exchangeBytes(*state)) << "itself";
    Expected<std::shared_ptr<Storage>> host = Storage::allocate(16);
    ASSERT_TRUE(host.ok());
    EXPECT_FALSE(state->exchangeBytes(**host)) << "devices differ";
    EXPECT_EQ(handle.bytes(), secondBytes) << "a refused exchange changes nothing";
    second.reset();
    EXPECT_EQ(stateReleases, 1) << "the state's first bytes went with the second storage";
    EXPECT_EQ(secondReleases, 0);
  }
  EXPECT_EQ(secondReleases, 1);
  EXPECT_EQ(otherReleases, 1);
}

TEST(PendingHostRead, AHostValueIsTakenWhenAskedForAndKeptOnceArrived) {
  Tensor value = *Tensor::fromDoubles(DType::F32, {3}, std::vector<double>{1.5, -2, 4});
  Expected<PendingHostRead> read = PendingHostRead::start(value, nullptr);
  ASSERT_TRUE(read.ok()) << read.message();
  // A write after the read was asked for does not reach what it returns.
  *reinterpret_cast<float*>(value.bytes()) = 99;
  EXPECT_TRUE(read->ready());
  Expected<Tensor> first = read->wait();
  ASSERT_TRUE(first.ok()) << first.message();
  EXPECT_EQ(first->toDoubles(), (std::vector<double>{1.5, -2, 4}));
  EXPECT_EQ(first->device(), Device::Host);
  Expected<Tensor> again = read->wait();
  ASSERT_TRUE(again.ok()) << again.message();
  EXPECT_EQ(again->bytes(), first->bytes()) << "a second wait returns what arrived, not a new copy";
}

TEST(PendingHostRead, ADeviceValueWithoutTheBackendThatWroteItIsAClearError) {
  int releases = 0;
  Tensor device = *Tensor::wrap(TensorType{DType::F32, {4}}, fakeDeviceStorage(16, &releases));
  Expected<PendingHostRead> read = PendingHostRead::start(device, nullptr);
  ASSERT_FALSE(read.ok());
  EXPECT_NE(read.message().find("without the backend that wrote it"), std::string::npos) << read.message();
}

TEST(CudaBackend, WithoutADeviceCreatingItIsAClearError) {
  if (cudaDeviceCount() > 0)
    GTEST_SKIP() << "this machine has a CUDA device";
  Expected<std::unique_ptr<CudaBackend>> backend = createCudaBackend();
  ASSERT_FALSE(backend.ok());
  if (cudaBackendBuilt())
    EXPECT_NE(backend.message().find("no CUDA device is available"), std::string::npos) << backend.message();
  else
    EXPECT_NE(backend.message().find("has no CUDA backend"), std::string::npos) << backend.message();
}

} // namespace
} // namespace ampjit::runtime
