// Smoke test: Debian's libgloo runs a real all-gather between two processes over TCP on
// loopback, in a binary that also links LibTorch (whose libtorch_cpu.so exports its own copy of
// Gloo's symbols; see docs/design.md). The parent forks one child; both rendezvous through a
// gloo::rendezvous::FileStore in a fresh temporary directory.
#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <gloo/allgather.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>

#include "gtest/gtest.h"

namespace {

constexpr int kWorld = 2;
constexpr int kCount = 5;

// Returns 0 when rank's all-gather result is right, a distinct code per failure otherwise.
int RunRank(int rank, const std::string& dir) {
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = "127.0.0.1";
    auto device = gloo::transport::tcp::CreateDevice(attr);
    gloo::rendezvous::FileStore store(dir);
    auto context = std::make_shared<gloo::rendezvous::Context>(rank, kWorld);
    context->setTimeout(std::chrono::seconds(30));
    context->connectFullMesh(store, device);

    // The input lives in a LibTorch tensor, as it will in the engine.
    at::Tensor in = at::full({kCount}, static_cast<float>(rank + 1));
    at::Tensor out = at::zeros({kCount * kWorld});
    gloo::AllgatherOptions opts(context);
    opts.setInput(in.data_ptr<float>(), kCount);
    opts.setOutput(out.data_ptr<float>(), kCount * kWorld);
    gloo::allgather(opts);
    for (int r = 0; r < kWorld; ++r) {
      for (int i = 0; i < kCount; ++i) {
        if (out[r * kCount + i].item<float>() != static_cast<float>(r + 1)) return 3;
      }
    }
    return 0;
  } catch (const std::exception& e) {
    fprintf(stderr, "rank %d: %s\n", rank, e.what());
    return 2;
  }
}

TEST(GlooSmoke, TwoProcessAllGatherOnLoopback) {
  char tmpl[] = "/tmp/gloo_smoke_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(RunRank(1, dir));
  const int parent_result = RunRank(0, dir);
  int wstatus = 0;
  ASSERT_EQ(waitpid(child, &wstatus, 0), child);
  ASSERT_TRUE(WIFEXITED(wstatus));
  EXPECT_EQ(WEXITSTATUS(wstatus), 0) << "child rank failed";
  EXPECT_EQ(parent_result, 0) << "parent rank failed";
}

TEST(GlooSmoke, GlooSymbolsBindToDebiansLibgloo) {
  // gloo::allgather must come from libgloo.so, not from the copy inside libtorch_cpu.so: the two
  // were built from different Gloo revisions and their option structs differ.
  Dl_info info;
  ASSERT_NE(dladdr(reinterpret_cast<void*>(&gloo::allgather), &info), 0);
  const std::string object = info.dli_fname;
  EXPECT_NE(object.find("libgloo.so"), std::string::npos) << object;
}

}  // namespace
