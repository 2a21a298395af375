// NCCL smoke program: links NCCL and the CUDA runtime from /usr/local/cuda. Built everywhere the
// toolkit is installed; run (by the "gpu"-tagged test) only on a machine with a GPU, where it
// all-reduces a buffer over one device and checks the sum.
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdio>
#include <vector>

int main() {
  int version = 0;
  if (ncclGetVersion(&version) != ncclSuccess) {
    std::fprintf(stderr, "ncclGetVersion failed\n");
    return 1;
  }
  std::printf("NCCL version code %d\n", version);
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "no CUDA device: this check needs the GPU machine\n");
    return 2;
  }
  ncclComm_t comm;
  int dev = 0;
  if (ncclCommInitAll(&comm, 1, &dev) != ncclSuccess) return 3;
  constexpr int kCount = 1024;
  float* buf = nullptr;
  cudaMalloc(&buf, kCount * sizeof(float));
  std::vector<float> host(kCount, 2.0f);
  cudaMemcpy(buf, host.data(), kCount * sizeof(float), cudaMemcpyHostToDevice);
  cudaStream_t stream;
  cudaStreamCreate(&stream);
  if (ncclAllReduce(buf, buf, kCount, ncclFloat, ncclSum, comm, stream) != ncclSuccess) return 4;
  cudaStreamSynchronize(stream);
  cudaMemcpy(host.data(), buf, kCount * sizeof(float), cudaMemcpyDeviceToHost);
  for (float v : host) {
    if (v != 2.0f) return 5;  // One rank: the sum is the input.
  }
  ncclCommDestroy(comm);
  std::printf("NCCL all-reduce on 1 GPU: ok\n");
  return 0;
}
